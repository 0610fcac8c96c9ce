"""What counts as a token id for decoding: integers of any integer type, nothing else."""

import json
import re

import numpy as np
import pytest

import gpt.tokenizers as tk
from gpt.tokenizers import TokenizerError

TEXT = "the quick brown fox jumps over the lazy dog. " * 30


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    special = ["<|eot|>"]
    bpe = tk.ByteBPE.train(TEXT, 270, special)
    # the same vocabulary as a Pipeline (a post-processor that adds nothing makes it one)
    data = bpe.to_hf_json()
    data["post_processor"] = {"type": "BertProcessing", "sep": ["a", 0], "cls": ["a", 0]}
    path = tmp_path_factory.mktemp("ids") / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    pipeline = tk.load(path)
    assert isinstance(pipeline, tk.Tokenizer)
    return [
        tk.CharTokenizer.train(TEXT, special_tokens=special),
        bpe,
        tk.WordPiece.train(TEXT, 50, special),
        tk.Unigram.train(TEXT, 60, special),
        pipeline,
    ]


@pytest.mark.parametrize("bad", [True, False, 3.0, 0.0, np.float64(3.0), np.bool_(True), "3"])
def test_bools_floats_and_strings_are_not_token_ids(tokenizers, bad):
    # int(True) == 1 and 3.0 == 3, but neither is an id: a flag or a float tensor's value
    # passed by mistake must not decode to some token
    for tok in tokenizers:
        with pytest.raises(
            TokenizerError, match=f"^{re.escape(f'token id must be an integer, got {bad!r}')}$"
        ):
            tok.decode([1, bad])
        with pytest.raises(TokenizerError, match="^token id must be an integer"):
            tok.id_to_token(bad)
    with pytest.raises(TokenizerError, match="^token id must be an integer"):
        tokenizers[1].decode_bytes([bad])
    with pytest.raises(TokenizerError, match="^token id must be an integer"):
        tokenizers[1].token_bytes(bad)


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64, np.uint16, np.uint64])
def test_numpy_integer_arrays_still_decode(tokenizers, dtype):
    for tok in tokenizers:
        ids = tok.encode("the fox<|eot|>the dog")
        array = np.array(ids, dtype=dtype)
        assert tok.decode(array) == tok.decode(ids)
        assert tok.decode_batch(np.stack([array, array])) == [tok.decode(ids)] * 2
        assert tok.id_to_token(array[0]) == tok.id_to_token(ids[0])


def test_out_of_range_ids_still_name_the_vocabulary_size(tokenizers):
    for tok in tokenizers:
        n = tok.vocab_size
        with pytest.raises(TokenizerError, match=f"^token id {n} is out of range for vocab_size"):
            tok.decode(np.array([0, n]))
