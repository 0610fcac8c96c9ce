"""Four tokenizers, one text: which one compresses best, and what does each give up?

    python examples/compare_tokenizers.py [--text FILE] [--vocab-size 2048]

Trains a character tokenizer, byte-level BPE, WordPiece (with each of its two merge scores) and
Unigram on the first 90% of a text (tinyshakespeare, which ships in data/, or the help-topic
text that ships with CPython if it is missing) and measures each on the last 10%, which none
of them has seen. With the `tokenizers` library installed it also trains that
library's WordPiece at the same vocabulary size and compares token counts. It writes
out/compare_tokenizers/tokens.html, the token visualizer's page: the held-out text coloured by
token for each one (--html chooses another file).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import gpt.tokenizers as tk  # noqa: E402
from gpt.tokenizers.metrics import sample_line  # noqa: E402

SHAKESPEARE = REPO / "data" / "tinyshakespeare.txt"
HTML = "out/compare_tokenizers/tokens.html"  # the example's run folder, not the working directory


def default_text() -> tuple[str, str]:
    if SHAKESPEARE.exists():
        return SHAKESPEARE.read_text(encoding="utf-8"), str(SHAKESPEARE)
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics)), "pydoc_data.topics (CPython help)"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text", help="a UTF-8 text file (default: tinyshakespeare)")
    p.add_argument("--vocab-size", type=int, default=2048)
    p.add_argument(
        "--html",
        default=HTML,
        help=f"write the token visualizer page here (default {HTML}; '' for none)",
    )
    args = p.parse_args(argv)
    if args.text:
        text, source = Path(args.text).read_text(encoding="utf-8"), args.text
    else:
        text, source = default_text()
    cut = int(len(text) * 0.9)
    train, heldout = text[:cut], text[cut:]
    print(f"text: {source}, training on {len(train):,} characters, held out {len(heldout):,}\n")

    tokenizers = {
        "char": lambda: tk.CharTokenizer.train(train, unknown="replace"),
        "bpe": lambda: tk.ByteBPE.train(train, args.vocab_size),
        "wordpiece": lambda: tk.WordPiece.train(train, args.vocab_size),
        "wp-likelihood": lambda: tk.WordPiece.train(train, args.vocab_size, score="likelihood"),
        "unigram": lambda: tk.Unigram.train(train, args.vocab_size),
    }
    reports, trained = [], {}
    for name, make in tokenizers.items():
        t0 = time.perf_counter()
        tok = make()
        print(f"trained {name:<13} vocab {tok.vocab_size:>5} in {time.perf_counter() - t0:5.2f} s")
        trained[name] = tok
        reports.append(tk.report(tok, heldout, name=name))
    hf_tokens = library_wordpiece_tokens(train, heldout, args.vocab_size)
    print()
    print(tk.format_reports(reports))
    if hf_tokens is not None:
        ours = next(r for r in reports if r.name == "wordpiece")
        print(
            f"\nthe `tokenizers` library's WordPiece trainer, same vocabulary size: {hf_tokens:,} "
            f"tokens; ours by frequency (the default) needs {ours.n_tokens / hf_tokens:.3f}x that"
        )

    if sys.stdout.isatty():
        print("\nthat line in colour (byte-level BPE), one colour per token:")
        print(tk.to_terminal(trained["bpe"], sample_line(heldout)))
    if args.html:
        sample = heldout[:1500]
        title = f"How each tokenizer cuts held-out text of {Path(source).name}"
        page = tk.to_html(trained, sample, title)
        Path(args.html).parent.mkdir(parents=True, exist_ok=True)
        Path(args.html).write_text(page, encoding="utf-8")
        print(f"\nwrote {args.html}: the held-out text coloured by token, ids on hover")


def library_wordpiece_tokens(train: str, heldout: str, vocab_size: int) -> int | None:
    """Tokens the `tokenizers` library's WordPiece (BERT normalizer and pre-tokenizer, no
    lowercasing, as ours) needs on the held-out text, or None without that library."""
    try:
        from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    except ImportError:
        return None
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=["[UNK]"], show_progress=False
    )
    tok.train_from_iterator([train], trainer)
    return len(tok.encode(heldout, add_special_tokens=False).ids)


if __name__ == "__main__":
    main()
