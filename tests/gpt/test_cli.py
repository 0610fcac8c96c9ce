"""python -m gpt: the jobs are listed, bad input ends with a one-line error (exit 2), and a
tiny train → sample round trip works through the checkpoint and tokenizer files."""

import pytest

from gpt.__main__ import main

TEXT = "to be, or not to be, that is the question. " * 30


def test_help_lists_the_jobs(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for job in ("train", "sample", "tokenizer-train", "tokenizer-report"):
        assert job in out


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
