"""nn.Module: registration, traversal, modes, hooks, printing, containers, buffers."""

import numpy as np
import pytest

import nn
import tensorlab as tl


class Affine(nn.Module):
    """y = x @ W + b, with W stored (d_in, d_out)."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W = nn.Parameter(tl.randn(d_in, d_out))
        self.b = nn.Parameter(tl.zeros(d_out))

    def forward(self, x):
        return x @ self.W + self.b

    def extra_repr(self):
        return f"{self.W.shape[0]}, {self.W.shape[1]}"


class Tanh(nn.Module):
    def forward(self, x):
        return x.tanh()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Affine(2, 3)
        self.act = Tanh()
        self.blocks = nn.ModuleList([Affine(3, 3), Affine(3, 3)])
        self.scale = nn.Parameter(tl.ones(1))
        self.register_buffer("mask", tl.ones(3))

    def forward(self, x):
        x = self.act(self.first(x))
        for block in self.blocks:
            x = block(x)
        return x * self.scale


# ------------------------------------------------------------------ registration and traversal
def test_named_parameters_order_and_dotted_names():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "first.W", "first.b", "blocks.0.W", "blocks.0.b", "blocks.1.W",
                     "blocks.1.b"]  # fmt: skip
    assert [n for n, _ in net.named_parameters(recurse=False)] == ["scale"]
    assert [n for n, _ in net.first.named_parameters(prefix="first")] == ["first.W", "first.b"]
    assert net.num_parameters() == 1 + (6 + 3) + 2 * (9 + 3)
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in net.parameters())


def test_plain_tensors_and_values_are_not_registered():
    m = nn.Module()
    m.t = tl.ones(2)  # a plain Tensor: an attribute, not a parameter
    m.n = 3
    assert list(m.named_parameters()) == [] and list(m.state_dict()) == []
    m.p = nn.Parameter(tl.ones(2))
    m.p = tl.ones(2)  # re-assigning a plain tensor unregisters the parameter
    assert list(m.named_parameters()) == []
    m.q = nn.Parameter(tl.ones(2))
    del m.q
    assert list(m.named_parameters()) == [] and not hasattr(m, "q")


def test_assigning_before_init_is_a_clear_error():
    class Bad(nn.Module):
        def __init__(self):
            self.W = nn.Parameter(tl.ones(1))

    with pytest.raises(AttributeError, match="super\\(\\).__init__"):
        Bad()


def test_shared_parameter_counted_once():
    a, b = Affine(2, 2), Affine(2, 2)
    b.W = a.W  # weight tying
    m = nn.Sequential(a, b)
    names = [n for n, _ in m.named_parameters()]
    assert names == ["0.W", "0.b", "1.b"]
    assert m.num_parameters() == 4 + 2 + 2
    # state_dict names a tied tensor under each of its names (as PyTorch does), so that
    # load_state_dict finds every name it expects
    assert sorted(m.state_dict()) == ["0.W", "0.b", "1.W", "1.b"]
    m.load_state_dict(m.state_dict())
    assert b.W is a.W


def test_shared_module_visited_once():
    shared = Affine(2, 2)
    m = nn.ModuleList([shared, shared])
    assert len(list(m.modules())) == 2  # the list and the one shared child
    assert len(list(m.parameters())) == 2


def test_modules_and_children():
    net = Net()
    assert [n for n, _ in net.named_children()] == ["first", "act", "blocks"]
    assert list(net.children()) == [net.first, net.act, net.blocks]
    names = [n for n, _ in net.named_modules()]
    assert names == ["", "first", "act", "blocks", "blocks.0", "blocks.1"]
    assert list(net.modules())[0] is net


def test_apply_visits_children_first():
    net = Net()
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen[-1] == "Net" and seen.count("Affine") == 3


# ------------------------------------------------------------------ modes and gradients
def test_train_eval_propagate():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.blocks.train()
    assert net.blocks[1].training and not net.training
    net.train()
    assert all(m.training for m in net.modules())


def test_evaluating_restores_each_submodules_own_mode():
    """A model training with one part kept in eval mode (say, a frozen block) comes out of
    nn.evaluating exactly as it went in, and without a graph recorded inside."""
    net = Net()
    net.blocks[0].eval()
    before = {name: m.training for name, m in net.named_modules()}
    with nn.evaluating(net):
        assert not any(m.training for m in net.modules())
        assert not net(tl.ones(1, 2)).requires_grad
    assert {name: m.training for name, m in net.named_modules()} == before
    assert not net.blocks[0].training and net.blocks[1].training


def test_zero_grad():
    net = Net()
    net(tl.randn(4, 2)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.data.any() for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


def test_zero_grad_clears_non_finite_gradients():
    """set_to_none=False after a step whose gradients overflowed (float16 training, a
    diverging loss) must leave zeros: it gave NaN where the gradient was ±∞ or NaN
    (computed as grad · 0), so every later accumulation stayed NaN."""
    net = Net()
    net(tl.randn(4, 2)).sum().backward()
    g = net.first.W.grad
    g.data.reshape(-1)[:3] = tl.tensor([np.inf, -np.inf, np.nan], device=g.device).data
    net.zero_grad(set_to_none=False)
    for q in net.parameters():
        assert q.grad.dtype == q.dtype and q.grad.shape == q.shape
        np.testing.assert_array_equal(q.grad.data, 0)


def test_forward_matches_manual_computation():
    tl.manual_seed(0)
    layer = Affine(2, 3)
    x = np.array([[1.0, 2.0]], dtype=np.float32)
    expected = x @ layer.W.numpy() + layer.b.numpy()
    np.testing.assert_allclose(layer(tl.tensor(x)).data, expected, rtol=1e-6)


# ------------------------------------------------------------------ hooks
def test_forward_hook_sees_input_and_output():
    layer = Affine(2, 3)
    seen = []
    handle = layer.register_forward_hook(lambda m, inputs, out: seen.append((m, inputs, out)))
    x = tl.randn(4, 2)
    y = layer(x)
    (m, inputs, out), = seen  # fmt: skip
    assert m is layer and inputs[0] is x and out is y
    handle.remove()
    layer(x)
    assert len(seen) == 1
    handle.remove()  # removing twice is harmless


def test_forward_hook_can_replace_output():
    layer = Affine(2, 3)
    layer.register_forward_hook(lambda m, inputs, out: out * 0)
    assert not layer(tl.randn(4, 2)).data.any()


def test_forward_pre_hook_can_replace_input():
    layer = Affine(2, 3)
    layer.register_forward_pre_hook(lambda m, inputs: tl.zeros((1, 2)))
    np.testing.assert_array_equal(layer(tl.randn(4, 2)).data, layer.b.data[None])


def test_hooks_run_in_order_and_removal_is_exact():
    layer = Affine(2, 3)
    calls = []
    h = lambda m, i, o: calls.append("h")  # noqa: E731
    g = lambda m, i, o: calls.append("g")  # noqa: E731
    first = layer.register_forward_hook(h)
    layer.register_forward_hook(g)
    first.remove()
    layer.register_forward_hook(g)  # the same function twice: it runs twice
    layer(tl.randn(1, 2))
    assert calls == ["g", "g"]


def test_a_hook_handle_as_a_with_block_removes_the_hook_at_its_end():
    layer = Affine(2, 3)
    with layer.register_forward_hook(lambda m, i, o: o * 0):
        assert not layer(tl.randn(1, 2)).data.any()
    assert layer(tl.ones((1, 2))).data.any() and not layer._forward_hooks
    with pytest.raises(KeyError), layer.register_forward_pre_hook(lambda m, i: None):
        raise KeyError("an error inside the block")
    assert not layer._forward_pre_hooks


def test_hook_point_is_identity_with_hooks():
    hp = nn.HookPoint()
    cache = {}
    hp.register_forward_hook(lambda m, i, o: cache.setdefault("act", o))
    x = tl.randn(2, 2)
    assert hp(x) is x and cache["act"] is x


# ------------------------------------------------------------------ printing
def test_repr_tree():
    text = repr(Net())
    assert text.splitlines() == [
        "Net(",
        "  (first): Affine(2, 3)",
        "  (act): Tanh()",
        "  (blocks): ModuleList(",
        "    (0): Affine(3, 3)",
        "    (1): Affine(3, 3)",
        "  )",
        ")",
    ]
    assert repr(nn.Parameter(tl.ones(1))).startswith("Parameter(tensor(")


# ------------------------------------------------------------------ containers
def test_sequential():
    seq = nn.Sequential(Affine(2, 3), Tanh(), Affine(3, 1))
    x = tl.randn(5, 2)
    expected = seq[2](seq[1](seq[0](x)))
    np.testing.assert_array_equal(seq(x).data, expected.data)
    assert len(seq) == 3 and isinstance(seq[-1], Affine) and list(seq)[1] is seq[1]
    assert [n for n, _ in seq.named_parameters()] == ["0.W", "0.b", "2.W", "2.b"]


def test_module_list():
    ml = nn.ModuleList()
    assert len(ml) == 0
    ml.append(Affine(1, 1)).append(Tanh())
    assert len(ml) == 2 and isinstance(ml[1], Tanh) and [type(m) for m in ml] == [Affine, Tanh]
    assert [n for n, _ in ml.named_parameters()] == ["0.W", "0.b"]


def test_module_dict():
    md = nn.ModuleDict({"enc": Affine(2, 2)})
    md["dec"] = Affine(2, 1)
    assert list(md) == ["enc", "dec"] and "dec" in md and len(md) == 2
    assert list(md.keys()) == ["enc", "dec"] and md["enc"] is list(md.values())[0]
    assert [k for k, _ in md.items()] == ["enc", "dec"]
    assert [n for n, _ in md.named_parameters()] == ["enc.W", "enc.b", "dec.W", "dec.b"]


# ------------------------------------------------------------------ buffers and state
def test_buffers_persistent_and_not():
    m = nn.Module()
    m.register_buffer("mask", tl.ones(2))
    m.register_buffer("cache", tl.zeros(3), persistent=False)
    assert [n for n, _ in m.named_buffers()] == ["mask", "cache"]
    assert list(m.state_dict()) == ["mask"]
    assert list(m.parameters()) == []


def test_reassigned_buffer_stays_a_buffer():
    m = nn.Module()
    m.register_buffer("running", tl.zeros(2))
    m.running = tl.ones(2)
    assert list(m.state_dict()) == ["running"] and m.state_dict()["running"].tolist() == [1, 1]
    m.register_buffer("tmp", tl.zeros(1), persistent=False)
    m.register_buffer("tmp", tl.zeros(1))  # registered again as persistent
    assert list(m.state_dict()) == ["running", "tmp"]


def test_state_dict_is_copies_and_loads_back():
    net, other = Net(), Net()
    state = net.state_dict()
    assert "mask" in state and state["first.W"].dtype == np.float32
    state["first.W"][...] = 7.0
    assert not (net.first.W.data == 7.0).any()
    version = other.first.W._version
    other.load_state_dict(net.state_dict())
    assert other.first.W._version == version + 1
    for a, b in zip(net.state_dict().values(), other.state_dict().values()):
        np.testing.assert_array_equal(a, b)


def test_optional_parameter():
    m = nn.Module()
    m.register_parameter("bias", None)
    assert m.bias is None and list(m.named_parameters()) == [] and list(m.state_dict()) == []


def test_to_device(device):
    net = Net().to(device)
    assert all(p.device == device for p in net.parameters())
    assert all(b.device == device for b in net.buffers())


def test_load_state_dict_assign_takes_fresh_arrays_without_a_copy():
    """assign=True (PyTorch's flag) makes an array of the parameter's dtype its data, as it is;
    one of another dtype is still converted into a new array; the default always copies."""
    lin = nn.Linear(3, 2, device="cpu")  # (an array on the CPU is the CPU parameter's as it is)
    W = np.arange(6.0, dtype=np.float32).reshape(2, 3).T  # a transposed view, as a loader makes
    b64 = np.ones(2)  # float64: converted
    lin.load_state_dict({"W": W, "b": b64}, assign=True)
    assert lin.W.data is W and lin.b.data is not b64 and lin.b.dtype == np.float32
    lin.load_state_dict({"W": W, "b": b64})
    assert lin.W.data is not W
    np.testing.assert_array_equal(lin.W.data, W)
