"""Benchmark: training and encoding speed of gpt.tokenizers beside Hugging Face ``tokenizers``.

    python benchmarks/bench_tokenizers.py [--text FILE] [--vocab-size 4096] [--repeat 3]
        [--clock wall|cpu]
        [--section table|patterns|backtracking|unigram-metaspace|precompiled|llama2]

``--section table`` (the default) measures, on one text (default: tinyshakespeare, 1.1 MB):

* byte-level BPE training to ``--vocab-size``,
* Unigram training to ``--vocab-size``,
* WordPiece training (for information; there is no target for it),
* byte-level BPE encoding throughput in MB/s, cold (fresh tokenizer, empty cache) and warm,
* the same encoding cold with the pre-tokenizer pattern run under the time limit that patterns
  from files get (GPT-2's pattern wrapped in ``(?:...)``, so it is not recognised as shipped),
* a naive BPE trainer that recounts every pair after every merge, timed for ``--naive-merges``
  merges and extrapolated to the full vocabulary: the baseline the incremental trainer beats.

The other sections print the figures ``docs/tokenizers.md`` quotes beside them:

* ``patterns``: pre-tokenizing with GPT-4's pattern without and with the time limit that
  patterns from files run under, and cold encoding (BPE and Unigram trained to
  ``--vocab-size``) with the shipped patterns, which run without it,
* ``backtracking``: how long the catastrophic pattern ``(a|a)+$`` takes, without a limit, on
  ``--backtrack-chars`` characters and a few fewer (each one more doubles the time),
* ``unigram-metaspace``: Unigram trained on the first 90% with ``Metaspace``-only splitting
  (ours, ``pattern=METASPACE_SPLIT_PATTERN``, and the library's), and ours with the default
  pattern: training time and the number of tokens on the last 10%.

The Hugging Face library runs single-threaded (RAYON_NUM_THREADS=1, set before it is imported)
so the comparison is one core against one core. Each number is the median of ``--repeat`` runs.
Both libraries encode with the same vocabulary: ours is exported as tokenizer.json and loaded
there.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import gpt.tokenizers as tk  # noqa: E402

DEFAULT_TEXT = REPO / "data" / "tinyshakespeare.txt"


CLOCK = time.perf_counter


def median_time(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t0 = CLOCK()
        result = fn()
        times.append(CLOCK() - t0)
    return statistics.median(times), result


def naive_bpe_train(text: str, n_merges: int) -> list[tuple[int, int]]:
    """BPE training the slow way: recount all pairs of all words after every merge."""
    from collections import Counter

    import regex

    from gpt.tokenizers.pre_tokenizers import GPT2_PATTERN

    words = Counter(regex.findall(GPT2_PATTERN, text))
    seqs = [list(w.encode("utf-8")) for w in words]
    freqs = list(words.values())
    merges = []
    for new_id in range(256, 256 + n_merges):
        counts: Counter = Counter()
        for s, f in zip(seqs, freqs):
            for pair in zip(s, s[1:]):
                counts[pair] += f
        best = min(counts, key=lambda p: (-counts[p], p))
        merges.append(best)
        for k, s in enumerate(seqs):
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[k] = out
    return merges


#: GPT-4's (cl100k) pre-tokenizer pattern, as `regex` spells it: not shipped here, so a file
#: carrying it runs under the time limit
GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*"""
    r"""|\s*[\r\n]|\s+(?!\S)|\s+"""
)


def section_patterns(text: str, vocab_size: int, repeat: int) -> None:
    """The cost of the time limit on patterns from files, and encoding with shipped ones."""
    from gpt.tokenizers.pre_tokenizers import find_spans

    mb = len(text.encode("utf-8")) / 1e6
    t_free, free = median_time(lambda: find_spans(GPT4_PATTERN, text, trusted=True), repeat)
    t_limited, limited = median_time(lambda: find_spans(GPT4_PATTERN, text), repeat)
    assert free == limited, "the time limit changed the pre-tokens"
    print(
        f"GPT-4 pattern, pre-tokenizing: {t_free:.2f} s without the limit, {t_limited:.2f} s with"
    )
    bpe = tk.ByteBPE.train(text, vocab_size)
    uni = tk.Unigram.train(text, vocab_size)
    t_bpe, _ = median_time(lambda: tk.ByteBPE(bpe.vocab, bpe.merges).encode(text), repeat)
    t_uni, _ = median_time(lambda: tk.Unigram(uni.pieces, ["<unk>"]).encode(text), repeat)
    print(f"cold encoding, vocab {vocab_size}, shipped patterns (no limit):")
    print(f"  byte-level BPE {mb / t_bpe:.2f} MB/s, Unigram {mb / t_uni:.2f} MB/s")


