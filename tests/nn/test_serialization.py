"""nn.serialization: round trips, interop with the official safetensors reader/writer,
corrupt files, atomic writes, checkpoints that resume bit-identically."""

import json
import os
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nn
import tensorlab as tl
from nn import serialization as ser
from nn.optim import AdamW, cosine_with_warmup
from nn.serialization import SerializationError, load, load_checkpoint, save, save_checkpoint

FORMATS = ["safetensors", "npz"]


# ------------------------------------------------------------------ a small model
class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.W = nn.Parameter(tl.randn(3, 4))
        self.b = nn.Parameter(tl.zeros(4))
        self.register_buffer("mask", tl.tensor(np.tril(np.ones((4, 4), dtype=np.float32))))
        self.register_buffer("cache", tl.zeros(2), persistent=False)

    def forward(self, x):
        return (x @ self.W + self.b).tanh()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.layers = nn.ModuleList([Inner(), Inner()])
        self.out = nn.Parameter(tl.randn(4, 2))

    def forward(self, x):
        return self.layers[1](self.inner(x) @ self.layers[0].W.T) @ self.out


def make(seed):
    tl.manual_seed(seed)
    return Net()


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("fmt", FORMATS)
def test_model_state_round_trip(tmp_path, fmt):
    a, b = make(0), make(1)
    path = tmp_path / f"m.{fmt}"
    save(a.state_dict(), path)
    b.load_state_dict(load(path))
    assert list(b.state_dict()) == list(a.state_dict())
    assert "inner.mask" in a.state_dict() and "inner.cache" not in a.state_dict()
    for (k, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        np.testing.assert_array_equal(x, y, err_msg=k)


@pytest.mark.parametrize("fmt", FORMATS)
def test_nested_state_round_trip(tmp_path, fmt):
    state = {
        "arrays": {"f": np.arange(6.0).reshape(2, 3), "i": np.array([1, -2], dtype=np.int64)},
        "opt": {"state": {0: {"step": 3, "m": np.ones(2, np.float32)}, 7: {}}, "lr": 1e-3},
        "list": [1, 2.5, "x", None, True, [np.zeros((0, 3), np.float16)]],
        "scalar": np.array(2.0),
        "big_int": 2**100,  # e.g. a random generator's state
        "__dunder": "kept",
    }
    path = tmp_path / f"s.{fmt}"
    save(state, path)
    back = load(path)
    assert back["opt"]["state"][0]["step"] == 3 and set(back["opt"]["state"]) == {0, 7}
    assert back["big_int"] == 2**100 and back["__dunder"] == "kept"
    assert back["list"][:5] == [1, 2.5, "x", None, True]
    assert back["list"][5][0].shape == (0, 3) and back["list"][5][0].dtype == np.float16
    np.testing.assert_array_equal(back["arrays"]["f"], state["arrays"]["f"])
    assert back["arrays"]["i"].dtype == np.int64 and back["scalar"].shape == ()
    assert back["opt"]["state"][0]["m"].dtype == np.float32


dtypes = st.sampled_from(["bool", "uint8", "int8", "int16", "int32", "int64", "float16",
                          "float32", "float64", ">f4", ">i8"])  # fmt: skip


@given(
    st.dictionaries(
        st.text("abcdefgh._", min_size=1, max_size=6),
        st.tuples(dtypes, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)),
        max_size=4,
    )
)
def test_any_arrays_round_trip(tmp_path_factory, spec):
    rng = np.random.default_rng(0)
    arrays = {k: np.asarray(rng.standard_normal(s) * 50).astype(dt) for k, (dt, s) in spec.items()}
    d = tmp_path_factory.mktemp("rt")
    for fmt in FORMATS:
        back = load(save(arrays, d / f"a.{fmt}") or d / f"a.{fmt}")
        assert list(back) == list(arrays)
        for k in arrays:
            assert back[k].dtype == arrays[k].dtype.newbyteorder("=") and back[k].flags.writeable
            np.testing.assert_array_equal(back[k], arrays[k])


