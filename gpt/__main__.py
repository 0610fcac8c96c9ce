"""The command line, one job a word:
python -m gpt {train,sample,prepare,report,compare,tokenizer-train,tokenizer-report} ...

    python -m gpt train --text input.txt --max-iters 2000 --out-dir out/shakespeare
    python -m gpt train --config run.toml --learning-rate 3e-4   # a config file, overridden
    python -m gpt train --out-dir out/shakespeare --resume --max-iters 4000
    python -m gpt sample --out-dir out/shakespeare --prompt "ROMEO:"

A bad value ends the command with one line, ``error: --flag value: what is allowed``, and exit
code 2; Ctrl-C during training saves a checkpoint and exits with 130. Some values are refused
before any work: ``--device cuda`` without a GPU (how to install GPU support), a ``--text``
that is a folder, and a ``--block-size`` whose attention would not fit in memory.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tomllib
from dataclasses import fields

from gpt.config import ACTIVATIONS, NORMS, PLACEMENTS, POSITIONAL, PRESETS, GPTConfig, check_device

# Training flags: (field of TrainConfig, type, help). The default shown is TrainConfig's.
TRAIN_FLAGS = [
    ("text", str, "UTF-8 text file to train on (none: CPython's own documentation text)"),
    ("data", str, "a folder made by `prepare` (token files, for texts larger than memory)"),
    ("tokenizer", str, "char, bpe, wordpiece, unigram, or a saved tokenizer file"),
    ("tokenizer_vocab_size", int, "vocabulary size of a trained bpe/wordpiece/unigram"),
    ("out_dir", str, "the run's folder: checkpoints, tokenizer, config, log, loss curve"),
    ("max_iters", int, "optimizer steps in all"),
    ("eval_interval", int, "evaluate and save a checkpoint every this many steps"),
    ("eval_iters", int, "batches per split in each evaluation"),
    ("log_interval", int, "print progress every this many steps (off a terminal)"),
    ("batch_size", int, "sequences per micro-batch"),
    ("grad_accum_steps", int, "micro-batches per optimizer step (their gradients add up)"),
    ("learning_rate", float, "peak learning rate (after warmup)"),
    ("min_lr", float, "learning rate at the end of the cosine decay"),
    ("warmup_iters", int, "linear warmup steps"),
    ("lr_decay_iters", int, "steps of cosine decay (default: max_iters)"),
    ("weight_decay", float, "AdamW decoupled weight decay (matrices only)"),
    ("beta1", float, "AdamW β1"),
    ("beta2", float, "AdamW β2"),
    ("grad_clip", float, "clip the global gradient norm to this (0: no clipping)"),
    ("val_fraction", float, "share of the text held out for validation (its end)"),
    ("seed", int, "seed of every random stream (batches, initialisation, dropout)"),
    ("device", str, "cpu or cuda"),
    ("dtype", str, "matrix products in float32, or mixed precision in bfloat16 or float16"),
    ("sample_tokens", int, "tokens of the sample printed at the end"),
    ("watch_interval", int, "record training health in watch.jsonl every this many steps (0: off)"),
]
MODEL_FLAGS = [
    ("n_layer", int, "transformer blocks", None),
    ("n_head", int, "attention heads per block", None),
    ("n_kv_head", int, "key/value heads (grouped-query attention; default: n_head)", None),
    ("d_model", int, "width of the residual stream", None),
    ("block_size", int, "context length in tokens", None),
    ("d_ff", int, "MLP hidden width (default: 4·d_model, 8/3·d_model gated)", None),
    ("dropout", float, "dropout probability", None),
    ("activation", str, "MLP activation", ACTIVATIONS),
    ("norm", str, "normalization", NORMS),
    ("norm_placement", str, "where the norms sit", PLACEMENTS),
    ("positional", str, "position information", POSITIONAL),
    ("sliding_window", int, "attend to the last W positions only (default: all)", None),
]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_train_parser(sub) -> None:
    from gpt.config import DTYPES, TrainConfig

    choices = {"device": ("cpu", "cuda"), "dtype": DTYPES}
    p = sub.add_parser(
        "train",
        help="train a GPT on a text file",
        description="Train a GPT on a text file. Precedence: the preset's model, then "
        "--config's values, then the flags. With --resume the run's saved config is the base.",
    )
    p.add_argument("--config", metavar="FILE", help="a TOML file of field = value lines")
    p.add_argument("--resume", action="store_true", default=None, help="continue the run")
    p.add_argument("--overwrite", action="store_true", default=None, help="replace the run")
    defaults = {f.name: f.default for f in fields(TrainConfig)}
    for name, typ, text in TRAIN_FLAGS:
        help_ = f"{text} (default: {defaults[name]})" if defaults[name] is not None else text
        p.add_argument(_flag(name), type=typ, default=None, choices=choices.get(name), help=help_)
    model = p.add_argument_group("model (defaults: the preset's, then GPTConfig's)")
    model.add_argument(
        "--preset",
        default=None,
        choices=sorted(PRESETS),
        help="starting model shape (default: tiny, nanoGPT's CPU config)",
    )
    gdefaults = {f.name: f.default for f in fields(GPTConfig)}
    for name, typ, text, choices in MODEL_FLAGS:
        shown = PRESETS["tiny"].get(name, gdefaults[name])
        help_ = f"{text} (tiny: {shown})" if shown is not None else text
        model.add_argument(_flag(name), type=typ, default=None, choices=choices, help=help_)
    model.add_argument(
        "--no-tie", action="store_true", default=None, help="separate unembedding W_U"
    )
    model.add_argument(
        "--checkpoint-activations",
        action="store_true",
        default=None,
        help="recompute each block in backward: less memory, about a third more time",
    )
    p.set_defaults(func=_train)


def read_config_file(path: str) -> dict:
    """A TOML file's ``field = value`` pairs (TrainConfig and GPTConfig fields, ``preset``)."""
    from gpt.config import ConfigError, TrainConfig

    try:
        with open(path, "rb") as f:
            values = tomllib.load(f)
    except OSError as err:
        raise ConfigError(f"--config {path}: cannot read it ({err.strerror})") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"--config {path}: not valid TOML ({err})") from err
    known = {f.name for f in fields(TrainConfig)} | {f.name for f in fields(GPTConfig)}
    known |= {"preset"}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(
                f"--config {path}: unknown key {key!r} (keys are the fields of TrainConfig "
                "and GPTConfig, and preset)"
            )
        if isinstance(value, dict):
            raise ConfigError(f"--config {path}: {key} is a table; write plain key = value")
    return values