def section_backtracking(n_chars: int) -> None:
    """``(a|a)+$`` on "a" * k + "b": the catastrophic backtracking the time limit stops."""
    import regex

    pattern = regex.compile(r"(a|a)+$")
    for k in range(max(1, n_chars - 4), n_chars + 1):
        subject = "a" * (k - 1) + "b"
        t0 = CLOCK()
        pattern.search(subject)
        print(f"(a|a)+$ on {k} characters: {CLOCK() - t0:.2f} s", flush=True)


def section_unigram_metaspace(text: str, vocab_size: int) -> None:
    """Unigram with Metaspace-only splitting, ours and the library's, trained on the first
    90% of the text: training time and tokens on the last 10% (one run each)."""
    from gpt.tokenizers.pre_tokenizers import METASPACE_SPLIT_PATTERN

    cut = int(len(text) * 0.9)
    train, heldout = text[:cut], text[cut:]
    rows = []
    for what, pattern in (
        ("ours, Metaspace only", METASPACE_SPLIT_PATTERN),
        ("ours, default", None),
    ):
        kw = {} if pattern is None else {"pattern": pattern}
        t, tok = median_time(lambda kw=kw: tk.Unigram.train(train, vocab_size, **kw), 1)
        rows.append((what, t, len(tok.encode(heldout))))
    hf = hf_library()
    if hf is not None:
        from tokenizers import models, pre_tokenizers, trainers

        def hf_train():
            t = hf.Tokenizer(models.Unigram())
            t.pre_tokenizer = pre_tokenizers.Metaspace()
            trainer = trainers.UnigramTrainer(
                vocab_size=vocab_size,
                special_tokens=["<unk>"],
                unk_token="<unk>",
                show_progress=False,
            )
            t.train_from_iterator([train], trainer)
            return t

        t, theirs = median_time(hf_train, 1)
        n = len(theirs.encode(heldout, add_special_tokens=False).ids)
        rows.append(("tokenizers library, Metaspace", t, n))
    print(f"Unigram, vocab {vocab_size}, trained on the first 90%, tokens on the last 10%:")
    for what, t, n in rows:
        print(f"  {what}: {t:.2f} s, {n:,} tokens")


def section_precompiled(text: str, repeat: int) -> None:
    """SentencePiece's nmt_nfkc character map as a ``Precompiled`` normalizer: MB/s of ours and
    of the library's, on the text and on text dense in characters the map rewrites."""
    sys.path.insert(0, str(REPO / "tests" / "gpt" / "tokenizers"))
    from hf_training import sentencepiece_charsmap

    from gpt.tokenizers.precompiled import CharsMap

    blob = sentencepiece_charsmap("nmt_nfkc")
    hf = hf_library()
    n = len(text) // 100  # repeats of each ~100-byte sentence below: about the text's size
    texts = {
        "the text": text,
        "Japanese": "東京は日本の首都です。人口は約千四百万人で、世界で最大の都市圏です。" * n,
        "Russian": "Москва — столица России, крупнейший по населению город страны. " * n,
        "dense in rewrites": "Ｈｅｌｌｏ ﬁne café naïve e\u0301 \r\n Ⅻ ① ™ 東京 " * n,
    }
    for what, subject in texts.items():
        mb = len(subject.encode("utf-8")) / 1e6
        t_ours, normalized = median_time(functools.partial(CharsMap(blob), subject), repeat)
        line = f"Precompiled (nmt_nfkc), {what} ({mb:.2f} MB): ours {mb / t_ours:.2f} MB/s"
        if hf is not None:
            theirs = hf.normalizers.Precompiled(blob)
            t_hf, same = median_time(functools.partial(theirs.normalize_str, subject), repeat)
            assert same == normalized, "the library normalizes the text otherwise"
            line += f", tokenizers {mb / t_hf:.2f} MB/s (ours {t_hf / t_ours:.2f}x as fast)"
        print(line)
    if hf is None:
        return
    # A T5-style tokenizer.json (the library's Unigram trained on the text, nmt_nfkc and a
    # Replace squeezing spaces, Metaspace): encoding the text with ours and the library's.
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

    t5 = hf.Tokenizer(models.Unigram())
    squeeze = normalizers.Replace(hf.Regex(" {2,}"), " ")
    t5.normalizer = normalizers.Sequence([normalizers.Precompiled(blob), squeeze])
    t5.pre_tokenizer, t5.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=4096, special_tokens=["<unk>"], unk_token="<unk>", show_progress=False
    )
    t5.train_from_iterator([text], trainer)
    with tempfile.TemporaryDirectory() as d:
        t5.save(f"{d}/tokenizer.json")
        ours = tk.load(f"{d}/tokenizer.json")
    t_ours, ids = median_time(functools.partial(ours.encode, text), repeat)
    t_hf, theirs = median_time(functools.partial(t5.encode, text, add_special_tokens=False), repeat)
    assert ids == theirs.ids, "the library encodes the text otherwise"
    mb = len(text.encode("utf-8")) / 1e6
    print(
        f"T5-style tokenizer.json (Unigram 4096, nmt_nfkc, Metaspace), encoding the text: ours "
        f"{mb / t_ours:.2f} MB/s, tokenizers {mb / t_hf:.2f} MB/s (ours {t_hf / t_ours:.2f}x)"
    )


