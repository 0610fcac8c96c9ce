from collections import Counter

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from gpt.tokenizers import ByteBPE, TokenizerError
from gpt.tokenizers.base import merge_pair
from gpt.tokenizers.models import apply_merges
from gpt.tokenizers.pre_tokenizers import GPT2_PATTERN

from .tokenizer_strategies import bpe_merges, small_corpus, unicode_text


def pretokenize(text: str, pattern: str = GPT2_PATTERN) -> list[str]:
    """GPT-2's pre-tokens, independently of the pre-tokenizer (its pattern matches all text)."""
    return regex.findall(pattern, text)


@pytest.fixture(scope="module")
def bpe(train_text):
    return ByteBPE.train(train_text, 600, special_tokens=["<|endoftext|>"])


def test_wikipedia_example_by_hand():
    # aaabdaaabac: "aa" occurs 4 times -> Z. Then ZabdZabac has "Za" and "ab" twice each; the
    # tie goes to the smaller pair of ids, (a, b) = (97, 98) -> Y. Then ZYdZYac: "ZY" -> X.
    tok = ByteBPE.train("aaabdaaabac", 259)
    a, b = ord("a"), ord("b")
    assert tok.merges == [(a, a), (a, b), (256, 257)]
    assert tok.token_bytes(258) == b"aaab"
    # encoding replays the merges: X d X a c
    assert tok.encode("aaabdaaabac") == [258, ord("d"), 258, a, ord("c")]
    assert tok.decode(tok.encode("aaabdaaabac")) == "aaabdaaabac"


def naive_bpe(text: str, n_merges: int) -> list[tuple[int, int]]:
    """Recount every pair after every merge: slow, obviously right, the reference."""
    words = Counter(pretokenize(text, GPT2_PATTERN))
    seqs = {w: list(w.encode()) for w in words}
    merges = []
    for new_id in range(256, 256 + n_merges):
        counts = Counter()
        for w, f in words.items():
            for p in zip(seqs[w], seqs[w][1:]):
                counts[p] += f
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        merges.append(best)
        for w in seqs:
            s, out, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return merges


@settings(deadline=None)  # timing varies on a shared 2-core machine
@given(small_corpus, st.integers(1, 12))
def test_incremental_training_matches_full_recount(text, n_merges):
    expected = naive_bpe(text, n_merges)
    if len(expected) < n_merges:
        with pytest.raises(TokenizerError, match="more than the text supports"):
            ByteBPE.train(text, 256 + n_merges)
    else:
        assert ByteBPE.train(text, 256 + n_merges).merges == expected


def test_incremental_training_matches_full_recount_on_real_text(train_text):
    text = train_text[:20_000]
    assert ByteBPE.train(text, 256 + 60).merges == naive_bpe(text, 60)


@settings(deadline=None)  # timing varies on a shared 2-core machine
@given(unicode_text)
def test_round_trip_any_unicode(bpe, text):
    assert bpe.decode(bpe.encode(text)) == text


@settings(deadline=None)  # timing varies on a shared 2-core machine
@given(unicode_text)
def test_round_trip_when_trained_on_the_text_itself(text):
    tok = ByteBPE.train(text + "x", 256)  # no merges: pure bytes
    assert tok.encode(text) == list(text.encode("utf-8"))
    assert tok.decode(tok.encode(text)) == text


def test_training_is_deterministic(train_text):
    a = ByteBPE.train(train_text[:50_000], 400)
    b = ByteBPE.train(iter([train_text[:25_000], train_text[25_000:50_000]]), 400)
    assert a.merges == ByteBPE.train(train_text[:50_000], 400).merges
    # an iterator of chunks gives the same merges when no pre-token spans a chunk boundary
    assert len(b.merges) == len(a.merges)


def test_merges_stay_inside_pre_tokens(bpe):
    for i in range(256, bpe.vocab_size - 1):
        word = bpe.token_bytes(i).decode("utf-8", errors="replace")
        assert len(pretokenize(word)) == 1, word


def test_special_tokens_are_never_split(bpe):
    eot = bpe.token_to_id("<|endoftext|>")
    assert eot == bpe.vocab_size - 1
    ids = bpe.encode("hello<|endoftext|>world<|endoftext|>")
    assert ids.count(eot) == 2
    assert bpe.decode(ids) == "hello<|endoftext|>world<|endoftext|>"
    # treated as plain text when not allowed
    plain = bpe.encode("<|endoftext|>", allowed_special="none")
    assert eot not in plain and bpe.decode(plain) == "<|endoftext|>"
    assert bpe.encode("<|endoftext|>", allowed_special={"<|endoftext|>"}) == [eot]


def test_special_tokens_in_training_text_are_not_merged():
    text = "ab<|eot|>ab<|eot|>ab<|eot|>"
    tok = ByteBPE.train(text, 258, special_tokens=["<|eot|>"])
    assert tok.merges == [(ord("a"), ord("b"))]


def test_invalid_utf8_from_byte_tokens_is_replaced(bpe):
    # the first byte of a 2-byte character alone is not valid UTF-8
    first_byte = "é".encode()[0]
    assert bpe.decode([first_byte]) == "\ufffd"
    assert bpe.decode_bytes([first_byte]) == bytes([first_byte])


