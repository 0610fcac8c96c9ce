"""A Hugging Face checkpoint folder, whatever the model family: ``config.json`` and
``model.safetensors`` (or a sharded ``model.safetensors.index.json`` with its shards) read and
written, and the tensors renamed by a family's table, each checked against the config.

Nothing here touches the network, unpickles a file, or imports torch: the weights are read by
:mod:`nn.serialization`.

A family's table (``tensor_names``) lists every tensor once, ``(HF name, HF shape, our
name(s), transposed)``, and is read both ways: a tensor is transposed where HF stores it as
``nn.Linear`` does (out, in), a fused one (GPT-2's ``c_attn``) split along its last axis into
our names, and each part reshaped to our parameter's shape; writing does the reverse.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np

from gpt.config import ConfigError, ConfigNote, GPTConfig
from nn import serialization

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"


class HFCheckpointError(ValueError):
    """A Hugging Face checkpoint we cannot load; the message names the file and the key."""

    def __init__(self, path, what: str):
        self.path = os.fspath(path)
        super().__init__(f"{self.path}: {what}")


# ------------------------------------------------------------------ config
def read_json(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (a Hugging Face checkpoint needs one)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HFCheckpointError(path, f"not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise HFCheckpointError(path, f"expected a JSON object, got a {type(data).__name__}")
    return data


def field(hf: dict, path, name: str, *fallbacks: str, default=None):
    """``hf[name]`` (or the first fallback spelling present), else ``default``, else refused."""
    for key in (name, *fallbacks):
        if hf.get(key) is not None:
            return hf[key]
    if default is not None:
        return default
    raise HFCheckpointError(path, f"config field {name!r} is missing")


def make_config(hf: dict, path, family: str, **fields) -> GPTConfig:
    """The :class:`GPTConfig` of a checkpoint: ``fields`` plus what every family here shares
    (pre-norm, a final norm, no dropout: the checkpoint is loaded for inference)."""
    try:
        with warnings.catch_warnings():  # the shape is the checkpoint's, notes are moot
            warnings.simplefilter("ignore", ConfigNote)
            return GPTConfig(
                norm_placement="pre",
                final_norm=True,
                dropout=0.0,
                init_std=float(hf.get("initializer_range", 0.02)),
                **fields,
            )
    except ConfigError as e:
        raise HFCheckpointError(path, f"invalid {family} config ({e})") from None


def refuse_unless(cfg: GPTConfig, family: str, wanted: dict, problems: list[str]) -> None:
    """Raise ValueError naming every field of ``cfg`` that differs from ``wanted`` (and what
    every family here is: pre-norm, a final norm, an MLP, sequential blocks) and ``problems``."""
    shared = {"norm_placement": "pre", "parallel": False, "attn_only": False, "final_norm": True}
    problems = [
        f"{name}={getattr(cfg, name)!r} ({family} has {value!r})"
        for name, value in {**wanted, **shared}.items()
        if getattr(cfg, name) != value
    ] + problems
    if problems:
        raise ValueError(f"this model is not {family}-shaped: " + "; ".join(problems))


# ------------------------------------------------------------------ weights
def _weight_files(path: Path) -> list[Path]:
    """The safetensors file(s) of a checkpoint directory (or the file itself)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such checkpoint directory or file")
    if (path / WEIGHTS_NAME).is_file():
        return [path / WEIGHTS_NAME]
    if (path / INDEX_NAME).is_file():
        index = read_json(path / INDEX_NAME)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise HFCheckpointError(path / INDEX_NAME, "no 'weight_map' of tensor -> shard file")
        shards = [path / name for name in dict.fromkeys(weight_map.values())]
        for shard in shards:
            if not shard.is_file():
                raise FileNotFoundError(f"{shard}: shard listed in {path / INDEX_NAME} is missing")
        return shards
    present = sorted(p.name for p in path.iterdir())
    hint = ""
    if any(name.endswith((".bin", ".pt", ".pth", ".ckpt")) for name in present):
        hint = (
            "; it holds only pickled PyTorch weights, which tensorlab never unpickles: "
            "convert them once with transformers (model.save_pretrained(dir, "
            "safe_serialization=True))"
        )
    raise FileNotFoundError(
        f"{path / WEIGHTS_NAME}: no such file (the directory has {', '.join(present) or 'nothing'})"
        + hint
    )


def load_hf_state(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, Path]]:
    """Every tensor of a checkpoint (directory or ``.safetensors`` file), and the file each
    came from. Corrupt files raise :class:`nn.serialization.SerializationError` naming them."""
    state: dict[str, np.ndarray] = {}
    source: dict[str, Path] = {}
    for file in _weight_files(Path(path)):
        loaded = serialization.load(file)
        if not isinstance(loaded, dict) or not all(
            isinstance(v, np.ndarray) for v in loaded.values()
        ):
            raise HFCheckpointError(file, "not a flat name -> tensor safetensors file")
        for key, array in loaded.items():
            state[key] = array
            source[key] = file
    return state, source