def test_tensors_and_noncontiguous_arrays(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    save({"t": tl.tensor(a), "nc": a.T, "s": a[::2, 1:]}, tmp_path / "x.safetensors")
    back = load(tmp_path / "x.safetensors")
    np.testing.assert_array_equal(back["t"], a)
    np.testing.assert_array_equal(back["nc"], a.T)
    np.testing.assert_array_equal(back["s"], a[::2, 1:])


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_dtype_round_trips(tmp_path, fmt):
    values = np.array([[0, 1, -2.5], [3.25, 100, -0.0]])
    names = ["bool", "uint8", "int8", "uint16", "int16", "float16", "uint32", "int32", "float32",
             "uint64", "int64", "float64"]  # fmt: skip
    state = {name: values.astype(name) for name in names}
    state["float16_extremes"] = np.array([65504, -65504, 6e-8, np.inf, -np.inf], np.float16)
    save(state, tmp_path / f"d.{fmt}")
    back = load(tmp_path / f"d.{fmt}")
    assert list(back) == list(state)
    for name, a in state.items():
        assert back[name].dtype == a.dtype and back[name].shape == a.shape, name
        np.testing.assert_array_equal(back[name], a, err_msg=name)


def test_bfloat16_round_trips(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="pip install ml_dtypes")
    a = np.array([1.0, -2.5, 3.0e38, 2.0**-120], np.float32).astype(ml_dtypes.bfloat16)
    save({"w": a, "m": {"f": np.ones(2, np.float32)}}, tmp_path / "b.safetensors")
    back = load(tmp_path / "b.safetensors")
    assert back["w"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(back["w"].view(np.uint16), a.view(np.uint16))
    np.testing.assert_array_equal(back["m"]["f"], np.ones(2, np.float32))


def test_bfloat16_in_npz_is_refused_not_saved_as_bytes(tmp_path):
    """The .npy header has no name for ml_dtypes' bfloat16: NumPy writes it as raw 2-byte
    records ('<V2') and loads bytes back, silently. save refuses, naming the array and the
    format that holds it, and leaves no file."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="pip install ml_dtypes")
    a = np.array([1.0, -2.5], np.float32).astype(ml_dtypes.bfloat16)
    with pytest.raises(TypeError) as err:
        save({"m": {"w": a}}, tmp_path / "b.npz")
    assert str(err.value) == (
        "save: array 'm.w' has dtype bfloat16, which .npz cannot hold (it would load as raw "
        "'<V2' records); save it as .safetensors"
    )
    assert os.listdir(tmp_path) == []


def test_bfloat16_file_without_ml_dtypes(tmp_path):
    """A BF16 tensor written by another program: read with ml_dtypes, a clear error without."""
    bits = np.array([0x3F80, 0xC020], np.uint16)  # bfloat16 1.0 and -2.5
    header = {"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}
    path = write_file(tmp_path / "bf.safetensors", json.dumps(header) + "  ", bits.tobytes())
    try:
        import ml_dtypes
    except ImportError:
        assert_serialization_error(path, "tensor 'w' is BF16; .*pip install ml_dtypes")
    else:
        np.testing.assert_array_equal(load(path)["w"].astype(np.float32), [1.0, -2.5])
        assert load(path)["w"].dtype == ml_dtypes.bfloat16


def test_unstorable_values(tmp_path):
    with pytest.raises(ValueError, match="unknown extension '.pt'"):
        save({}, tmp_path / "x.pt")
    with pytest.raises(TypeError, match="cannot store a set"):
        save({"a": {1, 2}}, tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="complex128"):
        save({"a": np.ones(2, complex)}, tmp_path / "x.safetensors")
    with pytest.raises(ValueError, match="both be stored as 'a.b'"):
        save({"a": {"b": np.ones(1)}, "a.b": np.ones(1)}, tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="array 'o' has dtype object"):
        save({"o": np.array([None, 1])}, tmp_path / "x.safetensors")
    assert os.listdir(tmp_path) == []  # every failed write removed its temporary file


# ------------------------------------------------------------------ the official library
def test_files_we_write_are_read_by_safetensors(tmp_path):
    st_np = pytest.importorskip("safetensors.numpy", reason="pip install safetensors")
    state = make(0).state_dict()
    state["ints"] = np.arange(5, dtype=np.int64)
    state["flags"] = np.array([True, False])
    save(state, tmp_path / "m.safetensors")
    theirs = st_np.load_file(tmp_path / "m.safetensors")
    assert set(theirs) == set(state)
    for k in state:
        assert theirs[k].dtype == state[k].dtype
        np.testing.assert_array_equal(theirs[k], state[k])


def test_files_safetensors_writes_are_read_by_us(tmp_path):
    st_np = pytest.importorskip("safetensors.numpy", reason="pip install safetensors")
    state = {
        "w": np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32),
        "h": np.arange(7, dtype=np.float16),
        "i": np.arange(4, dtype=np.int32),
        "scalar": np.array(3.0),
    }
    st_np.save_file(state, tmp_path / "t.safetensors", metadata={"format": "np"})
    back = load(tmp_path / "t.safetensors")  # no tensorlab tree: a flat dict
    assert set(back) == set(state)
    for k in state:
        assert back[k].dtype == state[k].dtype
        np.testing.assert_array_equal(back[k], state[k])


# ------------------------------------------------------------------ damaged files
def saved_file(tmp_path) -> bytes:
    path = tmp_path / "good.safetensors"
    save({"a": np.arange(10.0), "b": {"c": np.ones((2, 3), np.float32)}}, path)
    return path.read_bytes()


def assert_serialization_error(path, match):
    with pytest.raises(SerializationError, match=match) as e:
        load(path)
    assert str(path) in str(e.value)
    assert isinstance(e.value, ValueError)


def test_truncated_files(tmp_path):
    raw = saved_file(tmp_path)
    (n,) = struct.unpack("<Q", raw[:8])
    for cut in [0, 3, 8, 9, 8 + n // 2, 8 + n, 8 + n + 5, len(raw) - 1]:
        path = tmp_path / f"cut{cut}.safetensors"
        path.write_bytes(raw[:cut])
        assert_serialization_error(path, "rejected by safetensors")
    assert_serialization_error(tmp_path / "cut3.safetensors", "3 bytes, too short")
    assert_serialization_error(tmp_path / "cut9.safetensors", f"length says {n} bytes; 1 follow")
    # with the header intact, the message says how much data is missing
    assert_serialization_error(path, f"need {len(raw) - 8 - n} data bytes but {len(raw) - 9 - n}")


def split(raw: bytes) -> tuple[dict, bytes]:
    """A safetensors file's header (as a dict) and its data bytes."""
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def write_file(path, header: dict | bytes | str, data: bytes, length=None):
    text = header if isinstance(header, bytes) else header if isinstance(header, str) else None
    text = json.dumps(header).encode() if text is None else text
    text = text.encode() if isinstance(text, str) else text
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)
    return path


def test_files_the_package_refuses_are_refused(tmp_path):
    """A gap between tensors, bytes after the last one, or one name twice: the official
    reader's rules, with a message that names the file and the tensor."""
    header, data = split(saved_file(tmp_path))
    first, second = sorted(["a", "b.c"], key=lambda k: header[k]["data_offsets"])
    begin, end = header[second]["data_offsets"]
    gap = json.loads(json.dumps(header))
    gap[second]["data_offsets"] = [begin + 8, end + 8]
    path = write_file(tmp_path / "gap.safetensors", gap, data[:begin] + bytes(8) + data[begin:])
    assert_serialization_error(path, f"tensor '{second}' starts at data byte {begin + 8}, not")

    overlap = json.loads(json.dumps(header))  # the second tensor starts 8 bytes early
    overlap[second]["data_offsets"] = [begin - 8, end - 8]
    path = write_file(tmp_path / "overlap.safetensors", overlap, data[:-8])
    assert_serialization_error(
        path, f"tensor '{second}' starts at data byte {begin - 8}, not {begin}"
    )

    path = write_file(tmp_path / "trailing.safetensors", header, data + b"xyz")
    assert_serialization_error(path, "3 bytes trail the last tensor")

    text = json.dumps(header)  # the same name again at the end, with the same entry
    twice = text[:-1] + f', "{first}": {json.dumps(header[first])}}}'
    path = write_file(tmp_path / "twice.safetensors", twice, data)
    assert_serialization_error(path, f"names '{first}' twice")


def test_corrupt_headers(tmp_path):
    header, data = split(saved_file(tmp_path))

    def write(name, head, length=None):
        return write_file(tmp_path / f"{name}.safetensors", head, data, length)

    def patched(name, **changes):
        h = json.loads(json.dumps(header))
        h["a"].update(changes)
        return write(name, h)

    assert_serialization_error(
        write("huge", header, length=2**62), "says 4611686018427387904 bytes"
    )
    assert_serialization_error(write("json", b"{not json" + b" " * 7), "invalid JSON")
    assert_serialization_error(write("utf8", b'{"\xff\xfe": 1}'), "rejected by safetensors")
    assert_serialization_error(write("list", b"[1, 2]"), "rejected by safetensors")
    assert_serialization_error(patched("dtype", dtype="Q7"), "'a' has dtype 'Q7'")
    assert_serialization_error(patched("past", data_offsets=[0, 10**6]), "'a' has 1000000 bytes")
    assert_serialization_error(patched("neg", data_offsets=[5, 2]), "'a' needs .* offsets")
    assert_serialization_error(patched("size", shape=[3, 3]), "'a'.*of F64, which needs 72")
    assert_serialization_error(patched("shape", shape=[-1]), "'a' needs .* a shape of sizes")
    bad_meta = dict(header, __metadata__={"x": 1})
    assert_serialization_error(write("meta", bad_meta), "strings to strings")


def test_damaged_structure_entry(tmp_path):
    """The tree in the metadata is checked as it is rebuilt: a structure save() could not
    have written is a SerializationError naming the place, not a KeyError or TypeError."""
    header, data = split(saved_file(tmp_path))
    trees = {
        "notjson": ("{oops", "not valid JSON"),
        "missing": ('{"z": {"__tensor__": "nope"}}', "'nope'"),
        "listname": ('{"z": {"__tensor__": ["a"]}}', "at 'z' should be"),
        "extrakey": ('{"z": {"__tensor__": "a", "y": 1}}', "at 'z' should be"),
        "items": ('{"o": {"s": {"__items__": 5}}}', "at 'o.s' should be"),
        "pair": ('{"o": {"__items__": [[1]]}}', "at 'o' holds \\[1\\]"),
        "key": ('{"o": {"__items__": [[[1], 2]]}}', "not a \\[key, value\\] pair"),
        "deep": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    }
    for name, (tree, match) in trees.items():
        path = write_file(
            tmp_path / f"{name}.safetensors", dict(header, __metadata__={ser.TREE_KEY: tree}), data
        )
        assert_serialization_error(path, match)
    ok = dict(
        header, __metadata__={ser.TREE_KEY: '{"o": {"__items__": [[1, {"__tensor__": "a"}]]}}'}
    )
    back = load(write_file(tmp_path / "ok.safetensors", ok, data))
    np.testing.assert_array_equal(back["o"][1], np.arange(10.0))


def test_flipped_header_bytes(tmp_path):
    """A flipped byte in the header's length, or in its JSON structure, is an error that names
    the file; a flip inside a name or a metadata string can still leave a valid file."""
    raw = bytearray(saved_file(tmp_path))
    (n,) = struct.unpack("<Q", raw[:8])
    rng = np.random.default_rng(0)
    path = tmp_path / "flip.safetensors"
    raised = 0
    for i in [*range(8), *rng.choice(np.arange(8, 8 + n), size=40, replace=False)]:
        bad = bytearray(raw)
        bad[i] ^= 0xFF
        path.write_bytes(bytes(bad))
        try:
            load(path)
        except SerializationError as e:
            assert str(path) in str(e)
            raised += 1
        else:
            assert i >= 8 and chr(raw[i]) not in '{}[]:,"', f"flip at byte {i} was accepted"
    assert raised >= 8


def test_flipped_data_bytes_fail_the_checksum_naming_file_and_tensor(tmp_path):
    """A flipped byte in a tensor's data used to load silently (the header was still valid):
    each tensor's CRC-32 is written beside it and checked, and the error names the tensor."""
    raw = saved_file(tmp_path)
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    assert set(k for k in header["__metadata__"] if k.startswith("checksum.")) == {
        "checksum.a",
        "checksum.b.c",
    }
    path = tmp_path / "flip.safetensors"
    for name in ("a", "b.c"):
        begin, end = header[name]["data_offsets"]
        for i in (begin, (begin + end) // 2, end - 1):
            bad = bytearray(raw)
            bad[8 + n + i] ^= 0x01
            path.write_bytes(bytes(bad))
            with pytest.raises(SerializationError, match=f"tensor '{name}' fails its checksum"):
                load(path)
            with pytest.raises(SerializationError, match=str(path)):
                load(path)


def test_a_damaged_checkpoint_is_refused_by_load_checkpoint(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    model = make(0)
    save_checkpoint(path, model)
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0x10  # inside the last tensor's data
    path.write_bytes(bytes(raw))
    with pytest.raises(SerializationError, match=f"{path}: tensor 'model.* fails its checksum"):
        load_checkpoint(path, make(1))


def test_files_without_checksums_load_unchecked(tmp_path):
    """Files written before checksums existed, or by another program, carry none: they load."""
    import safetensors.numpy

    path = tmp_path / "plain.safetensors"
    safetensors.numpy.save_file({"w": np.arange(4.0)}, str(path))
    assert load(path)["w"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_flipped_data_bytes_in_npz_are_refused(tmp_path):
    """.npz needs nothing extra: the zip format's own CRC-32 is checked on reading."""
    path = tmp_path / "x.npz"
    save({"a": np.arange(100.0)}, path)
    raw = bytearray(path.read_bytes())
    at = raw.index(np.arange(100.0).tobytes()) + 50
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))
    assert_serialization_error(path, "CRC")


@pytest.mark.parametrize("fmt", FORMATS)
def test_garbage_files(tmp_path, fmt):
    rng = np.random.default_rng(0)
    for i, size in enumerate([0, 1, 7, 8, 100, 5000]):
        path = tmp_path / f"g{i}.{fmt}"
        path.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        assert_serialization_error(path, ".")


def test_truncated_npz(tmp_path):
    path = tmp_path / "x.npz"
    save({"a": np.arange(100.0)}, path)
    raw = path.read_bytes()
    for cut in [10, len(raw) // 2, len(raw) - 10]:
        bad = tmp_path / f"cut{cut}.npz"
        bad.write_bytes(raw[:cut])
        assert_serialization_error(bad, "not a readable .npz")


def test_missing_file_is_a_plain_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nothing.safetensors")


# ------------------------------------------------------------------ atomic writes
@pytest.mark.parametrize("fmt", FORMATS)
def test_failed_write_leaves_old_file_intact(tmp_path, monkeypatch, fmt):
    path = tmp_path / f"ckpt.{fmt}"
    save({"a": np.arange(3.0)}, path)
    before = path.read_bytes()
    writer = "_write_safetensors" if fmt == "safetensors" else "_write_npz"
    real = getattr(ser, writer)

    def half_then_crash(f, *args):
        real(f, *args)
        f.truncate(f.tell() // 2)  # half the bytes are out, then the "disk fills up"
        raise OSError("No space left on device")

    monkeypatch.setattr(ser, writer, half_then_crash)
    with pytest.raises(OSError, match="No space"):
        save({"a": np.arange(1000.0)}, path)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == [path.name]  # no temporary file left behind
    np.testing.assert_array_equal(load(path)["a"], np.arange(3.0))


def test_failed_rename_leaves_no_temp_file(tmp_path, monkeypatch):
    def boom(src, dst):
        raise OSError("rename failed")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="rename failed"):
        save({"a": np.ones(2)}, tmp_path / "x.safetensors")
    assert os.listdir(tmp_path) == []


def test_save_replaces_existing_file(tmp_path):
    path = tmp_path / "x.safetensors"
    save({"a": np.ones(2)}, path)
    save({"b": np.zeros(3)}, path)
    assert list(load(path)) == ["b"] and os.listdir(tmp_path) == ["x.safetensors"]


# ------------------------------------------------------------------ checkpoints
def loss_of(model, x):
    return (model(x) ** 2).mean()


def train(model, opt, start, x, steps):
    """Steps ``start, start + 1, ...``, each at the schedule's learning rate (as the Trainer:
    the rate is a function of the iteration, which the checkpoint records)."""
    for it in range(start, start + steps):
        for group in opt.param_groups:
            group["lr"] = cosine_with_warmup(it, 2, 8, 0.01, 0.001)
        opt.zero_grad()
        loss_of(model, x).backward()
        opt.step()


@pytest.mark.parametrize("fmt", FORMATS)
def test_checkpoint_resume_is_bit_identical(tmp_path, fmt):
    x = tl.tensor(np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32))

    def fresh():
        m = make(0)
        return m, AdamW(nn.optim.param_groups_for_decay(m, 0.1), lr=0.01)

    m1, o1 = fresh()
    train(m1, o1, 0, x, 8)

    m2, o2 = fresh()
    train(m2, o2, 0, x, 5)
    path = tmp_path / f"ckpt.{fmt}"
    save_checkpoint(path, m2, o2, iter=5, config={"d": [3, 4], "a": "x"})

    m3 = make(7)  # different initial weights: all of it must come from disk
    o3 = AdamW(nn.optim.param_groups_for_decay(m3, 0.1), lr=0.01)
    extra = load_checkpoint(path, m3, o3)
    assert extra["iter"] == 5 and extra["config"] == {"d": [3, 4], "a": "x"}
    assert load_checkpoint(path)["iter"] == 5  # model=None: only the extras
    train(m3, o3, extra["iter"], x, 3)
    for (k, a), b in zip(m1.state_dict().items(), m3.state_dict().values()):
        np.testing.assert_array_equal(a, b, err_msg=k)
    assert o1.param_groups[0]["lr"] == o3.param_groups[0]["lr"]


def test_checkpoint_saved_from_a_device_loads_anywhere(tmp_path, device):
    m = make(0).to(device)
    save_checkpoint(tmp_path / "c.safetensors", m, step=1)
    back = make(1)
    assert load_checkpoint(tmp_path / "c.safetensors", back) == {"step": 1}
    for (k, a), b in zip(make(0).state_dict().items(), back.state_dict().values()):
        np.testing.assert_array_equal(a, b, err_msg=k)


def test_checkpoint_that_does_not_fit_the_model(tmp_path):
    """Every missing, unexpected and mismatched key in one line that names the file, and the
    model left as it was."""
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, make(0))
    m = make(1)
    del m.layers[1]._parameters["b"]
    m.layers[0].W = nn.Parameter(tl.zeros(3, 5))
    m.extra = nn.Parameter(tl.zeros(2))
    before = m.state_dict()
    with pytest.raises(SerializationError) as e:
        load_checkpoint(path, m)
    msg = str(e.value)
    assert str(path) in msg and "\n" not in msg
    assert "missing from the file: extra" in msg
    assert "not in the model: layers.1.b" in msg
    assert "shapes differ: layers.0.W (3, 4) in the file, (3, 5) in the model" in msg
    for (k, a), b in zip(before.items(), m.state_dict().values()):
        np.testing.assert_array_equal(a, b, err_msg=k)


def test_checkpoint_lists_at_most_a_few_keys(tmp_path):
    path = tmp_path / "c.safetensors"
    save({"model": {f"w{i}": np.ones(1) for i in range(20)}, "extra": {}}, path)
    with pytest.raises(SerializationError, match="not in the model: w0, .*, w5 and 14 more"):
        load_checkpoint(path, make(0))


def test_checkpoint_that_does_not_fit_the_optimizer(tmp_path):
    m = make(0)
    opt = AdamW(nn.optim.param_groups_for_decay(m, 0.1), lr=0.01)
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, m, opt)
    with pytest.raises(SerializationError, match="c.safetensors: the optimizer state does not fit"):
        load_checkpoint(path, m, AdamW(m.parameters(), lr=0.01))  # one group, not two
    state = load(path)
    del state["optimizer"]["param_groups"]
    save(state, path)
    with pytest.raises(SerializationError, match="does not fit: no entry 'param_groups'"):
        load_checkpoint(path, m, opt)