def section_llama2(text: str, repeat: int) -> None:
    """A Llama-2-style file (SentencePiece BPE, vocab 4096, trained on the text as Llama 2's
    was, then converted) encoding the text: MB/s of ours, the library's and SentencePiece's,
    each from a fresh tokenizer (an empty word cache), on the whole text as one string and on
    the text in 1000-character pieces."""
    sys.path.insert(0, str(REPO / "tests" / "gpt" / "tokenizers"))
    from hf_training import sentencepiece_bpe

    hf = hf_library()
    sp, data = sentencepiece_bpe(text, 4096)
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/tokenizer.json"
        Path(path).write_text(json.dumps(data), encoding="utf-8")

        def fresh(name: str):  # an encoder read anew: every run starts with empty caches
            if name == "ours":
                return tk.load(path).encode
            if name == "tokenizers":
                theirs = hf.Tokenizer.from_file(path)
                return lambda t: theirs.encode(t, add_special_tokens=False).ids
            return sp.encode

        mb = len(text.encode("utf-8")) / 1e6
        pieces = [text[k : k + 1000] for k in range(0, len(text), 1000)]
        for what, subject in (("as one string", [text]), ("in 1000-character pieces", pieces)):
            line, ids = [], {}
            for name in ["ours"] + (["tokenizers"] if hf else []) + ["sentencepiece"]:
                times = []
                for _ in range(repeat):
                    encode = fresh(name)
                    t0 = CLOCK()
                    ids[name] = [encode(t) for t in subject]
                    times.append(CLOCK() - t0)
                line.append(f"{name} {mb / statistics.median(times):.2f} MB/s")
            assert all(v == ids["ours"] for v in ids.values()), "the encoders disagree"
            print(f"Llama-2-style tokenizer.json (BPE 4096), the text {what}: " + ", ".join(line))


