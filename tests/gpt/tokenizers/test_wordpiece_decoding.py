"""WordPiece decoding as the file's decoder says, against the ``tokenizers`` library.

A WordPiece ``tokenizer.json`` read into our ``WordPiece`` class must decode as the library
decodes it: BERT's files have the WordPiece decoder with ``cleanup`` (no space before
punctuation and contractions), ours wrote ``cleanup: true`` while decoding without it, and a
file with no decoder joins the tokens with spaces (the "##" kept).
"""

import json
import os

import pytest

import gpt.tokenizers as tk

os.environ.setdefault("RAYON_NUM_THREADS", "1")
hf = pytest.importorskip("tokenizers")
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

TEXT = "hello, world! it's a test. don't do that? yes, we're here. " * 20
SAMPLES = ["hello, world! it's don't?", "we're here .", "a test ,yes", "?!.,"]


def hf_wordpiece(decoder):
    t = hf.Tokenizer(models.WordPiece(unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer()
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    if decoder is not None:
        t.decoder = decoder
    t.train_from_iterator(
        [TEXT],
        trainers.WordPieceTrainer(vocab_size=60, special_tokens=["[UNK]"], show_progress=False),
    )
    return t


@pytest.mark.parametrize(
    "decoder",
    [decoders.WordPiece(), decoders.WordPiece(cleanup=False), None],
    ids=["cleanup", "no-cleanup", "no-decoder"],
)
def test_decode_as_the_library(decoder, tmp_path):
    theirs = hf_wordpiece(decoder)
    theirs.save(str(tmp_path / "tokenizer.json"))
    ours = tk.load(tmp_path / "tokenizer.json")
    for text in SAMPLES:
        ids = theirs.encode(text, add_special_tokens=False).ids
        assert ours.encode(text) == ids, text
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=False), text
    # ids in any order (a "##" piece first, pieces after punctuation)
    n = theirs.get_vocab_size()
    for start in range(0, n, 3):
        ids = [(start + k * 7) % n for k in range(5)]
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=False), ids


@pytest.mark.parametrize("cleanup", [False, True])
def test_our_files_decode_alike_in_the_library(cleanup, tmp_path):
    trained = tk.WordPiece.train(TEXT, 45)
    ours = tk.WordPiece(trained.itos, list(trained.special), cleanup=cleanup)
    ours.save(tmp_path / "tokenizer.json")
    theirs = hf.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    ours.save(tmp_path / "ours.json")
    again = tk.load(tmp_path / "ours.json")
    data = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    assert data["decoder"]["cleanup"] is cleanup
    for text in SAMPLES:
        ids = ours.encode(text)
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=False), text
        assert again.decode(ids) == ours.decode(ids), text
