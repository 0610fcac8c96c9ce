"""gpt/tokenizers/pre_tokenizers.py: a split at a character class as one regex
(``char_splitting``) makes the pieces that the general split (``splitting``, a loop over the
matches and ``apply_behaviour``) makes, for every behaviour and every class the pre-tokenizers
split at. (Against the ``tokenizers`` library: test_pipeline_parity.py::test_pre_tokenizers.)"""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gpt.tokenizers.pre_tokenizers import (
    BEHAVIOURS,
    NUMERIC,
    PUNCT,
    SPACE,
    char_splitting,
    splitting,
)

from .tokenizer_strategies import split_text

CLASSES = {"whitespace": SPACE, "punctuation": PUNCT, "digits": NUMERIC, "metaspace": "[▁]"}


@pytest.mark.parametrize("behaviour", BEHAVIOURS)
@pytest.mark.parametrize("name", sorted(CLASSES))
@given(pieces=st.lists(st.tuples(split_text, st.booleans()), max_size=4))
@example(pieces=[("a-b--c", True), ("--", False), ("", True), ("▁▁x▁ 1½٢.", True)])
def test_a_split_at_a_character_class_is_the_general_split(name, behaviour, pieces):
    cls = CLASSES[name]
    general = splitting(cls, behaviour, trusted=True)
    # (each piece with where its characters came from: the two keep them alike too)
    pieces = [(text, first, list(range(len(text)))) for text, first in pieces]
    assert char_splitting(cls, behaviour)(pieces) == general(pieces)


def test_the_behaviours_on_the_module_docstrings_example():
    cut = {
        b: [p for p, *_ in char_splitting("[-]", b)([("a-b--c", True, None)])] for b in BEHAVIOURS
    }
    assert cut == {
        "Removed": ["a", "b", "c"],
        "Isolated": ["a", "-", "b", "-", "-", "c"],
        "MergedWithPrevious": ["a-", "b-", "-", "c"],
        "MergedWithNext": ["a", "-b", "-", "-c"],
        "Contiguous": ["a", "-", "b", "--", "c"],
    }


def test_only_the_first_cut_of_the_text_s_first_piece_starts_the_text():
    """(Metaspace with prepend_scheme="first" after a split puts its "▁" there only.)"""
    pieces = [("a-b", True, [0, 1, 2]), ("-c", False, [3, 4])]
    for step in (char_splitting("[-]", "Isolated"), splitting("-", "Isolated")):
        assert step(pieces) == [
            ("a", True, [0]),
            ("-", False, [1]),
            ("b", False, [2]),
            ("-", False, [3]),
            ("c", False, [4]),
        ]


def test_only_a_plain_character_class_is_taken():
    with pytest.raises(ValueError, match=r"char_splitting needs a character class \[\.\.\.\]"):
        char_splitting("-", "Removed")
    with pytest.raises(ValueError, match="char_splitting needs a character class"):
        char_splitting("[^-]", "Removed")
