"""A zero-layer transformer is a bigram model.

With no blocks, a GPT's logits for the next token depend only on the current one:
logits = W_E[token] @ W_U (Elhage et al. 2021, "zero-layer transformers"). Without positions,
a final norm or tied weights (positional="none", final_norm=False, tie_weights=False), the
model *is* the table log_softmax(W_E W_U) of rank ≤ d_model, and the best it can do is the
empirical bigram distribution p(next | current) of its training text. Its mean loss then
equals that table's conditional entropy H(next | current), and in general

    loss on the training pairs = H(next | current) + Σ_a p(a) KL(p(·|a) ‖ p_model(·|a)).

The script trains such a model on characters and prints both terms as training goes.

    python examples/zero_layer_bigram.py            # about 3 s on two cores
    python examples/zero_layer_bigram.py --quick    # seconds (used by the tests)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nn  # noqa: E402
import tensorlab as tl  # noqa: E402
from gpt import circuits  # noqa: E402
from gpt.config import GPTConfig  # noqa: E402
from gpt.data import default_text, get_batch  # noqa: E402
from gpt.model import GPT  # noqa: E402
from gpt.tokenizers import CharTokenizer  # noqa: E402

SHAKESPEARE = ROOT / "data" / "tinyshakespeare.txt"


def load_corpus(path: Path | None, chars: int) -> tuple[str, str]:
    """The first ``chars`` characters of ``path`` (default: the repository's
    data/tinyshakespeare.txt if present, else the CPython docs text); returns (text, where it
    came from)."""
    if path is None and SHAKESPEARE.is_file():
        path = SHAKESPEARE
    if path is not None:
        return Path(path).read_text(encoding="utf-8")[:chars], str(path)
    return default_text()[:chars], "gpt.data.default_text()"


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a short run, for tests")
    p.add_argument("--text", type=Path, default=None)
    p.add_argument("--chars", type=int, default=200_000)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--d-model", type=int, default=None, help="default: the vocabulary size")
    p.add_argument("--lr", type=float, default=3e-2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.steps is None:
        args.steps = 150 if args.quick else 1500
    if args.quick:
        args.chars = min(args.chars, 30_000)

    text, source = load_corpus(args.text, args.chars)
    tok = CharTokenizer.train(text)
    ids = np.asarray(tok.encode(text), dtype=np.int64)
    V = tok.vocab_size
    table = circuits.bigram_table(ids, V)
    floor = circuits.conditional_entropy(table)
    print(f"corpus: {len(ids):,} characters of {source}, vocabulary {V}")
    print(f"bigram conditional entropy H(next | current) = {floor:.4f} nats (the loss floor)")
    print(f"unigram entropy H(next) = {_unigram_entropy(ids, V):.4f} nats, log V = {np.log(V):.4f}")

    tl.manual_seed(args.seed)
    cfg = GPTConfig(
        vocab_size=V,
        n_layer=0,
        d_model=args.d_model or V,
        n_head=1,
        block_size=args.block_size,
        positional="none",
        final_norm=False,
        tie_weights=False,
        bias=False,
    )
    model = GPT(cfg)
    opt = nn.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    history = []
    every = max(1, args.steps // 6)
    for step in range(1, args.steps + 1):
        for group in opt.param_groups:
            group["lr"] = nn.optim.cosine_with_warmup(
                step - 1, 0, args.steps, args.lr, args.lr / 20
            )
        x, y = get_batch(ids, args.block_size, args.batch, rng)
        _, loss = model(tl.tensor(x), tl.tensor(y))
        model.zero_grad()
        loss.backward()
        opt.step()
        if step % every == 0 or step == args.steps:
            kl = circuits.bigram_kl(model, table)
            history.append({"iter": step, "train_loss": loss.item(), "kl": kl})
            print(
                f"step {step:>5}  batch loss {loss.item():.4f}  KL(bigram ‖ model) {kl:.4f}  "
                f"H + KL {floor + kl:.4f}  ({time.perf_counter() - t0:.1f} s)",
                flush=True,
            )
    full = _corpus_loss(model, ids)
    kl = circuits.bigram_kl(model, table)
    print(
        f"\nfinal: loss over every training pair {full:.4f} = H {floor:.4f} + KL {kl:.4f} "
        f"(sum {floor + kl:.4f})"
    )
    W = circuits.FactoredMatrix(model.W_E, model.W_U)
    print(
        f"the bigram logit table W_E W_U: {W.shape}, rank ≤ {W.rank_bound}, top singular values "
        + ", ".join(f"{s:.2f}" for s in W.S[:4])
    )
    return {"entropy": floor, "kl": kl, "corpus_loss": full, "history": history, "model": model}


def _unigram_entropy(ids: np.ndarray, V: int) -> float:
    p = np.bincount(ids, minlength=V) / len(ids)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def _corpus_loss(model, ids: np.ndarray) -> float:
    """Mean cross-entropy over every consecutive pair of the corpus (exact for a model that
    sees only the current token: the logits of token a are those after a at position 0)."""
    logp = circuits.model_bigram_logprobs(model)
    return float(-logp[ids[:-1], ids[1:]].mean())


if __name__ == "__main__":
    main()
