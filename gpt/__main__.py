"""Command line: ``python -m gpt {train,sample,tokenizer-train,tokenizer-report} ...``."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from gpt.config import PRESETS, GPTConfig, preset


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--preset",
        default="tiny",
        choices=sorted(PRESETS),
        help="starting model shape (default: tiny, nanoGPT's CPU config)",
    )
    for name in ("n_layer", "n_head", "d_model", "block_size", "d_ff"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None)
    p.add_argument("--dropout", type=float, default=None)
    for name in ("activation", "norm", "norm_placement", "positional"):
        p.add_argument("--" + name.replace("_", "-"), default=None)
    p.add_argument("--no-tie", action="store_true", help="separate LM head (untied W_U)")


def _model_config(args) -> GPTConfig:
    overrides = {
        k: getattr(args, k)
        for k in (
            "n_layer",
            "n_head",
            "d_model",
            "block_size",
            "d_ff",
            "dropout",
            "activation",
            "norm",
            "norm_placement",
            "positional",
        )
        if getattr(args, k) is not None
    }
    if args.no_tie:
        overrides["tie_weights"] = False
    return preset(args.preset, **overrides)


def _train(args) -> int:
    from gpt.train import TrainConfig, Trainer, plot_history

    tcfg_fields = {f.name for f in fields(TrainConfig)}
    tcfg = TrainConfig(
        **{k: v for k, v in vars(args).items() if k in tcfg_fields and v is not None}
    )
    trainer = Trainer(_model_config(args), tcfg)
    n = trainer.model.num_parameters()
    print(
        f"model: {n / 1e6:.2f}M parameters, vocab {trainer.model_cfg.vocab_size} "
        f"({tcfg.tokenizer} tokenizer), {len(trainer.splits['train']):,} training tokens",
        file=sys.stderr,
    )
    history = trainer.run()
    if history:
        last = history[-1]
        print(
            f"final: iter {last['iter']}, train loss {last['train_loss']:.4f}, "
            f"val loss {last['val_loss']:.4f}"
        )
    if plot_history(history, trainer.out / "loss.png"):
        print(f"loss curve: {trainer.out / 'loss.png'}")
    print("sample:\n" + trainer.sample())
    return 0


def _sample(args) -> int:
    from pathlib import Path

    import gpt.tokenizers as tk
    from gpt.generate import generate
    from gpt.model import GPT
    from nn.serialization import load_checkpoint

    out = Path(args.out_dir)
    tok = tk.load(out / "tokenizer.json")
    meta = load_checkpoint(out / "ckpt.safetensors", model=None)
    model = GPT(GPTConfig.from_dict(meta["model_config"]))
    load_checkpoint(out / "ckpt.safetensors", model)
    ids = generate(
        model,
        tok.encode(args.prompt),
        args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
    )
    print(tok.decode(ids))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpt", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a GPT on a text file")
    p.add_argument("--text", default=None, help="UTF-8 text file (default: CPython's docs)")
    p.add_argument(
        "--tokenizer",
        default=None,
        help="char (default), bpe, wordpiece, unigram, or a saved tokenizer file",
    )
    p.add_argument("--tokenizer-vocab-size", type=int, default=None)
    p.add_argument("--out-dir", default=None)
    p.add_argument("--max-iters", type=int, default=None)
    p.add_argument("--eval-interval", type=int, default=None)
    p.add_argument("--eval-iters", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--learning-rate", type=float, default=None)
    p.add_argument("--min-lr", type=float, default=None)
    p.add_argument("--warmup-iters", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--device", default=None, help="cpu (default) or cuda")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads that share each batch (default: min(2, cores); 1 = no splitting)",
    )
    p.add_argument("--resume", action="store_true", default=None)
    _add_model_args(p)
    p.set_defaults(func=_train)

    p = sub.add_parser("sample", help="sample text from a trained checkpoint")
    p.add_argument("--out-dir", default="out")
    p.add_argument("--prompt", default="\n")
    p.add_argument("--max-new-tokens", type=int, default=300)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.set_defaults(func=_sample)

    from gpt.tokenizers import cli as tok_cli

    tok_cli.add_report_parser(sub)
    if hasattr(tok_cli, "add_train_parser"):
        tok_cli.add_train_parser(sub)

    args = parser.parse_args(argv)
    from gpt.config import ConfigError
    from gpt.data import DataError
    from gpt.tokenizers import TokenizerError
    from nn.serialization import SerializationError

    try:
        return args.func(args)
    except (ConfigError, DataError, TokenizerError, SerializationError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
