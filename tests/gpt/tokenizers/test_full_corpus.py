"""End to end on the whole 1.1 MB corpus at vocab 4096 (slow: run with ``-m slow``)."""

import os

import pytest

import gpt.tokenizers as tk

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def full_text(shakespeare_path):
    return shakespeare_path.read_text(encoding="utf-8")


@pytest.mark.parametrize("cls", [tk.ByteBPE, tk.Unigram])
def test_train_4096_and_round_trip(full_text, cls, tmp_path):
    cut = int(len(full_text) * 0.9)
    tok = cls.train(full_text[:cut], 4096, special_tokens=["<|endoftext|>"])
    assert tok.vocab_size == 4096
    heldout = full_text[cut:]
    r = tk.report(tok, heldout)
    assert r.reversible and r.unk_rate == 0 and r.bytes_per_token > 2.5
    tok.save(tmp_path / "tokenizer.json")
    hf = pytest.importorskip("tokenizers")
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    theirs = hf.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert theirs.encode(full_text).ids == tok.encode(full_text)
