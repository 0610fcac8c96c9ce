import json

import pytest

import gpt.tokenizers as tk
from gpt.tokenizers.cli import add_report_parser
from gpt.tokenizers.metrics import first_difference, sample_line


def main(argv: list[str]) -> int:
    """``python -m gpt tokenizer-report ARGV``, in this process."""
    import argparse

    parser = argparse.ArgumentParser()
    add_report_parser(parser.add_subparsers())
    args = parser.parse_args(["tokenizer-report", *argv])
    return args.func(args)


def test_first_difference():
    assert first_difference("abc", "abc") is None
    assert first_difference("abc", "abd") == 2
    assert first_difference("abc", "ab") == 2


def test_report_on_a_char_tokenizer_by_hand():
    tok = tk.CharTokenizer.train("abcd", unknown="replace")  # vocab: a b c d <unk>
    r = tk.report(tok, "aab€")
    assert r.n_tokens == 4 and r.n_chars == 4 and r.n_bytes == 6  # € is 3 bytes
    assert r.bytes_per_token == 1.5
    assert r.used_share == 3 / 5  # a, b, <unk>
    assert r.rare_below == 3 and r.rare_share == 3 / 5  # a twice, b and <unk> once
    assert r.unk_rate == 1 / 4
    assert not r.reversible and r.first_difference == 3
    assert "unk" in tk.format_reports([r])


def test_rare_means_seen_fewer_than_rare_below_times():
    tok = tk.CharTokenizer.train("abc")
    r = tk.report(tok, "aaabbc")  # a 3 times, b twice, c once
    assert r.rare_below == 3 and r.rare_share == 2 / 3
    assert tk.report(tok, "aaabbc", rare_below=2).rare_share == 1 / 3
    assert tk.report(tok, "aaabbc", rare_below=4).rare_share == 3 / 3


def test_report_on_empty_text():
    r = tk.report(tk.CharTokenizer.train("abc"), "")
    assert r.n_tokens == r.n_bytes == r.n_chars == 0
    assert r.bytes_per_token == r.chars_per_token == r.used_share == r.unk_rate == 0
    assert r.reversible and r.first_difference is None


def test_sample_line_is_the_first_of_six_words_or_more_cut_at_a_word_end():
    text = "one two three four five\nsix words on this line here\nthe next line has seven words"
    assert sample_line(text) == "six words on this line here"
    assert sample_line("aaaa bbbb cccc dddd eeee ffff", max_chars=12) == "aaaa bbbb"
    assert sample_line("aaaa bbbb cccc dddd eeee ffff", max_chars=15) == "aaaa bbbb cccc"
    # a first word longer than max_chars is cut where it must be
    assert sample_line("x" * 100 + " y z w v u") == "x" * 70


def test_report_bpe_is_reversible(train_text, heldout_text):
    tok = tk.ByteBPE.train(train_text[:50_000], 400)
    r = tk.report(tok, heldout_text[:5000], name="bpe")
    assert r.reversible and r.first_difference is None and r.unk_rate == 0
    assert r.bytes_per_token > 1.5
    table = tk.format_reports([r])
    assert table.splitlines()[2].startswith("bpe")


@pytest.fixture
def text_file(tmp_path, train_text):
    path = tmp_path / "text.txt"
    path.write_text(train_text[:40_000], encoding="utf-8")
    return path


def test_cli_trains_all_kinds_and_reports(text_file, tmp_path, capsys):
    save_dir = tmp_path / "toks"
    args = ["--text", str(text_file), "--vocab-size", "300", "--save-dir", str(save_dir)]
    assert main(args) == 0
    out = capsys.readouterr().out
    for kind in ("char", "bpe", "wordpiece", "unigram"):
        assert f"\n{kind} " in out
        assert (save_dir / f"{kind}.json").exists()
    assert (
        main(["--text", str(text_file), "--tokenizer", str(save_dir / "bpe.json"), "--json"]) == 0
    )
    (row,) = json.loads(capsys.readouterr().out)
    assert row["name"] == "bpe.json" and row["reversible"]


def test_cli_html_page_is_written_atomically(text_file, tmp_path, monkeypatch):
    page = tmp_path / "page.html"
    args = ["--text", str(text_file), "--kinds", "char", "--html", str(page)]
    assert main(args) == 0
    assert "<html" in page.read_text(encoding="utf-8").lower()
    old = page.read_bytes()
    # a page that fails to write half way (a lone surrogate cannot be UTF-8) keeps the old one
    monkeypatch.setattr("gpt.tokenizers.visualize.to_html", lambda *a, **k: "x" * 10_000 + "\ud800")
    with pytest.raises(UnicodeEncodeError):
        main(args)
    assert page.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("page")] == ["page.html"]


def test_cli_bad_input(text_file, tmp_path, capsys):
    assert main(["--text", str(tmp_path / "missing.txt")]) == 2
    assert main(["--text", str(text_file), "--kinds", "bpe,magic"]) == 2
    assert main(["--text", str(text_file), "--tokenizer", str(text_file)]) == 2
    assert main(["--text", str(text_file), "--vocab-size", "10", "--kinds", "bpe"]) == 2
    assert main(["--text", str(text_file), "--train-fraction", "1.5"]) == 2
    err = capsys.readouterr().err
    assert "below the base alphabet" in err and "magic" in err


def test_add_report_parser():
    import argparse

    from gpt.tokenizers.cli import run_report

    parser = argparse.ArgumentParser()
    add_report_parser(parser.add_subparsers())
    args = parser.parse_args(["tokenizer-report", "--text", "x.txt"])
    assert args.func is run_report and args.vocab_size == 1024


def test_tokenizer_train_command(text_file, tmp_path, capsys):
    import argparse

    from gpt.tokenizers.cli import add_train_parser

    parser = argparse.ArgumentParser()
    add_train_parser(parser.add_subparsers())
    out = tmp_path / "tok.json"
    args = parser.parse_args(
        [
            "tokenizer-train",
            "--text",
            str(text_file),
            "--kind",
            "unigram",
            "--vocab-size",
            "300",
            "--out",
            str(out),
        ]
    )
    assert args.func(args) == 0
    tok = tk.load(out)
    assert tok.to_hf_json()["model"]["type"] == "Unigram" and tok.vocab_size == 300
    # every kind is written as a tokenizer.json the library reads alike
    out = tmp_path / "char.json"
    args = parser.parse_args(
        ["tokenizer-train", "--text", str(text_file), "--kind", "char", "--out", str(out)]
    )
    assert args.func(args) == 0
    hf = pytest.importorskip("tokenizers")
    text = text_file.read_text(encoding="utf-8")[:300]
    assert hf.Tokenizer.from_file(str(out)).encode(text).ids == tk.load(out).encode(text)


def test_tokenizer_train_never_replaces_a_file_unless_asked(text_file, tmp_path, capsys):
    """--out may be a training run's tokenizer.json: replacing it would make the run's ids
    mean other text, so an existing file is refused (untouched) without --overwrite."""
    import argparse

    from gpt.tokenizers.cli import add_train_parser

    parser = argparse.ArgumentParser()
    add_train_parser(parser.add_subparsers())
    out = tmp_path / "tokenizer.json"
    out.write_text("the run's own")
    argv = ["tokenizer-train", "--text", str(text_file), "--kind", "char", "--out", str(out)]
    args = parser.parse_args(argv)
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {out} exists" in err and "--overwrite" in err
    assert out.read_text() == "the run's own"
    args = parser.parse_args(argv + ["--overwrite"])
    assert args.func(args) == 0
    assert tk.load(out).vocab_size > 1
