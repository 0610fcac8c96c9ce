"""Offsets (which characters each token covers) and the token visualizer built on them."""

import os
import re

import pytest
from hypothesis import given, settings

import gpt.tokenizers as tk
from gpt.tokenizers.visualize import segments

from .hf_training import assert_encodes_as_library
from .tokenizer_strategies import unicode_text


@pytest.fixture(scope="module")
def trained(train_text):
    text = train_text[:60_000]
    special = ["<|eot|>"]
    return {
        "char": tk.CharTokenizer.train(text, special_tokens=special, unknown="replace"),
        "bpe": tk.ByteBPE.train(text, 400, special),
        "wordpiece": tk.WordPiece.train(text, 400, special),
        "unigram": tk.Unigram.train(text, 400, special),
    }


def covered(text, offsets):
    return [text[a:b] if span else None for _, span in offsets for a, b in [span or (0, 0)]]


def test_offsets_by_hand():
    # ids: [UNK]=0 "un"=1 "##aff"=2 "##able"=3 "!"=4; WordPiece drops the spaces
    tok = tk.WordPiece(["[UNK]", "un", "##aff", "##able", "!"])
    text = "unaffable  !"
    assert tk.encode_with_offsets(tok, text) == [
        (1, (0, 2)),
        (2, (2, 5)),
        (3, (5, 9)),
        (4, (11, 12)),
    ]
    # an unknown word gets the text between its neighbours
    assert tk.encode_with_offsets(tok, "un xyz !") == [(1, (0, 2)), (0, (3, 6)), (4, (7, 8))]


@settings(max_examples=60, deadline=None)
@given(text=unicode_text)
def test_byte_level_offsets_cover_the_text_in_order(trained, text):
    tok = trained["bpe"]
    offsets = tk.encode_with_offsets(tok, text)
    assert all(span is not None for _, span in offsets)
    starts = [span[0] for _, span in offsets]
    assert starts == sorted(starts)
    # every character is covered; a token covers exactly its bytes, widened to whole characters
    # where it holds part of one (at most 3 more bytes of that character on each side)
    covered_chars = set()
    for i, (a, b) in (sp for sp in offsets):
        covered_chars.update(range(a, b))
        raw = tok.token_bytes(i)
        piece = text[a:b].encode("utf-8")
        assert raw in piece and len(piece) - len(raw) <= 6
    assert covered_chars == set(range(len(text)))


@pytest.mark.parametrize("kind", ["char", "unigram"])
def test_reversible_tokenizers_cover_each_character_once(trained, kind):
    tok = trained[kind]
    text = "First Citizen: you are all resolved<|eot|>rather to die than to famish?"
    offsets = tk.encode_with_offsets(tok, text)
    count = [0] * len(text)
    for _, (a, b) in offsets:
        for k in range(a, b):
            count[k] += 1
    assert 0 not in count
    # Unigram's own "▁" before a stretch of text (standing alone as a token) is reported on the
    # character after it, as the `tokenizers` library does; no other character is covered twice
    chunk_starts = {0, text.index("rather")} if kind == "unigram" else set()
    assert {k for k, c in enumerate(count) if c > 1} <= chunk_starts


def test_visualizer_segments_rebuild_the_text(trained):
    text = "  Hello,   naïve 🤗 world!<|eot|>\n\tnext line"
    for tok in trained.values():
        parts = segments(tok, text)
        assert "".join(p for p, _ in parts) == text
        # every id of the encoding is shown once, in order
        shown = [i for _, ids in parts for i in ids]
        assert shown == tok.encode(text)


def test_terminal_output_colours_each_token(trained):
    tok = trained["bpe"]
    text = "Good morrow, neighbour"
    out = tk.to_terminal(tok, text)
    n = len(tok.encode(text))
    assert out.count("\x1b[48;5;") == n
    assert re.sub(r"\x1b\[[0-9;]*m", "", out).startswith(text)
    assert out.endswith(f"{n} tokens: " + " ".join(map(str, tok.encode(text))))


def test_html_page_is_self_contained_with_ids_on_hover(trained, tmp_path):
    text = "Good morrow <b>&</b> 🤗"
    page = tk.to_html(trained, text, title="t & t")
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert "http" not in page  # nothing fetched
    assert "<title>t &amp; t</title>" in page
    assert "<b>" not in page and "&lt;" in page and "&amp;" in page
    tok = trained["bpe"]
    for i in tok.encode(text):
        assert f"id {i}: " in page
    colored = sum(1 for t in trained.values() for _, ids in segments(t, text) if ids)
    assert page.count('<span class="tok"') == colored


@pytest.mark.parametrize(
    "spans, pieces",
    [
        # a token inside the one before it (both cover "b"): one piece, to the furthest end
        ([(1, (0, 3)), (2, (1, 2)), (3, (3, 4))], [("abc", [1, 2]), ("d", [3])]),
        # a token covering nothing joins the piece before it; text no token covers is a gap
        ([(1, (0, 2)), (2, (2, 2)), (3, (3, 4))], [("ab", [1, 2]), ("c", []), ("d", [3])]),
        # side by side: two pieces; a token whose place is unknown is left out
        ([(1, (0, 2)), (2, None), (3, (2, 4))], [("ab", [1]), ("cd", [3])]),
    ],
)
def test_segments_by_hand(monkeypatch, spans, pieces):
    import gpt.tokenizers.visualize as visualize

    monkeypatch.setattr(visualize, "encode_with_offsets", lambda tok, text: spans)
    assert segments(None, "abcd") == pieces


