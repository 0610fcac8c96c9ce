"""Templates, truncation and padding of a ``Pipeline``, against the ``tokenizers`` library.

A word-level vocabulary makes every id visible: texts of n words give n ids, so each length
of each text, each strategy and each direction can be tried exhaustively on a small grid and
compared with what the library gives for the same ``tokenizer.json``. The settings we write
back (``to_hf_json``) must mean to the library what they mean here.
"""

import itertools
import json
import os

import pytest

from .library_releases import EARLY_EXIT_TRUNCATION

os.environ.setdefault("RAYON_NUM_THREADS", "1")
hf = pytest.importorskip("tokenizers", reason="the `tokenizers` library is the reference")

from tokenizers import models, pre_tokenizers, processors  # noqa: E402

from gpt.tokenizers import Tokenizer, TokenizerError  # noqa: E402
from gpt.tokenizers.batching import Padding, Truncation  # noqa: E402

VOCAB = {"<unk>": 0, "<pad>": 1, "<s>": 2, "</s>": 3, "<m1>": 4, "<m2>": 5}
VOCAB |= {c: 6 + k for k, c in enumerate("abcdef")}


def words(n: int, letters: str) -> str:
    """A text of ``n`` words cycling through ``letters``: each cut shows which ids it kept."""
    return " ".join(letters[k % len(letters)] for k in range(n))


def library_tokenizer(post=None):
    theirs = hf.Tokenizer(models.WordLevel(VOCAB, unk_token="<unk>"))
    theirs.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    theirs.post_processor = post
    return theirs


def ours_of(theirs) -> Tokenizer:
    return Tokenizer(json.loads(theirs.to_str()))


#: a template whose middle special token is two ids (a file may list several for one token)
TEMPLATE = processors.TemplateProcessing(
    single="<s> $A </s>",
    pair="<s> $A <mid> $B:1 </s>:1",
    special_tokens=[
        ("<s>", 2),
        ("</s>", 3),
        {"id": "<mid>", "ids": [4, 5], "tokens": ["<m1>", "<m2>"]},
    ],
)
POSTS = {
    "template": TEMPLATE,
    "bert": processors.BertProcessing(("</s>", 3), ("<s>", 2)),
    "roberta": processors.RobertaProcessing(("</s>", 3), ("<s>", 2)),
}


@pytest.mark.parametrize("post", POSTS)
def test_templates_add_the_library_s_ids(post):
    theirs = library_tokenizer(POSTS[post])
    ours = ours_of(theirs)
    for n1, n2 in itertools.product(range(3), [None, 0, 1, 2]):
        a, b = words(n1, "abc"), None if n2 is None else words(n2, "def")
        expected = theirs.encode(a, b).ids
        assert ours.encode(a, add_special_tokens=True, pair=b) == expected, (a, b)


@EARLY_EXIT_TRUNCATION
@pytest.mark.parametrize("post", [None, "template"])
@pytest.mark.parametrize("strategy", ["longest_first", "only_first", "only_second"])
@pytest.mark.parametrize("direction", ["right", "left"])
def test_truncation_as_the_library(post, strategy, direction):
    """Every max_length up to past the longest input, single texts and pairs of every length up
    to 4 (equal lengths included), with and without the template's ids (four of them, its
    special token of two ids counted twice)."""
    theirs = library_tokenizer(POSTS.get(post))
    ours = ours_of(theirs)
    for max_length in range(11):
        theirs.enable_truncation(max_length, strategy=strategy, direction=direction)
        ours.truncation = Truncation(max_length, strategy, direction)
        for n1, n2, add in itertools.product(range(5), [None, *range(5)], [True, False]):
            a, b = words(n1, "abc"), None if n2 is None else words(n2, "def")
            try:
                expected = theirs.encode(a, b, add_special_tokens=add).ids
            except Exception:  # the library refuses: so must we
                with pytest.raises(TokenizerError, match="truncation"):
                    ours.encode(a, add_special_tokens=add, pair=b)
                continue
            got = ours.encode(a, add_special_tokens=add, pair=b)
            assert got == expected, (max_length, a, b, add)


BATCH = [words(n, "abcdef") for n in (3, 0, 5, 1, 4)]


@pytest.mark.parametrize("length", [None, 2, 7])
@pytest.mark.parametrize("multiple_of", [None, 3, 4])
@pytest.mark.parametrize("direction", ["right", "left"])
def test_padding_and_attention_masks_as_the_library(length, multiple_of, direction):
    theirs = library_tokenizer(TEMPLATE)
    theirs.enable_padding(
        direction=direction,
        pad_id=1,
        pad_token="<pad>",
        length=length,
        pad_to_multiple_of=multiple_of,
    )
    ours = ours_of(theirs)
    assert ours.padding == Padding(1, length, direction, multiple_of)
    for add in (True, False):
        expected = theirs.encode_batch(BATCH, add_special_tokens=add)
        ids, masks = ours.encode_batch_with_masks(BATCH, "all", add)
        assert ids == [e.ids for e in expected]
        assert masks == [e.attention_mask for e in expected]
        for text in BATCH:  # one text alone: to the fixed length, or to the multiple
            assert (
                ours.encode(text, add_special_tokens=add)
                == theirs.encode(text, add_special_tokens=add).ids
            )


@pytest.mark.parametrize("strategy", ["longest_first", "only_first", "only_second"])
@pytest.mark.parametrize("direction", ["right", "left"])
def test_settings_written_back_mean_the_same_to_the_library(strategy, direction):
    """Truncation and padding set here, written with ``to_hf_json``: the library reads the
    settings we set, and encodes with them as we do; read back here, they are what was set."""
    ours = ours_of(library_tokenizer(TEMPLATE))
    for length, multiple_of in [(None, None), (None, 4), (9, None), (6, 4)]:
        ours.truncation = Truncation(7, strategy, direction)
        ours.padding = Padding(1, length, direction, multiple_of)
        data = ours.to_hf_json()
        theirs = hf.Tokenizer.from_str(json.dumps(data))
        assert theirs.truncation == {
            "max_length": 7,
            "stride": 0,
            "strategy": strategy,
            "direction": direction,
        }
        assert theirs.padding == {
            "length": length,
            "pad_to_multiple_of": multiple_of,
            "pad_id": 1,
            "pad_token": "<pad>",
            "pad_type_id": 0,
            "direction": direction,
        }
        back = Tokenizer(data)
        assert (back.truncation, back.padding) == (ours.truncation, ours.padding)
        # lengths that leave the text cut at least one id (else the library refuses)
        n1, n2 = {"only_first": ((1, 3, 5), (1, 1, 1)), "only_second": ((1, 2, 0), (4, 5, 2))}.get(
            strategy, ((1, 3, 5), (4, 1, 3))
        )
        texts, pairs = [words(n, "abc") for n in n1], [words(n, "def") for n in n2]
        expected = theirs.encode_batch(list(zip(texts, pairs)))
        ids, masks = ours.encode_batch_with_masks(texts, "all", True, pairs)
        assert ids == [e.ids for e in expected]
        assert masks == [e.attention_mask for e in expected]