def tensors_from_hf(
    state: dict[str, np.ndarray],
    family,
    model,
    source: str | os.PathLike | dict[str, Path] = WEIGHTS_NAME,
    strict: bool = True,
) -> dict[str, np.ndarray]:
    """Hugging Face tensors (a checkpoint's ``state``) -> ``model.state_dict()``'s names and
    shapes by the ``family``'s table, widened to float32. ``source`` names the file (or maps
    each key to its file) for the errors. With ``strict`` a tensor the table does not use
    raises (another architecture or a head we drop), except the family's ``IGNORED``."""
    cfg = model.config
    shapes = {k: p.shape for k, p in model.named_parameters()}

    def where(key):
        return source.get(key, WEIGHTS_NAME) if isinstance(source, dict) else source

    hf = {}  # name without the family's optional prefix -> (key in the file, array)
    for key, array in state.items():
        short = key.removeprefix(family.PREFIX) if family.PREFIX else key
        if not short.endswith(family.IGNORED):
            hf[short] = (key, array)
    used: set[str] = set()

    def take(short: str, shape: tuple[int, ...]) -> np.ndarray:
        if short not in hf:
            path = source if not isinstance(source, dict) else next(iter(source.values()), "")
            also = f" (or '{family.PREFIX}{short}')" if family.PREFIX else ""
            raise HFCheckpointError(
                path,
                f"tensor {short!r}{also} is missing; a {family.NAME} checkpoint "
                f"with n_layer={cfg.n_layer} needs it",
            )
        key, array = hf[short]
        if tuple(array.shape) != shape:
            raise HFCheckpointError(
                where(key),
                f"tensor {key!r} has shape {tuple(array.shape)}, but config.json "
                f"(d_model={cfg.d_model}, n_head={cfg.n_head}, n_kv_head={cfg.n_kv_head}, "
                f"d_head={cfg.d_head}, d_ff={cfg.d_ff}, vocab_size={cfg.vocab_size}, "
                f"block_size={cfg.block_size}) needs {shape}",
            )
        if not (array.dtype.kind == "f" or array.dtype.name == "bfloat16"):  # ml_dtypes' kind V
            raise HFCheckpointError(where(key), f"tensor {key!r} has dtype {array.dtype}")
        used.add(short)
        return np.asarray(array, dtype=np.float32)

    out = {}
    rows = family.tensor_names(cfg)
    for name, shape, ours, transposed in rows:
        array = take(name, shape).T if transposed else take(name, shape)
        for our, part in zip(ours, np.split(array, len(ours), axis=-1), strict=True):
            out[our] = np.ascontiguousarray(part.reshape(shapes[our]))  # as GPT(cfg) keeps it
    if cfg.tie_weights and "lm_head.weight" in hf:  # a stored copy must repeat the embedding
        key = hf["lm_head.weight"][0]
        head = take("lm_head.weight", (cfg.vocab_size, cfg.d_model))
        if not np.array_equal(head, out["embed.W"]):
            embed = next(name for name, _, ours, _ in rows if ours == ("embed.W",))
            raise HFCheckpointError(
                where(key),
                f"tensor {key!r} differs from {embed}, but config.json says "
                "tie_word_embeddings=true",
            )
    unused = sorted(hf[s][0] for s in set(hf) - used)
    if strict and unused:
        shown = ", ".join(map(repr, unused[:8])) + (" ..." if len(unused) > 8 else "")
        raise HFCheckpointError(
            where(unused[0]),
            f"{len(unused)} tensor(s) this mapping does not use: {shown} "
            "(another architecture or head? pass strict=False to ignore them)",
        )
    return out


def tensors_to_hf(sd: dict[str, np.ndarray], family, cfg: GPTConfig) -> dict[str, np.ndarray]:
    """A state dict (NumPy arrays) under the ``family``'s HF names: the inverse of
    :func:`tensors_from_hf`. The LM head is the one tensor kept outside the prefixed body."""
    out = {}
    for name, shape, ours, transposed in family.tensor_names(cfg):
        stored = shape[::-1] if transposed else shape  # our (in, out) orientation
        array = np.concatenate([sd[o].reshape(*stored[:-1], -1) for o in ours], axis=-1)
        key = name if name == "lm_head.weight" else family.PREFIX + name
        out[key] = array.T if transposed else array
    return out


def write_folder(path, arrays: dict[str, np.ndarray], hf_config: dict) -> None:
    """``model.safetensors`` (float32, contiguous) and ``config.json`` in ``path``, each
    written atomically."""
    from gpt.run_folder import RunFolder

    arrays = {k: np.ascontiguousarray(v, np.float32) for k, v in arrays.items()}
    out = Path(path)
    run = RunFolder(out)
    if run.ckpt.exists() or run.log.exists():  # its config.json is the run's, not ours
        raise HFCheckpointError(
            out,
            "holds a training run, whose config.json this would replace; export into "
            "another folder",
        )
    out.mkdir(parents=True, exist_ok=True)
    # transformers insists on a "format" entry in the metadata
    serialization.atomic_write(
        out / WEIGHTS_NAME,
        lambda fh: serialization._write_safetensors(fh, arrays, {"format": "pt"}),
    )
    text = json.dumps(hf_config, indent=2) + "\n"
    serialization.atomic_write(out / CONFIG_NAME, lambda fh: fh.write(text.encode("utf-8")))