def test_terminal_colours_alternate(trained):
    from gpt.tokenizers.visualize import ANSI_COLOURS

    tok = trained["bpe"]
    text = "Good morrow, neighbour, and good morrow to you all"
    codes = [int(c) for c in re.findall(r"\x1b\[48;5;(\d+)m", tk.to_terminal(tok, text))]
    n = len(tok.encode(text))
    assert n > len(ANSI_COLOURS) and codes == [
        ANSI_COLOURS[k % len(ANSI_COLOURS)] for k in range(n)
    ]


def test_html_page_shows_the_text_and_its_characters_per_token(trained):
    """Read back as HTML, each tokenizer's block is the text itself (newlines shown as ↵),
    whatever '<' and '&' it holds."""
    from html.parser import HTMLParser

    from gpt.tokenizers.visualize import _visible

    class Blocks(HTMLParser):
        def __init__(self):
            super().__init__()
            self.blocks, self.inside = [], False

        def handle_starttag(self, tag, attrs):
            if tag == "pre":
                self.blocks.append("")
                self.inside = True

        def handle_endtag(self, tag):
            self.inside = self.inside and tag != "pre"

        def handle_data(self, data):
            if self.inside:
                self.blocks[-1] += data

    text = "a <b>&amp;</b> & <i\n2 < 3"
    parser = Blocks()
    page = tk.to_html(trained, text)
    parser.feed(page)
    assert parser.blocks == [_visible(text)] * len(trained)
    for tok in trained.values():
        assert f"{len(text) / len(tok.encode(text)):.2f} characters per token" in page


# ----- parity of offsets with the tokenizers library -------------------------------------------

hf = pytest.importorskip("tokenizers", reason="the `tokenizers` library is the reference")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

from tokenizers import models, pre_tokenizers, trainers  # noqa: E402

from .test_pipeline_parity import NORMALIZERS, PRE_TOKENIZERS, STRESS, bpe  # noqa: E402
from .test_pipeline_parity import trained as hf_trained  # noqa: E402


def check_offsets(theirs, tmp_path, texts=STRESS):
    theirs.save(str(tmp_path / "tokenizer.json"))
    ours = tk.load(tmp_path / "tokenizer.json")
    for text in texts:
        assert_encodes_as_library(ours, theirs, text)


@pytest.mark.parametrize("name", NORMALIZERS)
def test_offsets_match_the_library_through_normalizers(name, tmp_path):
    check_offsets(hf_trained(*bpe(), NORMALIZERS[name], pre_tokenizers.Whitespace()), tmp_path)


#: ByteLevel pre-tokenizers trim the leading space off offsets by default; that case is below
COMPARED = [n for n in PRE_TOKENIZERS if "ByteLevel" not in repr(PRE_TOKENIZERS[n])]


@pytest.mark.parametrize("name", COMPARED)
def test_offsets_match_the_library_through_pre_tokenizers(name, tmp_path):
    check_offsets(hf_trained(*bpe(400), pre=PRE_TOKENIZERS[name]), tmp_path)


@pytest.mark.parametrize("name", ["ByteLevel", "Metaspace-Unigram", "BertNormalizer-WordPiece"])
def test_offsets_match_the_library_for_other_models(name, tmp_path):
    if name == "Metaspace-Unigram":
        theirs = hf_trained(
            models.Unigram(),
            trainers.UnigramTrainer(vocab_size=300, unk_token="<unk>", show_progress=False),
            pre=pre_tokenizers.Metaspace(),
        )
    elif name == "BertNormalizer-WordPiece":
        from tokenizers import normalizers

        theirs = hf_trained(
            models.WordPiece(unk_token="[UNK]"),
            trainers.WordPieceTrainer(
                vocab_size=300, special_tokens=["[UNK]"], show_progress=False
            ),
            normalizers.BertNormalizer(),
            pre_tokenizers.BertPreTokenizer(),
        )
    else:
        # offsets as the pre-tokenizer leaves them (trim_offsets=False: the space is included)
        theirs = hf_trained(
            *bpe(400), pre=pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False)
        )
    check_offsets(theirs, tmp_path)


def test_offsets_of_a_trained_unigram_over_a_literal_metaspace(trained, tmp_path):
    # a "▁" in the text itself is found as it is spelled
    ours = trained["unigram"]
    ours.save(tmp_path / "tokenizer.json")
    theirs = hf.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    for text in ["▁lllll", "a▁b  c", "x ▁▁ y", "the▁king", "▁"]:
        assert_encodes_as_library(ours, theirs, text)


def test_plain_cut_and_the_report_sample(trained):
    from gpt.tokenizers.visualize import cut

    tok = tk.WordPiece(["[UNK]", "un", "##aff", "##able", "!"])
    assert cut(tok, "unaffable !") == "un|aff|able| |!"
    report = tk.report(trained["bpe"], "Good morrow, neighbour Baptista, good morrow to you")
    pieces = report.sample.split("|")
    assert "".join(pieces) == "Good morrow, neighbour Baptista, good morrow to you"
    assert len(pieces) == report.n_tokens
    assert "how each cuts a line" in tk.format_reports([report])