def resolve_configs(args) -> tuple[GPTConfig, object]:
    """The model and training configs this command asks for (see ``train --help``)."""
    from gpt.config import TrainConfig, preset
    from gpt.run_folder import RunFolder

    given = {k: v for k, v in vars(args).items() if v is not None}
    given.pop("func", None)
    given.pop("command", None)
    from_file = read_config_file(given.pop("config")) if "config" in given else {}
    if given.pop("no_tie", None):
        given["tie_weights"] = False
    wanted = {**from_file, **given}
    train_names = {f.name for f in fields(TrainConfig)}
    train = {k: v for k, v in wanted.items() if k in train_names}
    model = {k: v for k, v in wanted.items() if k not in train_names and k != "preset"}
    run = RunFolder(wanted.get("out_dir", TrainConfig.out_dir))
    if wanted.get("resume") and run.config.exists():
        saved = run.read_config()
        # out_dir is the folder the config was read from, not the one it names: a run folder
        # that was moved or renamed would otherwise resume (and write) at its old place
        skip = ("resume", "overwrite", "out_dir")
        base_train = {k: v for k, v in saved["train"].items() if k not in skip}
        tcfg = TrainConfig.from_dict({**base_train, **train})
        mcfg = GPTConfig.from_dict({**saved["model"], **model})
        return mcfg, tcfg
    return preset(wanted.get("preset", "tiny"), **model), TrainConfig(**train)