def test_damaged_checkpoint_entries(tmp_path):
    path = tmp_path / "c.safetensors"
    for state, match in [
        ({"model": [np.ones(1)]}, "'model' entry is not a {name: array} dict"),
        ({"model": {"w": "text"}}, "'model' entry is not a {name: array} dict"),
        ({"model": {}, "extra": [1]}, "'extra' entry is not a dict"),
        ({"model": {}, "optimizer": 3}, "no optimizer state"),
    ]:
        save(state, path)
        with pytest.raises(SerializationError, match=match):
            load_checkpoint(path, make(0), AdamW(make(0).parameters()))


def test_checkpoint_errors(tmp_path):
    m = make(0)
    save({"weights": np.ones(2)}, tmp_path / "plain.safetensors")
    with pytest.raises(SerializationError, match="not a checkpoint"):
        load_checkpoint(tmp_path / "plain.safetensors", m)
    save_checkpoint(tmp_path / "c.safetensors", m)
    opt = AdamW(m.parameters())
    with pytest.raises(SerializationError, match="no optimizer state"):
        load_checkpoint(tmp_path / "c.safetensors", m, opt)


# ------------------------------------------------------------------ load_state_dict errors
def test_missing_and_unexpected_keys_are_named(tmp_path):
    m = make(0)
    state = m.state_dict()
    del state["inner.W"]
    state["inner.extra"] = np.ones(1)
    save(state, tmp_path / "s.safetensors")
    with pytest.raises(KeyError) as e:
        m.load_state_dict(load(tmp_path / "s.safetensors"))
    assert "inner.W" in str(e.value) and "inner.extra" in str(e.value)
    assert "missing" in str(e.value) and "unexpected" in str(e.value)
    missing, unexpected = m.load_state_dict(load(tmp_path / "s.safetensors"), strict=False)
    assert missing == ["inner.W"] and unexpected == ["inner.extra"]


def test_shape_mismatch_names_key_and_both_shapes():
    m = make(0)
    state = m.state_dict()
    state["layers.1.b"] = np.zeros(5, np.float32)
    before = m.layers[0].W.data.copy()
    state["layers.0.W"] = before + 1
    with pytest.raises(ValueError) as e:
        m.load_state_dict(state)
    msg = str(e.value)
    assert "layers.1.b" in msg and "(5,)" in msg and "(4,)" in msg
    np.testing.assert_array_equal(m.layers[0].W.data, before)  # nothing changed
