"""python -m gpt: the jobs are listed, bad input ends with a one-line error (exit 2), and a
tiny train → sample round trip works through the checkpoint and tokenizer files."""

import re

import pytest

from gpt.__main__ import main
from gpt.model import GPT

TEXT = "to be, or not to be, that is the question. " * 30


def test_help_lists_the_jobs(capsys):
    """Every command, each on its own line with what it does (prepare was missing from the
    docstring's list)."""
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    jobs = "{train,sample,prepare,report,compare,tokenizer-train,tokenizer-report}"
    assert jobs in out  # the docstring
    listed = {line.split()[0] for line in out.splitlines() if re.match(r"    \S+ +\w", line)}
    assert listed == {
        "train",
        "sample",
        "prepare",
        "report",
        "compare",
        "tokenizer-train",
        "tokenizer-report",
    }


def test_short_text_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "short.txt"
    path.write_text("abc")
    assert main(["train", "--text", str(path), "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "block_size + 1 = 65" in err and "Traceback" not in err


def test_train_then_sample_and_an_unknown_character(tmp_path, capsys):
    path = tmp_path / "t.txt"
    path.write_text(TEXT)
    out = str(tmp_path / "run")
    args = [
        "train",
        "--text",
        str(path),
        "--out-dir",
        out,
        "--max-iters",
        "4",
        "--eval-interval",
        "2",
        "--eval-iters",
        "1",
        "--block-size",
        "16",
        "--n-layer",
        "1",
        "--d-model",
        "16",
        "--n-head",
        "2",
    ]
    assert main(args) == 0
    assert (
        main(
            [
                "sample",
                "--out-dir",
                out,
                "--prompt",
                "to be",
                "--max-new-tokens",
                "5",
                "--seed",
                "0",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("to be")
    assert main(["sample", "--out-dir", out, "--prompt", "Zebra"]) == 2
    assert "Z" in capsys.readouterr().err


SMALL = ["--block-size", "16", "--n-layer", "1", "--d-model", "16", "--n-head", "2"]


def small_run(tmp_path, *extra):
    path = tmp_path / "t.txt"
    path.write_text(TEXT)
    return ["train", "--text", str(path), *SMALL, "--eval-iters", "1", *extra]


def test_train_help_shows_defaults_and_choices(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--max-iters MAX_ITERS optimizer steps in all (default: 2000)" in out
    assert "(default: 0.001)" in out and "--grad-accum-steps" in out
    assert "{relu,gelu,gelu_tanh,silu,elu,glu,reglu,geglu,swiglu}" in out
    assert "{layernorm,rmsnorm,none}" in out and "--config FILE" in out
    assert "--dtype {float32,bfloat16,float16}" in out and "(default: float32)" in out


def test_dtype_flag_reaches_the_run_and_a_bad_one_is_refused(tmp_path, capsys):
    import json

    with pytest.raises(SystemExit) as exit_info:
        main(small_run(tmp_path, "--out-dir", str(tmp_path / "bad"), "--dtype", "float8"))
    assert exit_info.value.code == 2 and "invalid choice: 'float8'" in capsys.readouterr().err
    assert main(small_run(tmp_path, "--out-dir", str(tmp_path / "r"), "--dtype", "float16")) == 0
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert config["train"]["dtype"] == "float16"
    records = [json.loads(line) for line in (tmp_path / "r" / "log.jsonl").read_text().splitlines()]
    assert any("loss_scale" in r for r in records)  # float16 runs with loss scaling


def test_sample_help_describes_every_flag(capsys):
    with pytest.raises(SystemExit):
        main(["sample", "--help"])
    out = capsys.readouterr().out
    options = re.split(r"\n  (?=-)", out.split("options:")[1])
    described = {o.split()[0]: " ".join(o.split()) for o in options if o.strip()}
    for flag in ("--num-samples", "--top-p", "--temperature", "--top-k", "--seed"):
        assert "(default: " in described[flag], described[flag]
    assert "best-validation" in described["--best"]


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--eval-interval", "0", "--eval-interval 0: must be an integer ≥ 1"),
        ("--eval-interval", "-1", "--eval-interval -1: must be an integer ≥ 1"),
        ("--batch-size", "-2", "--batch-size -2: must be an integer ≥ 1"),
        ("--learning-rate", "-1", "--learning-rate -1.0: must be a finite number in (0, ∞)"),
        ("--learning-rate", "nan", "--learning-rate nan: must be a finite number in (0, ∞)"),
        ("--max-iters", "0", "--max-iters 0: must be an integer ≥ 1"),
        ("--max-iters", "-5", "--max-iters -5: must be an integer ≥ 1"),
        ("--eval-iters", "0", "--eval-iters 0: must be an integer ≥ 1"),
        ("--grad-accum-steps", "0", "--grad-accum-steps 0: must be an integer ≥ 1"),
        ("--dropout", "1", "--dropout 1.0: must be a finite number in [0, 1)"),
        ("--beta2", "1", "--beta2 1.0: must be a finite number in [0, 1)"),
        ("--min-lr", "1", "--min-lr 1.0: must be a finite number in [0, 0.001]"),
        # named by its flag (it said "d_model=16 is not divisible by n_head=3", no flag)
        ("--n-head", "3", "--n-head 3: must divide d_model=16 (or set d_head)"),
    ],
)
def test_bad_train_flags_are_one_line_errors(tmp_path, capsys, flag, value, message):
    assert main(small_run(tmp_path, "--out-dir", str(tmp_path / "run"), flag, value)) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: {message}"
    assert not (tmp_path / "run").exists()


def test_out_dir_that_is_a_file_and_cuda_without_a_gpu(tmp_path, capsys):
    import tensorlab as tl

    args = small_run(tmp_path, "--out-dir", str(tmp_path / "t.txt"))
    assert main(args) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    if not tl.backend.cuda_available():
        assert main(small_run(tmp_path, "--out-dir", str(tmp_path / "r"), "--device", "cuda")) == 2
        assert "--device cuda: no CUDA GPU" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--top-p", "1.5", "--top-p 1.5: must be a finite number in (0, 1]"),
        ("--top-k", "0", "--top-k 0: must be an integer ≥ 1"),
        ("--max-new-tokens", "-3", "--max-new-tokens -3: must be an integer ≥ 0"),
        ("--temperature", "nan", "--temperature nan: must be a finite number in [0, ∞)"),
        ("--num-samples", "0", "--num-samples 0: must be an integer ≥ 1"),
    ],
)
def test_bad_sample_flags_are_one_line_errors(tmp_path, capsys, flag, value, message):
    assert main(["sample", "--out-dir", str(tmp_path), flag, value]) == 2
    assert capsys.readouterr().err.strip() == f"error: {message}"


def test_config_file_then_flags(tmp_path, capsys):
    """Precedence: the preset, then the config file, then the flags; the run folder keeps
    the resolved config."""
    import json

    from gpt.__main__ import build_parser, resolve_configs

    cfg = tmp_path / "run.toml"
    cfg.write_text('n_layer = 3\nlearning_rate = 3e-4\nbatch_size = 5\ntokenizer = "char"\n')
    args = build_parser().parse_args(["train", "--config", str(cfg), "--batch-size", "7"])
    model, train = resolve_configs(args)
    assert (model.n_layer, model.d_model) == (3, 128)  # file over the preset's 4; tiny's 128
    assert (train.learning_rate, train.batch_size) == (3e-4, 7)  # the flag over the file

    run = tmp_path / "run"
    cfg.write_text("n_layer = 1\nmax_iters = 2\neval_interval = 1\n")
    assert main([*small_run(tmp_path, "--out-dir", str(run)), "--config", str(cfg)]) == 0
    saved = json.loads((run / "config.json").read_text())
    assert saved["model"]["n_layer"] == 1 and saved["train"]["max_iters"] == 2
    assert '"max_iters": 2' in capsys.readouterr().err  # printed at start


def test_shipped_shakespeare_config_is_nanogpts_gpu_run():
    """configs/shakespeare_char.toml resolves to nanoGPT's config/train_shakespeare_char.py
    (train.py's defaults for the rest: no biases, weight decay 0.1, clipping at 1): the run
    whose best validation loss nanoGPT's README gives as 1.4697. 10.75M parameters, which is
    nanoGPT's printed 10.65M plus the 256 × 384 position table it leaves out of its count."""
    from pathlib import Path

    from gpt.__main__ import build_parser, resolve_configs

    path = Path(__file__).parents[2] / "configs" / "shakespeare_char.toml"
    model, train = resolve_configs(build_parser().parse_args(["train", "--config", str(path)]))
    shape = (model.n_layer, model.n_head, model.d_model, model.block_size, model.d_ff)
    assert shape == (6, 6, 384, 256, 1536)
    assert (model.dropout, model.bias, model.activation, model.tie_weights) == (
        0.2,
        False,
        "gelu",
        True,
    )
    assert (train.batch_size, train.grad_accum_steps, train.max_iters) == (64, 1, 5000)
    assert (train.learning_rate, train.min_lr, train.warmup_iters, train.lr_decay_iters) == (
        1e-3,
        1e-4,
        100,
        5000,
    )
    assert (train.weight_decay, train.beta1, train.beta2, train.grad_clip) == (0.1, 0.9, 0.99, 1.0)
    assert (train.eval_interval, train.eval_iters, train.val_fraction) == (250, 200, 0.1)
    model.vocab_size = 65  # Shakespeare's characters
    total = GPT(model).num_parameters()
    assert round(total / 1e6, 2) == 10.75
    assert round((total - 256 * 384) / 1e6, 2) == 10.65


@pytest.mark.parametrize(
    "content, words",
    [
        ("n_layers = 3\n", ["unknown key 'n_layers'"]),
        ("n_layer = \n", ["not valid TOML"]),
        ("[model]\nn_layer = 3\n", ["unknown key 'model'"]),
        ('d_ff = "wide"\n', ["--d-ff wide: must be an integer ≥ 1"]),
    ],
)
def test_bad_config_files(tmp_path, capsys, content, words):
    cfg = tmp_path / "run.toml"
    cfg.write_text(content)
    assert main(small_run(tmp_path, "--out-dir", str(tmp_path / "r"), "--config", str(cfg))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(w in err for w in words), err


def test_resume_takes_the_runs_config_and_extends_it(tmp_path, capsys):
    run = str(tmp_path / "run")
    assert main(small_run(tmp_path, "--out-dir", run, "--max-iters", "2")) == 0
    capsys.readouterr()
    assert main(["train", "--out-dir", run, "--resume", "--max-iters", "4"]) == 0
    captured = capsys.readouterr()
    assert "resuming from iteration 2" in captured.err
    assert "final: iter 4" in captured.out
    assert main(["train", "--out-dir", run, "--resume", "--n-layer", "2"]) == 2
    assert "n_layer: 1 -> 2" in capsys.readouterr().err
    assert main(["train", "--out-dir", run, "--max-iters", "1"]) == 2
    assert "holds a training run" in capsys.readouterr().err


@pytest.mark.parametrize("content", ['{"n_embd": 16}', "[1, 2]"])
def test_resume_with_a_config_json_that_is_not_a_runs(tmp_path, capsys, content):
    """A run's config.json replaced by another JSON (a Hugging Face config, say) ended
    --resume with a KeyError or TypeError traceback; now one line naming the file."""
    run = str(tmp_path / "run")
    assert main(small_run(tmp_path, "--out-dir", run, "--max-iters", "2")) == 0
    capsys.readouterr()
    (tmp_path / "run" / "config.json").write_text(content)
    assert main(["train", "--out-dir", run, "--resume", "--max-iters", "4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "config.json is not a training run's config" in err, err


def test_ctrl_c_saves_and_exits_130(tmp_path):
    """A real process: SIGINT during training finishes the step, saves, prints one line."""
    import signal
    import subprocess
    import sys
    import time

    run = tmp_path / "run"
    args = small_run(tmp_path, "--out-dir", str(run), "--max-iters", "100000")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpt", *args, "--eval-interval", "100000"],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (run / "config.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("stopped: SIGINT at iteration ") and "--resume" in last
    assert "Traceback" not in err
    from nn.serialization import load_checkpoint

    saved = load_checkpoint(run / "ckpt.safetensors")["iter"]
    assert f"iteration {saved}:" in last


def test_tokenizer_commands_have_plain_help_under_python_m_gpt(capsys):
    for job in ("tokenizer-report", "tokenizer-train", "prepare"):
        with pytest.raises(SystemExit):
            main([job, "--help"])
        out = capsys.readouterr().out
        assert f"usage: python -m gpt {job}" in out
        assert "``" not in out and "gpt.tokenizers.cli" not in out
        assert "(default: " in out


def test_tokenizer_report_writes_the_tokens_page(tmp_path, capsys):
    path = tmp_path / "t.txt"
    path.write_text(TEXT)
    page = tmp_path / "tokens.html"
    args = ["tokenizer-report", "--text", str(path), "--kinds", "char,bpe", "--vocab-size", "260"]
    assert main([*args, "--html", str(page)]) == 0
    html = page.read_text()
    assert "<html" in html.lower() and "char" in html and "bpe" in html
    assert f"tokens page: {page}" in capsys.readouterr().out


def test_grouped_query_and_sliding_window_flags_reach_the_model(tmp_path, capsys):
    import json

    run = tmp_path / "gqa"
    flags = ["--n-head", "4", "--n-kv-head", "2", "--sliding-window", "3", "--out-dir", str(run)]
    assert main(small_run(tmp_path, *flags)) == 0
    model = json.loads((run / "config.json").read_text())["model"]
    assert (model["n_kv_head"], model["sliding_window"]) == (2, 3)
    bad = ["--n-head", "4", "--n-kv-head", "3", "--out-dir", str(tmp_path / "x")]
    assert main(small_run(tmp_path, *bad)) == 2
    assert "error: --n-kv-head 3: must divide n_head=4" in capsys.readouterr().err


# ---------------------------------------------------------------- flags to configs, no training
def test_no_tie_unties_the_unembedding():
    from gpt.__main__ import build_parser, resolve_configs

    model, _ = resolve_configs(build_parser().parse_args(["train", "--no-tie"]))
    assert model.tie_weights is False
    model, _ = resolve_configs(build_parser().parse_args(["train"]))
    assert model.tie_weights is True


def test_a_moved_run_folder_resumes_where_it_is(tmp_path, monkeypatch):
    """A run trained in runs/a and then moved to ./out: its config still names runs/a, but
    `train --resume` continues (and writes) in ./out, the folder it was read from."""
    from gpt.__main__ import build_parser, resolve_configs
    from gpt.config import GPTConfig
    from gpt.run_folder import RunFolder, recorded
    from gpt.train import TrainConfig

    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    saved = recorded(TrainConfig(out_dir="runs/a", max_iters=2))
    RunFolder("out").write_config({"model": GPTConfig().to_dict(), "train": saved})
    _, train = resolve_configs(build_parser().parse_args(["train", "--resume", "--max-iters", "4"]))
    assert train.out_dir == TrainConfig.out_dir == "out"
    assert train.max_iters == 4


def test_sample_reads_the_checkpoint_asked_for(monkeypatch):
    import gpt

    class Stop(Exception):
        pass

    asked = []

    def load(out_dir, which, device):
        asked.append((out_dir, which))
        raise Stop

    monkeypatch.setattr(gpt, "load", load)
    for flags in ([], ["--best"]):
        with pytest.raises(Stop):
            main(["sample", "--out-dir", "r", *flags])
    assert asked == [("r", "ckpt"), ("r", "best")]


def test_sample_and_generate_share_one_default_temperature(capsys):
    """`python -m gpt sample` without --temperature samples as gpt.generate does by default
    (they were 0.8 and 1.0); its help shows that one value."""
    import inspect

    from gpt.__main__ import build_parser
    from gpt.generate import DEFAULT_TEMPERATURE, generate

    args = build_parser().parse_args(["sample"])
    default = inspect.signature(generate).parameters["temperature"].default
    assert args.temperature == default == DEFAULT_TEMPERATURE
    with pytest.raises(SystemExit):
        main(["sample", "--help"])
    options = capsys.readouterr().out.split("options:")[1]
    described = " ".join(options.split("--temperature")[1].split("\n  -")[0].split())
    assert f"(default: {DEFAULT_TEMPERATURE:g})" in described, described


# ---------------------------------------------------------------- refused before any work
@pytest.mark.parametrize(
    "argv, wrong, right",
    [
        (["train", "--max_iters", "3"], "--max_iters", "--max-iters"),
        (["train", "--eval_interval=5"], "--eval_interval", "--eval-interval"),
        (["sample", "--max_new_tokens", "5"], "--max_new_tokens", "--max-new-tokens"),
    ],
)
def test_a_flag_spelled_with_underscores_is_told_its_dashes(capsys, argv, wrong, right):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.startswith(f"usage: python -m gpt {argv[0]}")  # the command's usage
    last = err.strip().splitlines()[-1]
    assert last == (
        f"python -m gpt {argv[0]}: error: {wrong}: flags are spelled with dashes: "
        f"did you mean {right}?"
    )


def test_an_unknown_flag_is_reported_with_the_commands_usage(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--no_such_flag", "--bogus"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("usage: python -m gpt train")
    assert err.strip().endswith("error: unrecognized arguments: --no_such_flag --bogus")


@pytest.mark.parametrize("installed", [False, True])
def test_cuda_without_a_gpu_says_how_to_get_one(tmp_path, capsys, monkeypatch, installed):
    """One line: without CuPy, the pip command of the [cuda] extra; with CuPy but no GPU,
    that no GPU answers. For train (before reading the text) and for sample."""
    import gpt.config
    import tensorlab as tl

    monkeypatch.setattr(tl.backend, "cuda_available", lambda: False)
    monkeypatch.setattr(gpt.config, "_cupy_installed", lambda: installed)
    want = "finds no GPU or no NVIDIA driver" if installed else 'pip install -e ".[cuda]"'
    run = tmp_path / "run"
    for argv in (
        small_run(tmp_path, "--out-dir", str(run), "--device", "cuda"),
        ["sample", "--out-dir", str(run), "--device", "cuda"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: --device cuda: no CUDA GPU")
        assert want in err and "--device cpu" in err
    assert not run.exists()


def test_text_that_is_a_folder_is_named_as_one(tmp_path, capsys):
    for argv in (
        ["train", "--text", str(tmp_path), "--out-dir", str(tmp_path / "run")],
        ["tokenizer-report", "--text", str(tmp_path)],
        ["prepare", "--text", str(tmp_path), "--out", str(tmp_path / "data")],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --text {tmp_path}: is a folder, not a text file")
        assert err.count("\n") == 1
    assert not (tmp_path / "run").exists() and not (tmp_path / "data").exists()


def test_the_attention_estimate_matches_the_measured_peak():
    """With the defaults (batch 12, 4 layers, 4 heads) --block-size 4096 peaked at 11.8 GB
    on a 24 GB machine; 8192 ran out of memory there."""
    from gpt.__main__ import attention_bytes
    from gpt.config import preset

    at = lambda T, **kw: attention_bytes(preset("tiny", block_size=T, **kw), 12)  # noqa: E731
    assert 10e9 < at(4096) < 13e9
    assert at(8192) > 24e9 > at(4096)
    assert at(8192, checkpoint_activations=True) < at(8192) / 2  # one layer's kept at a time
    assert at(8192, sliding_window=256) < 0.7 * at(8192)  # its blocks see fewer keys
    on_gpu = lambda T, **kw: attention_bytes(preset("tiny", block_size=T, **kw), 12, "cuda")  # noqa: E731
    assert on_gpu(8192) == 0  # the flash kernels keep no scores
    assert on_gpu(8192, dropout=0.1) == 12 * 4 * 4 * 8192**2 * 4  # a float32 mask per layer


def test_a_block_size_that_cannot_fit_is_refused_at_once(tmp_path, capsys, monkeypatch):
    """--block-size 8192 trained for two minutes, then ended in a 40-line out-of-memory
    traceback; now one line, before the text is read or the folder made."""
    import gpt.__main__ as cli

    monkeypatch.setattr(cli, "machine_memory", lambda device: 24 * 10**9)
    run = tmp_path / "run"
    assert main(["train", "--block-size", "8192", "--out-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not run.exists()
    assert err.startswith("error: --block-size 8192: attention would need about 45 GB")
    assert "this machine has 24 GB" in err and "--checkpoint-activations" in err
