"""tl.set_default_device: where tensors and parameters go when no device is named (the switch
behind TENSORLAB_TEST_DEVICE=cuda). On the CPU-only machines of CI only the "cpu" case and the
refusals run; the "cuda" case runs where CuPy and a GPU are present."""

from __future__ import annotations

import pytest

import gpt
import nn
import tensorlab as tl
from tensorlab.backend import device_of


@pytest.fixture
def restore_default():
    before = tl.default_device()
    yield
    tl.set_default_device(before)


def test_unknown_device_is_refused_and_the_default_kept(restore_default):
    before = tl.default_device()
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        tl.set_default_device("tpu")
    assert tl.default_device() == before


def test_everything_made_without_a_device_goes_to_the_default(device, restore_default):
    made_on_the_default(device)


def made_on_the_default(device: str) -> None:
    """With ``device`` the default, every creation function, layer and model puts its tensors
    there; a device named explicitly still wins."""
    tl.set_default_device(device)
    made = [
        tl.tensor([1.0, 2.0]),
        tl.zeros(2),
        tl.ones(2),
        tl.full(2, 3.0),
        tl.arange(3),
        tl.eye(2),
        tl.randn(2),
        tl.rand(2),
        tl.randint(0, 5, 3),
    ]
    assert {t.device for t in made} == {device}
    model = gpt.GPT(gpt.GPTConfig(vocab_size=7, block_size=4, n_layer=1, n_head=2, d_model=8))
    assert {device_of(p.data) for p in model.parameters()} == {device}
    layers = [nn.Linear(2, 3), nn.LayerNorm(3), nn.SinusoidalPositionalEncoding(4, max_len=8)]
    assert {p.device for m in layers for p in m.parameters()} | {layers[2].pe.device} == {device}
    logits, _ = model([[1, 2, 3]])  # a list of ids goes to the model's device
    assert logits.device == device
    assert tl.tensor([1.0], device="cpu").device == "cpu"  # a named device still wins


def test_the_default_device_on_cupy_emulated_by_numpy(monkeypatch, restore_default):
    """The "cuda" case of the test above on CuPy emulated by NumPy (tests/fake_cupy.py), so
    that CI's CPU machines run it too; and the ``*_like`` functions follow their tensor, not
    the default."""
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    made_on_the_default("cuda")
    x = tl.zeros(2, 3)
    tl.set_default_device("cpu")
    likes = [tl.randn_like(x), tl.rand_like(x), tl.zeros_like(x), tl.full_like(x, 2.0)]
    assert {t.device for t in likes} == {"cuda"}