def _train(args) -> int:
    from gpt import plots
    from gpt.generate import generate
    from gpt.run_folder import RunError
    from gpt.train import Trainer
    from nn.distributed import world

    dist = world()
    with dist.together():  # in an MPI job a bad flag or file fails on every rank at once
        model_cfg, tcfg = resolve_configs(args)
        check_device(tcfg.device)
        check_text(tcfg.text)
        # each machine holds the batches of its own processes
        sequences = tcfg.batch_size // dist.size * dist.local_size
        check_attention_memory(model_cfg, sequences, tcfg.device)
        trainer = Trainer(model_cfg, tcfg, dist=dist)
    if trainer.dist.rank != 0:  # in an MPI job rank 0 alone prints
        trainer.run()
        return 0
    for name, cfg in (("model", trainer.model_cfg), ("train", tcfg)):  # resolved, one line each
        print(f"{name}: {json.dumps(cfg.to_dict())}", file=sys.stderr)
    n = trainer.model.num_parameters()
    processes = f", {trainer.dist.size} processes" if trainer.dist.size > 1 else ""
    print(
        f"model: {n / 1e6:.2f}M parameters, vocab {trainer.model_cfg.vocab_size} "
        f"({tcfg.tokenizer} tokenizer), {len(trainer.splits['train']):,} training tokens"
        + processes,
        file=sys.stderr,
    )
    history = trainer.run()
    last = history[-1]
    print(
        f"final: iter {last['iter']}, train loss {last['train_loss']:.4f}, "
        f"val loss {last['val_loss']:.4f}"
    )
    folder = trainer.run_folder
    try:  # loss.png is the folder's: drawn under its lock, like every file a run writes
        folder.lock()
    except RunError as err:  # another run took the folder since this one ended
        print(f"loss curve not drawn: {err}", file=sys.stderr)
    else:
        try:
            if plots.available():
                print(f"loss curve: {plots.loss_curve(folder.read_log(), folder.plot)}")
        finally:
            folder.unlock()
    first = [int(trainer.splits["train"][0])]  # the training text's first token, continued
    ids = generate(trainer.model, first, tcfg.sample_tokens, 0.8, top_k=40, seed=tcfg.seed)
    print("sample:\n" + trainer.tokenizer.decode(ids))
    return 0


def _add_sample_parser(sub) -> None:
    from gpt.generate import DEFAULT_TEMPERATURE

    p = sub.add_parser(
        "sample",
        help="sample text from a trained run",
        description="Continue a prompt with a trained run's model (its newest checkpoint).",
    )
    p.add_argument("--out-dir", default="out", help="the run's folder (default: out)")
    p.add_argument("--best", action="store_true", help="use the best-validation checkpoint")
    p.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    p.add_argument("--num-samples", type=int, default=1, help="samples to draw (default: 1)")
    p.add_argument("--max-new-tokens", type=int, default=300, help="per sample (default: 300)")
    p.add_argument(
        "--temperature",
        type=float,
        default=DEFAULT_TEMPERATURE,
        help=f"0 = greedy, 1 = the model's own distribution (default: {DEFAULT_TEMPERATURE:g})",
    )
    p.add_argument("--top-k", type=int, default=None, help="keep the k likeliest (default: all)")
    p.add_argument(
        "--top-p", type=float, default=None, help="nucleus probability in (0, 1] (default: 1)"
    )
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: random)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="(default: cpu)")
    p.set_defaults(func=_sample)


def _sample(args) -> int:
    import numpy as np

    import gpt
    from gpt.config import check_int
    from gpt.generate import check_sampling, generate

    check_int("num_samples", args.num_samples, 1)
    check_sampling(args.temperature, args.top_k, args.top_p, args.max_new_tokens)
    check_device(args.device)
    model, tok = gpt.load(args.out_dir, "best" if args.best else "ckpt", args.device)
    prompt = tok.encode(args.prompt)
    seeds = np.random.SeedSequence(args.seed).spawn(args.num_samples)
    sampling = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    for k, seed in enumerate(seeds):
        seed = int(seed.generate_state(1)[0])
        ids = generate(model, prompt, args.max_new_tokens, **sampling, seed=seed)
        if k:
            print("-" * 40)
        print(tok.decode(ids))
    return 0


