"""The PyTorch reference model for the benchmarks: the same architecture as ``gpt.GPT`` with
the default config (learned positions, pre-LayerNorm, GELU MLP, causal self-attention, tied
LM head), written directly in PyTorch eager so both sides do the same arithmetic."""

from __future__ import annotations

import math

import torch
import torch.nn as tnn
import torch.nn.functional as TF


class Block(tnn.Module):
    def __init__(self, d: int, n_head: int, d_ff: int):
        super().__init__()
        self.n_head = n_head
        self.ln1 = tnn.LayerNorm(d)
        self.qkv = tnn.Linear(d, 3 * d)
        self.proj = tnn.Linear(d, d)
        self.ln2 = tnn.LayerNorm(d)
        self.fc = tnn.Linear(d, d_ff)
        self.fc_out = tnn.Linear(d_ff, d)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = TF.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc_out(TF.gelu(self.fc(self.ln2(x))))


class TorchGPT(tnn.Module):
    def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_head: int, d_model: int):
        super().__init__()
        self.wte = tnn.Embedding(vocab_size, d_model)
        self.wpe = tnn.Embedding(block_size, d_model)
        self.blocks = tnn.ModuleList(Block(d_model, n_head, 4 * d_model) for _ in range(n_layer))
        self.ln_f = tnn.LayerNorm(d_model)
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("fc_out.weight"):
                tnn.init.normal_(p, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, tnn.Linear):
            tnn.init.normal_(m.weight, std=0.02)
            tnn.init.zeros_(m.bias)
        elif isinstance(m, tnn.Embedding):
            tnn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets=None):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.T
        loss = None
        if targets is not None:
            loss = TF.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss


def make_optimizer(model: TorchGPT, lr: float, weight_decay: float, betas=(0.9, 0.99)):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=lr,
        betas=betas,
    )