def hf_library():
    try:
        import tokenizers
    except ImportError:
        return None
    return tokenizers


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text", default=str(DEFAULT_TEXT))
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--naive-merges", type=int, default=20, help="0 to skip the naive baseline")
    p.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall time, or this process's CPU time (steadier when other jobs share the machine)",
    )
    p.add_argument(
        "--section",
        choices=("table", "patterns", "backtracking", "unigram-metaspace", "precompiled", "llama2"),
        default="table",
        help="what to measure (see the module docstring); table: the Speed table",
    )
    p.add_argument(
        "--backtrack-chars", type=int, default=24, help="longest subject for --section backtracking"
    )
    args = p.parse_args(argv)
    global CLOCK
    CLOCK = time.perf_counter if args.clock == "wall" else time.process_time
    text = Path(args.text).read_text(encoding="utf-8")
    if args.section == "patterns":
        section_patterns(text, args.vocab_size, args.repeat)
        return 0
    if args.section == "backtracking":
        section_backtracking(args.backtrack_chars)
        return 0
    if args.section == "unigram-metaspace":
        section_unigram_metaspace(text, args.vocab_size)
        return 0
    if args.section == "precompiled":
        section_precompiled(text, args.repeat)
        return 0
    if args.section == "llama2":
        section_llama2(text, args.repeat)
        return 0
    mb = len(text.encode("utf-8")) / 1e6
    V, R = args.vocab_size, args.repeat
    hf = hf_library()
    rows = []  # (what, ours seconds or MB/s, hf value, unit)
    print(
        f"text: {args.text} ({mb:.2f} MB), vocab {V}, median of {R} runs, {args.clock} clock",
        flush=True,
    )

    t_bpe, bpe = median_time(lambda: tk.ByteBPE.train(text, V), R)
    t_uni, _ = median_time(lambda: tk.Unigram.train(text, V), R)
    t_wp, _ = median_time(lambda: tk.WordPiece.train(text, V), R)
    t_cold, ids = median_time(lambda: tk.ByteBPE(bpe.vocab, bpe.merges).encode(text), R)
    bpe.encode(text)  # fill the cache
    t_warm, _ = median_time(lambda: bpe.encode(text), R)
    limited = f"(?:{bpe.pattern})"
    t_limited, ids_limited = median_time(
        lambda: tk.ByteBPE(bpe.vocab, bpe.merges, pattern=limited).encode(text), R
    )
    assert ids_limited == ids, "the time-limited pattern changed the ids"
    t_naive = None
    if args.naive_merges > 0:
        t, _ = median_time(lambda: naive_bpe_train(text, args.naive_merges), 1)
        t_naive = t * (V - 256) / args.naive_merges

    hf_bpe = hf_uni = hf_wp = hf_enc = None
    if hf is not None:
        from tokenizers import models, pre_tokenizers, trainers

        def hf_train(model, trainer, pre):
            t = hf.Tokenizer(model)
            t.pre_tokenizer = pre
            t.train_from_iterator([text], trainer)
            return t

        alphabet = pre_tokenizers.ByteLevel.alphabet()
        hf_bpe, _ = median_time(
            lambda: hf_train(
                models.BPE(),
                trainers.BpeTrainer(vocab_size=V, initial_alphabet=alphabet, show_progress=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False),
            ),
            R,
        )
        hf_uni, _ = median_time(
            lambda: hf_train(
                models.Unigram(),
                trainers.UnigramTrainer(
                    vocab_size=V, special_tokens=["<unk>"], unk_token="<unk>", show_progress=False
                ),
                pre_tokenizers.Metaspace(),
            ),
            R,
        )
        hf_wp, _ = median_time(
            lambda: hf_train(
                models.WordPiece(unk_token="[UNK]"),
                trainers.WordPieceTrainer(
                    vocab_size=V, special_tokens=["[UNK]"], show_progress=False
                ),
                pre_tokenizers.BertPreTokenizer(),
            ),
            R,
        )
        with tempfile.TemporaryDirectory() as d:
            bpe.save(Path(d) / "tokenizer.json")
            theirs = hf.Tokenizer.from_file(str(Path(d) / "tokenizer.json"))
        hf_enc, enc = median_time(lambda: theirs.encode(text), R)
        assert enc.ids == ids, "ids differ from the tokenizers library"

    rows = [
        ("byte-level BPE train", t_bpe, hf_bpe, "s", "<= 2 s"),
        *(
            [(f"naive BPE train (from {args.naive_merges} merges)", t_naive, hf_bpe, "s", "-")]
            if t_naive
            else []
        ),
        ("Unigram train", t_uni, hf_uni, "s", "<= 6.5 s"),
        ("WordPiece train", t_wp, hf_wp, "s", "-"),
        ("BPE encode, cold cache", mb / t_cold, hf_enc and mb / hf_enc, "MB/s", ">= 2 MB/s"),
        ("BPE encode, warm cache", mb / t_warm, hf_enc and mb / hf_enc, "MB/s", "-"),
        ("BPE encode, cold, pattern time-limited", mb / t_limited, None, "MB/s", "-"),
    ]
    print()
    print("| measurement | gpt.tokenizers | HF tokenizers (1 thread) | our speed / HF's | target |")
    print("|---|---|---|---|---|")
    for what, ours, theirs, unit, target in rows:
        if theirs:
            # > 1 means we are faster
            ratio = f"{(ours / theirs if unit == 'MB/s' else theirs / ours):.2f}x"
            theirs_s = f"{theirs:.2f} {unit}"
        else:
            ratio, theirs_s = "-", "not installed" if hf is None else "-"
        print(f"| {what} | {ours:.2f} {unit} | {theirs_s} | {ratio} | {target} |")
    if hf is not None:
        print("\nids from our BPE and from the tokenizers library on the same file: identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