def _add_report_parser(sub) -> None:
    p = sub.add_parser(
        "report",
        help="a training run's health as one HTML page",
        description="Draw a run's log.jsonl and watch.jsonl into RUN_DIR/report/report.html "
        "(figures embedded, and saved beside it as PNGs), opening with what looks wrong.",
    )
    p.add_argument("run_dir", help="the run's folder (--out-dir of train)")
    p.add_argument("--out", default=None, help="folder to write (default: RUN_DIR/report)")
    p.set_defaults(func=_report)


def _report(args) -> int:
    from gpt.report import report

    print(report(args.run_dir, args.out))
    return 0


def _add_prepare_parser(sub) -> None:
    p = sub.add_parser(
        "prepare",
        help="tokenize a text once into memory-mapped train/val token files",
        description="Tokenize a UTF-8 text file, a block at a time, into train.bin and "
        "val.bin (uint16 ids when the vocabulary fits) with their tokenizer; then "
        "train --data FOLDER reads batches from them without loading the text.",
    )
    p.add_argument("--text", required=True, help="UTF-8 text file")
    p.add_argument("--out", required=True, help="folder to create")
    p.add_argument(
        "--tokenizer",
        default="char",
        help="char, bpe, wordpiece, unigram, or a saved tokenizer file (default: char)",
    )
    p.add_argument("--tokenizer-vocab-size", type=int, default=512, help="(default: 512)")
    p.add_argument(
        "--tokenizer-sample-chars",
        type=int,
        default=20_000_000,
        help="characters a subword tokenizer is trained on (default: 20000000)",
    )
    p.add_argument("--val-fraction", type=float, default=0.1, help="(default: 0.1)")
    p.set_defaults(func=_prepare)


def _prepare(args) -> int:
    from gpt.token_files import prepare

    meta = prepare(
        args.text,
        args.out,
        args.tokenizer,
        args.tokenizer_vocab_size,
        args.val_fraction,
        args.tokenizer_sample_chars,
        progress=sys.stderr.isatty(),
    )
    print(
        f"{args.out}: {meta['train_tokens']:,} training and {meta['val_tokens']:,} validation "
        f"tokens ({meta['dtype']}), vocabulary {meta['vocab_size']}"
    )
    return 0


# ---------------------------------------------------------------- checks before any work
def check_text(path: str | None) -> None:
    """A ``--text`` that is a folder is named as one (it read "does not exist")."""
    from gpt.config import bad_value

    if path is not None and os.path.isdir(path):
        why = "give one UTF-8 file; a folder made by `prepare` goes to train --data"
        raise bad_value("text", path, f"is a folder, not a text file ({why})")


GB = 1e9


def attention_bytes(model_cfg: GPTConfig, sequences: int, device: str = "cpu") -> int:
    """About the peak memory of a training step's attention, in bytes, for ``sequences``
    sequences at once. On the CPU each layer (one with --checkpoint-activations) keeps its
    float32 pattern for the backward, the part of (T, T) per head and sequence that the query
    blocks cover (nn/attention.py), plus about one more full (T, T) set (measured: the
    backward's temporaries); --block-size 4096 with the defaults peaked at 11.8 GB, this says
    11.3. On a GPU the kernels (nn/flash_attention.cu) keep no scores: only a dropout mask on
    the pattern, (T, T) float32 per head and layer, is that large."""
    from nn.attention import BLOCK_ROWS, query_blocks

    T, window = model_cfg.block_size, model_cfg.sliding_window
    per_entry = sequences * model_cfg.n_head * 4  # float32, every head of every sequence
    layers = 1 if model_cfg.checkpoint_activations else model_cfg.n_layer
    if device == "cuda":
        return per_entry * T * T * layers if model_cfg.dropout else 0
    positions = range(T)
    kept = sum(
        len(positions[rows]) * len(positions[keys])
        for rows, keys in query_blocks(T, T, True, window, BLOCK_ROWS)
    )
    return per_entry * (kept * layers + T * T)


