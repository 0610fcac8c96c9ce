"""Keep freed memory for the next array instead of giving it back to the operating system.

Every op makes new arrays, and a training step makes and frees the same few hundred arrays
again and again. With glibc's default settings, a large array (above a threshold that starts
at 128 KiB) is a fresh ``mmap`` of zeroed pages, and freeing it unmaps them; memory freed at
the top of the heap is handed back too. The next step then pays a page fault for every 4 KiB
it writes into the "new" memory, in every op. PyTorch keeps its freed blocks for reuse; NumPy
relies on ``malloc``.

:func:`keep_freed_memory` asks glibc (through ``mallopt``) to serve arrays below 32 MiB from
the heap and to keep up to 1 GiB of freed heap for reuse. ``import tensorlab`` calls it once
for the process, unless the environment sets ``TENSORLAB_KEEP_FREED_MEMORY=0``. The price:
the process keeps its peak memory instead of shrinking after a large transient array. Where
the C library is not glibc (macOS, musl), nothing changes.
"""

from __future__ import annotations

import ctypes
import os

_M_TRIM_THRESHOLD = -1  # mallopt parameter numbers, from glibc's <malloc.h>
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # the largest value glibc accepts on 64-bit systems
TRIM_THRESHOLD = 1 << 30

applied = False  # whether keep_freed_memory() changed the settings in this process


def keep_freed_memory() -> bool:
    """Set glibc's thresholds as the module docstring says; True if they were set."""
    global applied
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    applied = bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    return applied


def wanted() -> bool:
    """False when the environment opts out (``TENSORLAB_KEEP_FREED_MEMORY=0``)."""
    return os.environ.get("TENSORLAB_KEEP_FREED_MEMORY", "1") != "0"
