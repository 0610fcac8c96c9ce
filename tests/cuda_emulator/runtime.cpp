// The CUDA emulator's scheduler: every thread of a block is a fiber (ucontext), run one at a
// time on the calling OS thread (tests/cuda_emulator.py).
//
// Blocks run one after another (blockIdx.x fastest). Within a block the scheduler resumes
// each fiber in turn (threadIdx.x fastest; the reverse order when asked) and a fiber runs
// until it reaches a barrier or returns. A barrier is a switch back to the scheduler:
//
// - __syncthreads: the fiber waits until every thread of the block waits there too; then
//   all of them go on. Threads that returned while others wait at it are an error (CUDA
//   calls that divergent barrier undefined behaviour: a hang or garbage on a GPU).
// - the warp functions (__shfl_*_sync, __syncwarp, __ballot_sync, ...): the fiber deposits
//   a value and waits until the other threads of its warp (32 consecutive linear thread
//   indices) have deposited theirs; then they read each other's. Slots alternate between two
//   buffers, so a thread that goes on to its next shuffle cannot overwrite a value another
//   thread of its warp has yet to read.
//
// Compiled once into an object that is linked into every kernel module (a shared object of
// its own): each module has its own scheduler state and its own built-in variables, all
// hidden, so modules loaded at the same time do not see each other's.
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_emulator.h"

uint3 threadIdx = {0, 0, 0};
uint3 blockIdx = {0, 0, 0};
dim3 blockDim;
dim3 gridDim;

// The __shared__ variables of this module: the linker defines these when the section exists.
extern "C" char __start_emu_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_emu_shared[] __attribute__((weak, visibility("hidden")));

namespace {

enum State : unsigned char { kRunnable, kAtBarrier, kAtWarp, kDone };

constexpr size_t kStackSize = 256 * 1024;  // per fiber, below a guard page
constexpr size_t kWarp = 32;

struct Fiber {
  ucontext_t context;  // never moved once made: it points into itself
  State state;
  unsigned warp_generation;  // warp exchanges done: picks one of the two slot buffers
  uint3 index;
};

Fiber* g_fibers = nullptr;  // g_capacity of them, reallocated between launches only
size_t g_capacity = 0;
std::vector<char*> g_stacks;  // one per fiber, kept for later launches
size_t g_page = 0;

ucontext_t g_scheduler;
bool g_in_launch = false;
size_t g_threads = 0;  // in a block
size_t g_warps = 0;
size_t g_current = 0;  // the fiber running now
void (*g_kernel)(void**) = nullptr;
void** g_args = nullptr;
std::vector<unsigned long long> g_slots;  // [2][g_warps][32]
unsigned long long g_lone_slots[kWarp];     // warp functions called outside a launch

void fiber_main(int index) {
  g_kernel(g_args);
  g_fibers[index].state = kDone;
  // returning resumes uc_link: the scheduler
}

bool reserve(size_t threads, std::string& error) {
  if (g_page == 0) g_page = (size_t)sysconf(_SC_PAGESIZE);
  if (threads > g_capacity) {
    delete[] g_fibers;
    g_fibers = new Fiber[threads];
    g_capacity = threads;
  }
  while (g_stacks.size() < threads) {
    void* p = mmap(nullptr, kStackSize + g_page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      error = "cannot map a fiber stack: " + std::string(strerror(errno));
      return false;
    }
    mprotect(p, g_page, PROT_NONE);  // a stack overflow faults instead of corrupting memory
    g_stacks.push_back(static_cast<char*>(p) + g_page);
  }
  return true;
}

// "0..15, 17, 20..31" for the ascending indices given, the first few ranges only.
std::string ranges(const std::vector<size_t>& ids) {
  std::string out;
  size_t shown = 0;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (shown == 6) {
      out += ", ...";
      break;
    }
    if (!out.empty()) out += ", ";
    out += std::to_string(ids[i]);
    if (j > i) out += ".." + std::to_string(ids[j]);
    ++shown;
    i = j + 1;
  }
  return out;
}

void format(std::string& error, const char* fmt, ...) {
  char buffer[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buffer, sizeof buffer, fmt, ap);
  va_end(ap);
  error += buffer;
}

std::string threads(const std::vector<size_t>& ids) {
  const bool linear = blockDim.y > 1 || blockDim.z > 1;
  return std::to_string(ids.size()) + (ids.size() == 1 ? " thread" : " threads") +
         (linear ? " (linear index " : " (threadIdx.x ") + ranges(ids) + ")";
}