def test_cache_gives_the_same_ids(bpe, heldout_text):
    cold = ByteBPE(bpe.vocab, bpe.merges, bpe.special).encode(heldout_text)
    assert bpe.encode(heldout_text) == cold
    assert bpe.encode(heldout_text) == cold  # warm


def test_batch_encode_and_lookups(bpe):
    texts = ["hello there", "", "général 🤗"]
    assert bpe.encode_batch(texts) == [bpe.encode(t) for t in texts]
    assert bpe.decode_batch(bpe.encode_batch(texts)) == texts
    space_t = bpe.token_to_id("Ġt")  # GPT-2's printable spelling of b" t"
    assert bpe.token_bytes(space_t) == b" t"
    assert bpe.id_to_token(space_t) == "Ġt"
    with pytest.raises(TokenizerError):
        bpe.token_to_id("definitely not a token")


def test_custom_pattern_whitespace_split():
    tok = ByteBPE.train("aa bb aa bb", 258, pattern=r"\S+|\s+")
    assert tok.decode(tok.encode("aa bb")) == "aa bb"
    assert tok.pattern == r"\S+|\s+"


@settings(deadline=None)  # timing varies on a shared 2-core machine
@given(unicode_text)
def test_a_pattern_that_misses_characters_loses_nothing(text):
    # r"\w+" matches no spaces or punctuation: the gaps become pre-tokens of their own
    tok = ByteBPE.train("hello, world! hello again", 260, pattern=r"\w+")
    assert tok.decode(tok.encode(text)) == text


def test_invalid_pattern_is_a_clear_error():
    with pytest.raises(TokenizerError, match="invalid pre-tokenizer pattern"):
        ByteBPE.train("abc", 257, pattern="(unclosed")


def naive_encode(tok: ByteBPE, text: str) -> list[int]:
    """The textbook encoder, on bytes: split into pre-tokens, start from single bytes, and
    while some adjacent pair was learned, merge every occurrence (left to right) of the pair
    learned first. Independent of the fast encoder's ids, ranks table and cache."""
    rank: dict[tuple[bytes, bytes], int] = {}
    for r, (a, b) in enumerate(tok.merges):
        rank.setdefault((tok.token_bytes(a), tok.token_bytes(b)), r)
    bytes_to_id = {tok.token_bytes(i): i for i in range(tok.vocab_size)}
    ids = []
    for word in pretokenize(text, tok.pattern):
        parts = [bytes([b]) for b in word.encode("utf-8")]
        while True:
            learned = [pair for pair in zip(parts, parts[1:]) if pair in rank]
            if not learned:
                break
            first = min(learned, key=rank.__getitem__)
            out, i = [], 0
            while i < len(parts):
                if tuple(parts[i : i + 2]) == first:
                    out.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            parts = out
        ids += [bytes_to_id[p] for p in parts]
    return ids


@settings(deadline=None)  # timing varies on a shared 2-core machine
@given(small_corpus, small_corpus, st.integers(1, 40))
def test_encoding_applies_merges_in_the_order_learned(train, text, n_merges):
    """The fast encoder (ranks table, cache) gives the textbook encoder's ids on text it was
    not trained on: merges applied in the wrong order, or one skipped, change them."""
    try:
        tok = ByteBPE.train(train, 256 + n_merges)
    except TokenizerError:  # the text supports fewer merges
        return
    assert tok.encode(text) == naive_encode(tok, text)


def test_encoding_applies_merges_in_the_order_learned_on_real_text(bpe, train_text):
    text = train_text[-5_000:]
    assert bpe.encode(text) == naive_encode(bpe, text)


def test_a_merge_listed_twice_takes_its_later_rank():
    """GPT-2's encoder builds its ranks as a dict from the merge list and the tokenizers
    library does the same: a repeated pair keeps the later rank. With merges ab, bc, ab the
    pair bc (rank 1) then comes before ab (rank 2): "abc" is a|bc, not ab|c."""
    a, b, c = ord("a"), ord("b"), ord("c")
    vocab = {i: bytes([i]) for i in range(256)} | {256: b"ab", 257: b"bc"}
    tok = ByteBPE(vocab, [(a, b), (b, c), (a, b)])
    assert tok.encode("abc") == [a, 257]
    assert tok.encode("abd") == [256, ord("d")]


@settings(max_examples=150, deadline=None)
@given(model=bpe_merges(), word=st.text(alphabet=st.sampled_from("abc▁."), max_size=60))
def test_apply_merges_is_the_rescanning_rule(model, word):
    """``apply_merges`` (a heap over a linked list) gives what the rule says, done the slow way:
    find the lowest-ranked adjacent pair, merge its occurrences left to right, look again."""
    vocab, merges = model
    ranks = {}
    for rank, (a, b) in enumerate(merges):
        ranks.setdefault((vocab[a], vocab[b]), (rank, vocab[a + b]))
    ids = [vocab[c] for c in word if c in vocab]
    expected = list(ids)
    while True:
        pairs = [ranks[p] for p in zip(expected, expected[1:]) if p in ranks]
        if not pairs:
            break
        rank, new_id = min(pairs)
        expected = merge_pair(expected, next(p for p in ranks if ranks[p][0] == rank), new_id)
    assert apply_merges(list(ids), ranks) == expected