def machine_memory(device: str) -> int | None:
    """The memory of the machine or of the GPU in bytes; None when the system does not say."""
    if device == "cuda":
        import tensorlab as tl

        return int(tl.backend.cupy.cuda.runtime.memGetInfo()[1])
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # (no sysconf on Windows)
        return None


def check_attention_memory(model_cfg: GPTConfig, sequences: int, device: str) -> None:
    """Refuse, before any work, a block size whose attention cannot fit in memory."""
    from gpt.config import bad_value

    need, have = attention_bytes(model_cfg, sequences, device), machine_memory(device)
    if have is None or need <= have:
        return
    T, where = model_cfg.block_size, "this machine" if device == "cpu" else "the GPU"
    layers = "one layer at a time" if model_cfg.checkpoint_activations else "each layer"
    fixes = "lower --block-size or --batch-size"
    if not model_cfg.checkpoint_activations:
        fixes += ", or add --checkpoint-activations (one layer's kept at a time)"
    raise bad_value(
        "block_size",
        T,
        f"attention would need about {need / GB:.0f} GB for its scores ({sequences} "
        f"sequences × {model_cfg.n_head} heads × {T}² positions, kept by {layers} for the "
        f"backward); {where} has {have / GB:.0f} GB; {fixes}",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpt",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_train_parser(sub)
    _add_sample_parser(sub)
    _add_prepare_parser(sub)
    _add_report_parser(sub)
    from gpt.compare import add_parser as add_compare_parser
    from gpt.tokenizers import cli as tok_cli

    tok_cli.add_report_parser(sub)
    tok_cli.add_train_parser(sub)
    add_compare_parser(sub)
    parser.commands = sub.choices  # each command's own parser, by name (see parse_args)
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, with an unknown argument reported by the command's own parser,
    and ``--max_iters`` answered with its dashed spelling, ``--max-iters``."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command = parser.commands[args.command]
        flags = command._option_string_actions  # every spelling of every flag it takes
        for arg in unknown:
            name = arg.split("=", 1)[0]
            dashed = name.replace("_", "-")
            if name.startswith("--") and dashed != name and dashed in flags:
                command.error(f"{name}: flags are spelled with dashes: did you mean {dashed}?")
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _one_line(err: Exception) -> str:
    """The error as the command line says it: a config field named by its flag."""
    from gpt.config import ConfigError

    if isinstance(err, ConfigError) and err.field and err.rule:
        return f"{_flag(err.field)} {err.value}: {err.rule}"
    return str(err)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(build_parser(), argv)
    import traceback

    from gpt.config import ConfigError
    from gpt.data import DataError
    from gpt.hf.checkpoint import HFCheckpointError
    from gpt.run_folder import RunError
    from gpt.tokenizers import TokenizerError
    from gpt.train import Diverged, Interrupted
    from nn.distributed import PeerError, fail, world
    from nn.serialization import SerializationError

    dist = world()

    def error(err: Exception, message: str, code: int) -> int:
        """Print the one line (rank 0) and return the exit code; an error on one rank
        alone ends the whole MPI job instead."""
        if dist.size > 1 and not getattr(err, "agreed", False):
            fail(dist, message, code)
        if dist.rank == 0:
            print(f"error: {message}", file=sys.stderr)
        return code

    try:
        check_text(getattr(args, "text", None))
        return args.func(args)
    except (
        ConfigError,
        DataError,
        RunError,
        TokenizerError,
        SerializationError,
        HFCheckpointError,
    ) as e:
        return error(e, _one_line(e), 2)
    except FileNotFoundError as e:
        return error(e, f"{e.filename}: no such file", 2)
    except PeerError as e:
        return error(e, str(e), 2)
    except Diverged as e:  # the gradients are averaged: every rank sees the same NaN
        e.agreed = True
        return error(e, str(e), 1)
    except Interrupted as e:
        if dist.rank == 0:
            print(f"stopped: {e}", file=sys.stderr)
        return 130
    except Exception:
        if dist.size == 1:
            raise
        traceback.print_exc()
        return error(Exception(), "the traceback above ended the job", 1)


if __name__ == "__main__":
    sys.exit(main())
