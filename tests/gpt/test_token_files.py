"""Prepared token files: the ids are the tokenizer's, split where asked, read back through
memory maps, and training from them matches training from the text."""

import json
import subprocess
import sys

import numpy as np
import pytest

import gpt.tokenizers as tk
from gpt import token_files
from gpt.config import GPTConfig
from gpt.data import DataError
from gpt.train import TrainConfig, Trainer

TEXT = "".join(f"line {i}: the quick brown fox {i * 7 % 13} jumps\n" for i in range(400))


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def test_ids_are_the_tokenizers_split_where_asked(corpus, tmp_path, monkeypatch):
    monkeypatch.setattr(token_files, "BLOCK_CHARS", 1000)  # many blocks, cut at line ends
    meta = token_files.prepare(corpus, tmp_path / "data", val_fraction=0.25)
    tok, splits, meta2 = token_files.load(tmp_path / "data")
    assert meta == meta2 and meta["dtype"] == "<u2" and isinstance(splits["train"], np.memmap)
    cut = int(len(TEXT) * 0.75)
    np.testing.assert_array_equal(splits["train"], tok.encode(TEXT[:cut]))
    np.testing.assert_array_equal(splits["val"], tok.encode(TEXT[cut:]))
    assert tok.decode(list(splits["train"]) + list(splits["val"])) == TEXT


def test_a_subword_tokenizer_is_trained_on_the_sample(corpus, tmp_path):
    meta = token_files.prepare(corpus, tmp_path / "d", tokenizer="bpe", vocab_size=300)
    tok, splits, _ = token_files.load(tmp_path / "d")
    assert meta["vocab_size"] == tok.vocab_size == 300
    np.testing.assert_array_equal(splits["val"], tok.encode(TEXT[int(len(TEXT) * 0.9) :]))


def test_blocks_of_a_subword_tokenizer_end_at_line_ends(corpus, tmp_path, monkeypatch):
    """Blocks of a size that ends inside a word: each is read on to its line's end, so the
    subword ids are those of the whole text (a word cut in two encodes as two pieces)."""
    assert not any(line.startswith(" ") for line in TEXT.splitlines())  # no "\n " merges
    monkeypatch.setattr(token_files, "BLOCK_CHARS", 97)  # not a multiple of any line's length
    token_files.prepare(corpus, tmp_path / "d", tokenizer="bpe", vocab_size=300, val_fraction=0.3)
    tok, splits, _ = token_files.load(tmp_path / "d")
    cut = int(len(TEXT) * (1 - 0.3))
    np.testing.assert_array_equal(splits["train"], tok.encode(TEXT[:cut]))
    np.testing.assert_array_equal(splits["val"], tok.encode(TEXT[cut:]))
    assert tok.decode(list(splits["train"]) + list(splits["val"])) == TEXT


def test_vocabularies_past_65536_use_uint32(tmp_path):
    text = "".join(map(chr, range(0x10000, 0x20000))) + "".join(map(chr, range(0x4E00, 0x5000)))
    path = tmp_path / "wide.txt"
    path.write_text(text * 2, encoding="utf-8")
    meta = token_files.prepare(path, tmp_path / "d")
    tok, splits, _ = token_files.load(tmp_path / "d")
    assert tok.vocab_size > 65536 and meta["dtype"] == "<u4"
    assert int(splits["train"].max()) >= 65536


def test_bad_folders_are_named(corpus, tmp_path):
    with pytest.raises(DataError, match="not a prepared data folder .*meta.json is missing"):
        token_files.load(tmp_path)
    token_files.prepare(corpus, tmp_path / "d")
    with pytest.raises(DataError, match="already holds prepared data"):
        token_files.prepare(corpus, tmp_path / "d")
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    (tmp_path / "d" / "meta.json").write_text(json.dumps({**meta, "val_tokens": 3}))
    with pytest.raises(DataError, match="val.bin: .* tokens, but meta.json says 3"):
        token_files.load(tmp_path / "d")


def test_prepare_never_replaces_a_training_runs_tokenizer(corpus, tmp_path):
    """prepare into a folder holding a training run (or any tokenizer.json) must refuse and
    leave it alone: it wrote its own tokenizer.json over the run's, after which the run's
    model sampled through the wrong vocabulary without a word."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "tokenizer.json").write_text("the run's tokenizer")
    with pytest.raises(DataError, match="already holds tokenizer.json"):
        token_files.prepare(corpus, run, tokenizer="bpe", vocab_size=300)
    assert (run / "tokenizer.json").read_text() == "the run's tokenizer"
    assert sorted(p.name for p in run.iterdir()) == ["tokenizer.json"]


def test_training_from_token_files_equals_training_from_the_text(corpus, tmp_path):
    """Same ids, same batches, same steps: the losses agree exactly."""
    token_files.prepare(corpus, tmp_path / "d")
    model = GPTConfig(vocab_size=1, block_size=16, n_layer=1, n_head=2, d_model=16)
    common = dict(eval_iters=1, batch_size=4, progress=False)
    from_files = Trainer(
        model, TrainConfig(data=str(tmp_path / "d"), out_dir=str(tmp_path / "a"), **common)
    )
    tok = tk.load(tmp_path / "d" / "tokenizer.json")
    from_text = Trainer(
        model, TrainConfig(out_dir=str(tmp_path / "b"), **common), text=TEXT, tokenizer=tok
    )
    assert [from_files.step() for _ in range(3)] == [from_text.step() for _ in range(3)]


@pytest.mark.slow
def test_prepare_and_train_under_a_memory_limit_smaller_than_the_corpus(tmp_path):
    """A 300 MB text (540 MB of uint16 tokens) is prepared and trained on in a process whose
    data limit (RLIMIT_DATA: heap and private memory, not the read-only file maps) is 200 MB;
    the control shows the limit bites: reading the text whole fails under it. (Resident set
    size is the wrong yardstick here: it counts the file pages the kernel maps in around each
    random window, clean page cache it drops under pressure.)"""
    path = tmp_path / "big.txt"
    line = "".join(chr(97 + (i * 7) % 26) for i in range(99)) + "\n"
    with open(path, "w") as f:
        for _ in range(30):
            f.write(line * 100_000)
    limit = 200 * 2**20
    data, out = str(tmp_path / "data"), str(tmp_path / "run")
    head = f"import resource\nresource.setrlimit(resource.RLIMIT_DATA, ({limit}, {limit}))\n"
    train = (
        "from gpt.config import GPTConfig\n"
        "from gpt.token_files import prepare\n"
        "from gpt.train import TrainConfig, Trainer\n"
        f"prepare({str(path)!r}, {data!r})\n"
        "model = GPTConfig(vocab_size=1, block_size=32, n_layer=1, n_head=2, d_model=32)\n"
        f"cfg = TrainConfig(data={data!r}, out_dir={out!r}, max_iters=3, eval_iters=2)\n"
        "t = Trainer(model, cfg)\n"
        "t.run()\n"
        "print(len(t.splits['train']), len(t.splits['val']), t.history[-1]['val_loss'])\n"
    )
    run = subprocess.run([sys.executable, "-c", head + train], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[:2] == ["270000000", "30000000"]
    whole = f"open({str(path)!r}).read()\n"
    control = subprocess.run([sys.executable, "-c", head + whole], capture_output=True, text=True)
    assert control.returncode != 0 and "MemoryError" in control.stderr
