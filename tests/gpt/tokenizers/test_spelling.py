"""How a ``tokenizer.json`` spells its tokens, seen through offsets (``offsets.py``): the
parts that say it may sit inside a ``Sequence``, and offsets must still be the library's."""

import os

import pytest

from .hf_training import assert_encodes_as_library, hf_trained

os.environ.setdefault("RAYON_NUM_THREADS", "1")
hf = pytest.importorskip("tokenizers", reason="the `tokenizers` library is the reference")
from tokenizers import (  # noqa: E402
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

import gpt.tokenizers as tk  # noqa: E402
from gpt.tokenizers import Tokenizer  # noqa: E402

TEXT = "the quick brown fox jumps over the lazy dog  while seven wizards quietly hex\n" * 3
TEXTS = ["the quick fox", " lazy  dog", "  wizards hex ", "zebra x", " a", "", "x  "]


def check_offsets(theirs, tmp_path):
    theirs.save(str(tmp_path / "tokenizer.json"))
    ours = tk.load(tmp_path / "tokenizer.json")
    for text in TEXTS:
        assert_encodes_as_library(ours, theirs, text)
    return ours


@pytest.mark.parametrize("add_prefix_space", [False, True])
def test_a_byte_level_post_processor_inside_a_sequence_trims_offsets(add_prefix_space, tmp_path):
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    post = processors.ByteLevel(add_prefix_space=add_prefix_space, trim_offsets=True)
    theirs = hf_trained(
        TEXT,
        models.BPE(unk_token="<unk>"),
        trainer,
        pre=pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space),
        decoder=decoders.ByteLevel(),
        post=processors.Sequence([post]),
    )
    check_offsets(theirs, tmp_path)


MODELS = {
    "Unigram": lambda: (
        models.Unigram(),
        trainers.UnigramTrainer(
            vocab_size=60, unk_token="<unk>", special_tokens=["<unk>"], show_progress=False
        ),
    ),
    "BPE": lambda: (
        models.BPE(unk_token="<unk>"),
        trainers.BpeTrainer(vocab_size=80, special_tokens=["<unk>"], show_progress=False),
    ),
}


@pytest.mark.parametrize("model", MODELS)
def test_a_metaspace_inside_a_sequence_spells_spaces_with_its_replacement(model, tmp_path):
    # read as a Pipeline (the normalizer sees to that), whose offsets rely on the spelling
    theirs = hf_trained(
        TEXT,
        *MODELS[model](),
        normalizers.NFKC(),
        pre=pre_tokenizers.Sequence([pre_tokenizers.Metaspace(replacement="▂")]),
        decoder=decoders.Metaspace(replacement="▂"),
    )
    assert type(check_offsets(theirs, tmp_path)) is Tokenizer