// Runs one block to the end. False (with `error`) when its threads cannot all go on.
bool run_block(bool reverse, std::string& error) {
  if (__start_emu_shared != nullptr)  // shared memory holds garbage when a block starts
    memset(__start_emu_shared, 0xff, (size_t)(__stop_emu_shared - __start_emu_shared));
  const size_t n = g_threads;
  for (size_t i = 0; i < n; ++i) {
    Fiber& f = g_fibers[i];
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = g_stacks[i];
    f.context.uc_stack.ss_size = kStackSize;
    f.context.uc_link = &g_scheduler;
    makecontext(&f.context, reinterpret_cast<void (*)()>(fiber_main), 1, (int)i);
    f.state = kRunnable;
    f.warp_generation = 0;
    f.index = uint3{(unsigned)(i % blockDim.x), (unsigned)(i / blockDim.x % blockDim.y),
                    (unsigned)(i / blockDim.x / blockDim.y)};
  }
  for (;;) {
    // One round: every runnable fiber runs until it waits or returns.
    for (size_t k = 0; k < n; ++k) {
      const size_t i = reverse ? n - 1 - k : k;
      Fiber& f = g_fibers[i];
      if (f.state != kRunnable) continue;
      threadIdx = f.index;
      g_current = i;
      swapcontext(&g_scheduler, &f.context);
    }
    std::vector<size_t> done, at_barrier, at_warp;
    for (size_t i = 0; i < n; ++i) {
      const State s = g_fibers[i].state;
      (s == kDone ? done : s == kAtBarrier ? at_barrier : at_warp).push_back(i);
    }
    if (!at_warp.empty()) {
      // Release each warp whose threads all wait at a warp function.
      bool released = false;
      std::vector<size_t> stuck;
      for (size_t w = 0; w < g_warps; ++w) {
        const size_t begin = w * kWarp, end = begin + kWarp < n ? begin + kWarp : n;
        bool all = true, any = false;
        for (size_t i = begin; i < end; ++i) {
          all = all && g_fibers[i].state == kAtWarp;
          any = any || g_fibers[i].state == kAtWarp;
        }
        if (all) {
          for (size_t i = begin; i < end; ++i) g_fibers[i].state = kRunnable;
          released = true;
        } else if (any) {
          for (size_t i = begin; i < end; ++i)
            if (g_fibers[i].state != kAtWarp) stuck.push_back(i);
        }
      }
      if (released) continue;
      format(error,
             "block (%u,%u,%u): %s wait at a warp function (__shfl_*_sync, __syncwarp, "
             "__ballot_sync, ...) while %s of their warps returned or wait at "
             "__syncthreads (every thread of a warp must reach the same warp function)",
             blockIdx.x, blockIdx.y, blockIdx.z, threads(at_warp).c_str(),
             threads(stuck).c_str());
      return false;
    }
    if (done.size() == n) return true;
    if (done.empty()) {  // all wait at __syncthreads: the next phase
      for (size_t i = 0; i < n; ++i) g_fibers[i].state = kRunnable;
      continue;
    }
    format(error,
           "block (%u,%u,%u): %s returned while %s wait at __syncthreads (a barrier must be "
           "reached by every thread of the block or by none)",
           blockIdx.x, blockIdx.y, blockIdx.z, threads(done).c_str(),
           threads(at_barrier).c_str());
    return false;
  }
}

}  // namespace

extern "C" {

void emu_rt_syncthreads(void) {
  if (!g_in_launch) return;
  Fiber& f = g_fibers[g_current];
  f.state = kAtBarrier;
  swapcontext(&f.context, &g_scheduler);
}

const unsigned long long* emu_rt_warp_exchange(unsigned long long value) {
  if (!g_in_launch) {
    g_lone_slots[0] = value;
    return g_lone_slots;
  }
  Fiber& f = g_fibers[g_current];
  const size_t buffer = f.warp_generation++ & 1;
  unsigned long long* slots = &g_slots[(buffer * g_warps + g_current / kWarp) * kWarp];
  slots[g_current % kWarp] = value;
  f.state = kAtWarp;
  swapcontext(&f.context, &g_scheduler);
  return slots;
}

int emu_rt_lane(void) { return g_in_launch ? (int)(g_current % kWarp) : 0; }

int emu_rt_warp_lanes(void) {
  if (!g_in_launch) return 1;
  const size_t begin = g_current / kWarp * kWarp;
  return (int)(g_threads - begin < kWarp ? g_threads - begin : kWarp);
}

// Runs `kernel` (a wrapper that unpacks `args` into the kernel's parameters) on a grid of
// gx*gy*gz blocks of bx*by*bz threads. Returns 0, or 1 with a message in `error`.
EMU_EXPORT int emu_launch(void (*kernel)(void**), void** args, unsigned gx, unsigned gy,
                          unsigned gz, unsigned bx, unsigned by, unsigned bz, int reverse,
                          char* error, size_t error_size) {
  std::string message;
  const size_t n = (size_t)bx * by * bz;
  bool ok = reserve(n, message);
  if (ok) {
    g_kernel = kernel;
    g_args = args;
    g_threads = n;
    g_warps = (n + kWarp - 1) / kWarp;
    g_slots.assign(2 * g_warps * kWarp, 0);
    gridDim = dim3(gx, gy, gz);
    blockDim = dim3(bx, by, bz);
    g_in_launch = true;
    for (unsigned z = 0; ok && z < gz; ++z)
      for (unsigned y = 0; ok && y < gy; ++y)
        for (unsigned x = 0; ok && x < gx; ++x) {
          blockIdx = uint3{x, y, z};
          ok = run_block(reverse != 0, message);
        }
    g_in_launch = false;
  }
  fflush(stdout);  // the kernel's printf output, before Python writes anything
  if (!ok && error_size > 0) snprintf(error, error_size, "%s", message.c_str());
  return ok ? 0 : 1;
}

}  // extern "C"
