"""The tokenizer commands of python -m gpt: tokenizer-report and tokenizer-train (examples in
their ``--help``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from nn.serialization import atomic_write

from .base import TokenizerError
from .files import load, read_text
from .metrics import format_reports, report
from .tokenizer import Tokenizer

KIND_NAMES = ("char", "bpe", "wordpiece", "unigram")


REPORT = """Measure tokenizers on held-out text: tokens per character and per word, the
share of the vocabulary used, unknown tokens, and how each one cuts a sample line.

Without --tokenizer, each kind is trained on the first --train-fraction of the file and
measured on the rest. With --tokenizer (repeatable; a Hugging Face tokenizer.json or a GPT-2
folder), the whole file is the held-out text unless --train-fraction is given.

examples:
  python -m gpt tokenizer-report --text data.txt
  python -m gpt tokenizer-report --text data.txt --kinds bpe,unigram --vocab-size 4096
  python -m gpt tokenizer-report --text data.txt --tokenizer tok.json --html tokens.html
"""


def add_report_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``tokenizer-report`` on an argparse subparsers object."""
    p = subparsers.add_parser(
        "tokenizer-report",
        help="measure tokenizers on held-out text",
        description=REPORT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--text", required=True, help="UTF-8 text file to measure on")
    p.add_argument(
        "--tokenizer",
        action="append",
        default=[],
        metavar="PATH",
        help="a saved tokenizer to report on (repeatable); default: train --kinds",
    )
    p.add_argument(
        "--kinds",
        default=",".join(KIND_NAMES),
        help=f"comma-separated kinds to train, of {', '.join(KIND_NAMES)} (default: all)",
    )
    p.add_argument(
        "--vocab-size", type=int, default=1024, help="for bpe, wordpiece, unigram (default: 1024)"
    )
    p.add_argument(
        "--train-fraction",
        type=float,
        default=None,
        help="share of the file used for training; the rest is held out (default 0.9)",
    )
    p.add_argument("--special", action="append", default=[], help="special token (repeatable)")
    p.add_argument("--save-dir", help="save each trained tokenizer as DIR/KIND.json")
    p.add_argument(
        "--html",
        metavar="FILE",
        help="also write a page showing how each tokenizer cuts the start of the held-out text",
    )
    p.add_argument("--json", action="store_true", help="print the reports as JSON")
    p.set_defaults(func=run_report)
    return p


def _train(kind: str, text: str, args: argparse.Namespace) -> Tokenizer:
    """Train one kind with the command's ``--vocab-size`` and ``--special``. The character
    tokenizer keeps every character it sees (no vocabulary size) and maps new ones to <unk>."""
    from . import KINDS

    if kind == "char":
        return KINDS[kind].train(text, None, args.special, unknown="replace")
    return KINDS[kind].train(text, args.vocab_size, args.special)


def run_report(args: argparse.Namespace) -> int:
    """Run the command; returns a process exit code (0 ok, 2 bad input)."""
    from . import KINDS

    fraction = args.train_fraction
    if fraction is None:
        fraction = 0.0 if args.tokenizer else 0.9
    if not 0.0 <= fraction < 1.0:
        print(f"error: --train-fraction must be in [0, 1), got {fraction}", file=sys.stderr)
        return 2
    reports, tokenizers = [], {}
    try:
        text = read_text(args.text)
        cut = int(len(text) * fraction)
        train_text, heldout = text[:cut], text[cut:]
        for path in args.tokenizer:
            tokenizers[Path(path).name] = tok = load(path)
            reports.append(report(tok, heldout, name=Path(path).name))
        if not args.tokenizer:
            kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
            unknown = [k for k in kinds if k not in KINDS]
            if unknown:
                print(f"error: unknown kinds {unknown}; choose from {KIND_NAMES}", file=sys.stderr)
                return 2
            for kind in kinds:
                t0 = time.perf_counter()
                tok = _train(kind, train_text, args)
                seconds = time.perf_counter() - t0
                if not args.json:
                    print(f"trained {kind} (vocab {tok.vocab_size}) in {seconds:.2f}s")
                if args.save_dir:
                    Path(args.save_dir).mkdir(parents=True, exist_ok=True)
                    tok.save(Path(args.save_dir) / f"{kind}.json")
                tokenizers[kind] = tok
                reports.append(report(tok, heldout, name=kind))
    except TokenizerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.html:
        from .visualize import to_html

        page = to_html(tokenizers, heldout[:2000], title=f"Tokens of {Path(args.text).name}")
        # a failed write leaves any old page whole
        atomic_write(args.html, lambda f: f.write(page.encode("utf-8")))
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=1))
    else:
        print(f"held-out text: {len(heldout.encode('utf-8'))} bytes, {len(heldout)} characters")
        print(format_reports(reports))
        if args.html:
            print(f"tokens page: {args.html}")
    return 0


def add_train_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``tokenizer-train``: train one tokenizer on a file and save it."""
    p = subparsers.add_parser(
        "tokenizer-train",
        help="train a tokenizer on a text file and save it",
        description="Train a tokenizer on a UTF-8 text file and save it to --out.",
    )
    p.add_argument("--text", required=True, help="UTF-8 text file to train on")
    p.add_argument("--kind", choices=KIND_NAMES, default="bpe", help="(default: bpe)")
    p.add_argument("--vocab-size", type=int, default=1024, help="ignored for char (default: 1024)")
    p.add_argument("--special", action="append", default=[], help="special token (repeatable)")
    p.add_argument("--out", required=True, help="tokenizer.json to write (never an existing one)")
    p.add_argument(
        "--overwrite", action="store_true", help="replace --out if it exists (say, a run's)"
    )
    p.set_defaults(func=run_train)
    return p


def run_train(args: argparse.Namespace) -> int:
    """Train and save; returns a process exit code (0 ok, 2 bad input)."""
    if Path(args.out).exists() and not args.overwrite:  # it may be a training run's tokenizer
        print(f"error: --out {args.out} exists; pass --overwrite to replace it", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        tok = _train(args.kind, read_text(args.text), args)
        tok.save(args.out)
    except TokenizerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - t0
    print(f"trained {args.kind} (vocab {tok.vocab_size}) in {seconds:.2f}s -> {args.out}")
    return 0
