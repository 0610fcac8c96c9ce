"""A corpus tokenized once into memory-mapped token files, for texts larger than memory.

    python -m gpt prepare --text corpus.txt --out data/corpus
    python -m gpt train --data data/corpus --out-dir out/corpus

``prepare`` reads the text twice, a block of lines at a time (so a pre-tokenizer never sees a
word cut in two), never whole: the first pass counts, fingerprints and (for the character
tokenizer) collects the alphabet; a subword tokenizer trains on the first
``tokenizer_sample_chars`` characters. The second pass encodes each block into ``train.bin``
until the first ``1 - val_fraction`` of the characters are in, then into ``val.bin``: raw
little-endian uint16 ids (uint32 past 65,536 tokens), nanoGPT's layout, beside
``tokenizer.json`` and ``meta.json`` (dtype, token counts, the text's path, size and
fingerprint). Training reads batches through ``np.memmap``: memory stays flat however large
the corpus.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from pathlib import Path

import numpy as np

from gpt.data import DataError
from nn.checks import check_int, check_real
from nn.serialization import atomic_write

META = "meta.json"
SPLITS = ("train", "val")
BLOCK_CHARS = 1 << 20  # characters read per block (then up to the line's end)


def _blocks(path: Path, bar=None):
    """The text in blocks of about BLOCK_CHARS characters, each ending at a line end."""
    with open(path, encoding="utf-8", newline="") as f:
        while True:
            block = f.read(BLOCK_CHARS)
            if not block:
                return
            block += f.readline()
            if bar is not None:
                bar.update(len(block))
            yield block


def _scan(path: Path, sample_chars: int) -> tuple[int, str, set[str], str]:
    """Characters, fingerprint, alphabet and the first ``sample_chars`` characters."""
    digest, chars, alphabet, sample = hashlib.sha256(), 0, set(), []
    try:
        for block in _blocks(path):
            digest.update(block.encode("utf-8", "surrogatepass"))
            alphabet.update(block)
            if chars < sample_chars:
                sample.append(block[: sample_chars - chars])
            chars += len(block)
    except UnicodeDecodeError as err:
        raise DataError(f"{str(path)!r} is not UTF-8 text ({err})") from err
    return chars, digest.hexdigest()[:16], alphabet, "".join(sample)


def prepare(
    text: str | os.PathLike,
    out: str | os.PathLike,
    tokenizer: str = "char",
    vocab_size: int = 512,
    val_fraction: float = 0.1,
    tokenizer_sample_chars: int = 20_000_000,
    progress: bool = False,
) -> dict:
    """Tokenize the file ``text`` into ``out`` (see the module docstring); returns the meta."""
    from tqdm import tqdm

    import gpt.tokenizers as tk

    check_int("tokenizer_vocab_size", vocab_size, 1)
    check_int("tokenizer_sample_chars", tokenizer_sample_chars, 1)
    check_real("val_fraction", val_fraction, 0.0, 1.0, open_lo=True, open_hi=True)
    path, out = Path(text), Path(out)
    if not path.is_file():
        raise DataError(f"text file {str(path)!r} does not exist")
    if (out / META).exists():
        raise DataError(f"{out} already holds prepared data; choose another folder")
    taken = [n for n in ("train.bin", "val.bin", "tokenizer.json") if (out / n).exists()]
    if taken:  # e.g. a training run's folder, whose tokenizer.json this would replace
        raise DataError(f"{out} already holds {', '.join(taken)}; prepare into another folder")
    trained = tokenizer in tk.KINDS and tokenizer != "char"
    chars, digest, alphabet, sample = _scan(path, tokenizer_sample_chars if trained else 0)
    if tokenizer == "char":
        tok = tk.KINDS["char"].train("".join(sorted(alphabet)))
    elif trained:
        tok = tk.KINDS[tokenizer].train(sample, vocab_size=vocab_size)
    else:
        tok = tk.load(tokenizer)
    dtype = np.dtype("<u2") if tok.vocab_size <= 1 << 16 else np.dtype("<u4")
    out.mkdir(parents=True, exist_ok=True)
    split_at = int(chars * (1 - val_fraction))
    counts, seen = {"train": 0, "val": 0}, 0
    files = {name: open(out / f"{name}.bin.tmp", "wb") for name in counts}
    try:
        bar = tqdm(
            total=chars, unit="char", unit_scale=True, desc="tokenizing", disable=not progress
        )
        for block in _blocks(path, bar):
            cut = min(max(split_at - seen, 0), len(block))
            for name, part in (("train", block[:cut]), ("val", block[cut:])):
                if part:
                    ids = np.asarray(tok.encode(part), dtype=dtype)
                    files[name].write(ids.tobytes())
                    counts[name] += len(ids)
            seen += len(block)
        bar.close()
    finally:
        for f in files.values():
            f.close()
    for name in counts:
        os.replace(out / f"{name}.bin.tmp", out / f"{name}.bin")
    tok.save(out / "tokenizer.json")
    meta = {
        "dtype": dtype.str,
        "vocab_size": tok.vocab_size,
        "train_tokens": counts["train"],
        "val_tokens": counts["val"],
        "text": str(path),
        "text_chars": chars,
        "text_digest": digest,
    }
    text_meta = json.dumps(meta, indent=1) + "\n"
    atomic_write(out / META, lambda f: f.write(text_meta.encode()))
    return meta


def load(folder: str | os.PathLike) -> tuple[object, dict[str, np.memmap], dict]:
    """``(tokenizer, {"train": ids, "val": ids}, meta)`` of a prepared folder; the ids are
    read-only memory maps."""
    import gpt.tokenizers as tk

    folder = Path(folder)
    try:
        meta = json.loads((folder / META).read_text())
        splits = {n: np.memmap(folder / f"{n}.bin", np.dtype(meta["dtype"]), "r") for n in SPLITS}
        counts = {name: meta[f"{name}_tokens"] for name in SPLITS}
    except FileNotFoundError as err:
        raise DataError(
            f"{folder}: not a prepared data folder ({Path(err.filename).name} is missing; "
            "make one with python -m gpt prepare)"
        ) from err
    except (KeyError, TypeError, ValueError) as err:
        raise DataError(f"{folder / META}: damaged ({type(err).__name__}: {err})") from err
    for name, ids in splits.items():
        if hasattr(mmap, "MADV_RANDOM"):  # batches are random windows: no read-ahead
            ids._mmap.madvise(mmap.MADV_RANDOM)
        if len(ids) != counts[name]:
            raise DataError(
                f"{folder / (name + '.bin')}: {len(ids)} tokens, but {META} says "
                f"{counts[name]}; prepare the data again"
            )
    return tk.load(folder / "tokenizer.json"), splits, meta
