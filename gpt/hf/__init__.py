"""Hugging Face checkpoints: read a local ``save_pretrained`` directory into
:class:`gpt.model.GPT`, and write one back. One module per family holds its config and the
names of its weights (:mod:`gpt.hf.gpt2`: GPT-2; :mod:`gpt.hf.llama`: Llama, Qwen2, Mistral);
:mod:`gpt.hf.checkpoint` reads and writes the folder and renames the tensors by a family's
table, checking each.

    model = gpt.hf.from_pretrained("path/to/gpt2")       # or a Llama, Qwen2, Mistral folder
    gpt.hf.save_hf_llama(model, "out/")                  # loadable by transformers too
"""

from __future__ import annotations

import os
from pathlib import Path

from gpt.config import GPTConfig
from gpt.hf import gpt2, llama
from gpt.hf.checkpoint import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    HFCheckpointError,
    load_hf_state,
    read_json,
    tensors_from_hf,
    tensors_to_hf,
    write_folder,
)
from gpt.hf.gpt2 import config_to_hf
from gpt.model import GPT
from nn.init import empty_parameters
from tensorlab.backend import to_device

FAMILIES = {model_type: family for family in (gpt2, llama) for model_type in family.ARCHITECTURES}


def _family(hf: dict, path):
    """The module of a config's ``model_type`` (GPT-2 when absent), its architectures checked."""
    model_type = hf.get("model_type", "gpt2")
    if model_type not in FAMILIES:
        raise HFCheckpointError(
            path, f"model_type={model_type!r} is not supported (supported: {', '.join(FAMILIES)})"
        )
    allowed = FAMILIES[model_type].ARCHITECTURES[model_type]
    architectures = hf.get("architectures") or []
    for arch in architectures:
        if arch not in allowed:
            raise HFCheckpointError(
                path, f"architectures={architectures!r}: only {allowed[0]} loads for {model_type}"
            )
    return FAMILIES[model_type]


def config_from_hf(hf: dict, path: str | os.PathLike = CONFIG_NAME) -> GPTConfig:
    """The :class:`GPTConfig` of a Hugging Face ``config.json`` (already parsed), dropout 0;
    anything :class:`gpt.model.GPT` does not do is refused naming ``path`` and the field."""
    return _family(hf, path).config_from_hf(hf, path)


def load_gpt2_weights(model: GPT, path: str | os.PathLike, strict: bool = True) -> GPT:
    """Copy a Hugging Face GPT-2 checkpoint's weights (directory or ``.safetensors`` file)
    into ``model``, whose config must have the checkpoint's shapes. Returns ``model``."""
    state, source = load_hf_state(path)
    model.load_state_dict(tensors_from_hf(state, gpt2, model, source, strict))
    return model


def from_pretrained(path: str | os.PathLike, strict: bool = True) -> GPT:
    """A :class:`gpt.model.GPT` in eval mode with the config and weights of a local Hugging
    Face checkpoint directory (``config.json`` + ``model.safetensors``, or sharded), of a
    family in ``FAMILIES``, float32, float16 or bfloat16 (computed in float32)."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: not a directory (expected config.json + {WEIGHTS_NAME})")
    hf = read_json(path / CONFIG_NAME)
    family = _family(hf, path / CONFIG_NAME)
    cfg = family.config_from_hf(hf, path / CONFIG_NAME)
    with empty_parameters():  # every parameter is about to be loaded
        model = GPT(cfg)
    state, source = load_hf_state(path)
    # the converted arrays are fresh (read from the files just now): taken as they are
    model.load_state_dict(tensors_from_hf(state, family, model, source, strict), assign=True)
    return model.eval()


def _save(model: GPT, path: str | os.PathLike, family) -> None:
    hf_config = family.config_to_hf(model.config)  # refuses a model of another shape first
    sd = {k: to_device(p.data, "cpu") for k, p in model.named_parameters()}
    write_folder(path, tensors_to_hf(sd, family, model.config), hf_config)


def save_hf_gpt2(model: GPT, path: str | os.PathLike) -> None:
    """Write ``model`` as a Hugging Face GPT-2 checkpoint directory (``config.json`` +
    ``model.safetensors`` with ``transformer.``-prefixed keys), which both
    :func:`from_pretrained` and ``transformers.GPT2LMHeadModel.from_pretrained`` read."""
    _save(model, path, gpt2)


def save_hf_llama(model: GPT, path: str | os.PathLike) -> None:
    """Write a Llama-shaped ``model`` as a Hugging Face ``LlamaForCausalLM`` folder (Mistral
    with a sliding window, Qwen2 with q/k/v-only biases: :func:`gpt.hf.llama.config_to_hf`),
    which both :func:`from_pretrained` and ``transformers`` read."""
    _save(model, path, llama)


def tokenizer_from_pretrained(path: str | os.PathLike):
    """The tokenizer of a Hugging Face checkpoint directory: ``tokenizer.json`` if present,
    else GPT-2's ``vocab.json`` + ``merges.txt``."""
    from gpt.tokenizers import load_gpt2, load_hf

    path = Path(path)
    if (path / "tokenizer.json").is_file():
        return load_hf(path / "tokenizer.json")
    if (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
        return load_gpt2(path / "vocab.json", path / "merges.txt")
    raise FileNotFoundError(f"{path}: no tokenizer.json, and no vocab.json + merges.txt")
