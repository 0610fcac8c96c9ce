"""The models a ``tokenizer.json`` names (``gpt.tokenizers.models.py``), on their own; the
whole pipelines are held to the ``tokenizers`` library in ``test_pipeline_parity.py``."""

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpt.tokenizers.models import MergeModel

from .tokenizer_strategies import bpe_merges, bpe_words


@settings(max_examples=200, deadline=None)
@given(
    model=bpe_merges(),
    word=bpe_words,
    unk=st.booleans(),
    fuse_unk=st.booleans(),
    byte_fallback=st.booleans(),
)
@example(  # "▁" joined by "a" alone: the word cuts before the 2nd "▁" and the 3rd, not the 1st
    model=({"<unk>": 0, "a": 1, "b": 2, "▁": 3, "a▁": 4, "▁b": 5}, [("a", "▁"), ("▁", "b")]),
    word="a▁b▁b▁b",
    unk=True,
    fuse_unk=False,
    byte_fallback=False,
).via("a cut after an unjoined character")
@example(  # "b" is merged in front of "▁" (which starts the most tokens): no cut after it
    model=(
        {"<unk>": 0, "a": 1, "b": 2, "▁": 3, "▁a": 4, "b▁": 5, "▁ab": 6},
        [("▁", "a"), ("b", "▁"), ("▁a", "b")],
    ),
    word="▁ab▁b▁a",
    unk=False,
    fuse_unk=False,
    byte_fallback=False,
).via("no cut after what is merged in front")
@example(  # unknown characters before a "▁" that nothing joins: no cut without an <unk> (an
    # "x" is dropped, and "a▁" merges), a cut with one
    model=({"<unk>": 0, "<0x64>": 1, "▁": 2, "a": 3, "a▁": 4}, [("a", "▁")]),
    word="▁ax▁adx▁a",
    unk=False,
    fuse_unk=False,
    byte_fallback=True,
).via("no cut after a dropped character")
@example(  # a merge puts a byte token before "▁": no cut after an unknown character then
    model=({"<unk>": 0, "<0x64>": 1, "▁": 2, "a": 3, "<0x64>▁": 4}, [("<0x64>", "▁")]),
    word="▁ad▁a▁ax▁a",
    unk=True,
    fuse_unk=True,
    byte_fallback=True,
).via("no cut after a byte token that merges")
def test_a_merge_model_encodes_a_word_as_its_parts(model, word, unk, fuse_unk, byte_fallback):
    """Cutting a word where no merge joins the two characters (``MergeModel.parts``) changes
    no id: the word's ids are its parts' ids one after another. Every cut is before a token y,
    after a token x when no merge (a, b) has a ending in x and b starting with y, or after an
    unknown character when there is an unknown token and no merge puts ">" (the end of "<unk>"
    and of byte tokens) before y."""
    vocab, merges = model
    bpe = MergeModel(vocab, merges, "<unk>" if unk else None, "", "", fuse_unk, byte_fallback)
    parts = bpe.parts(word)
    assert "".join(parts) == word and (word == "" or all(parts))
    assert [i for p in parts for i in bpe.encode_word(p)] == bpe.encode_word(word)
    junctions = {(a[-1], b[0]) for a, b in merges}
    end = 0
    for part in parts[:-1]:
        end += len(part)
        x, y = word[end - 1], word[end]
        assert y in vocab and (x in vocab or unk), (x, y)
        tail = x if x in vocab else ">"  # the end of "<0x64>" and of "<unk>"
        assert (tail, y) not in junctions, (x, y)


def test_where_a_merge_model_cuts_a_word():
    """Before the character most tokens start with, after any that no merge puts in front of
    it (and before characters that nothing else is put in front of); nowhere where the model
    decorates characters or takes words whole."""
    vocab = {c: i for i, c in enumerate(["<unk>", "a", "b", "▁", "▁a", "b▁", "▁ab"])}
    merges = [("▁", "a"), ("b", "▁"), ("▁a", "b")]
    bpe = MergeModel(vocab, merges, "<unk>")
    # "▁" starts two tokens; only "b" is merged in front of it
    assert bpe.parts("▁a▁ab▁b▁a") == ["▁a", "▁ab▁b▁a"]
    assert bpe.parts("a") == ["a"] and bpe.parts("") == [""]
    assert bpe.parts("▁a?▁a") == ["▁a?", "▁a"]  # "?" becomes "<unk>", never merged
    assert MergeModel(vocab, merges).parts("▁a?▁a") == ["▁a?▁a"]  # "?" is dropped: "a▁" meet
    # a byte token merged in front of "▁": no cut after an unknown character ("d" has byte
    # tokens; "?" becomes "[UNK]", which might have been one), only after a token
    fallback = {"[UNK]": 0, "<0x64>": 1, "▁": 2, "a": 3, "<0x64>▁": 4, "▁a": 5}
    fallback_merges = [("<0x64>", "▁"), ("▁", "a")]
    bytes_merge = MergeModel(fallback, fallback_merges, "[UNK]", byte_fallback=True)
    assert bytes_merge.parts("▁ad▁a?▁a▁a") == ["▁ad▁a?▁a", "▁a"]
    assert bytes_merge.encode_word("▁ad▁a") == [5, 4, 3]
    assert MergeModel(vocab, merges, "<unk>", ignore_merges=True).parts("▁a▁a") == ["▁a▁a"]
    suffixed = {**vocab, "a</w>": 7, "b</w>": 8, "▁</w>": 9}
    assert MergeModel(suffixed, merges, "<unk>", suffix="</w>").parts("▁a▁a") == ["▁a▁a"]
