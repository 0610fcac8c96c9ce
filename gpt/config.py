"""Configurations: one dataclass per architecture and its rules of thumb, and the training
config (:class:`TrainConfig`). (A model's size and cost are counted on the model itself:
``GPT(cfg).num_parameters()``, :func:`gpt.model.flops_per_token`.)

Leave a field as ``None`` and the usual rule fills it in: ``d_head = d_model / n_head``,
``d_ff`` by :func:`nn.activation.default_d_ff` (4 · d_model, or 8/3 · d_model when gated).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import warnings
from dataclasses import dataclass, field

from nn.activation import default_d_ff
from nn.checks import (
    ConfigError,
    bad_value,
    check_bool,
    check_choice,
    check_count,
    check_int,
    check_real,
)
from nn.embedding import check_rope_scaling

GATED = ("glu", "reglu", "geglu", "swiglu")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "elu", *GATED)
POSITIONAL = ("none", "learned", "sinusoidal", "relative", "rope")
NORMS = ("layernorm", "rmsnorm", "none")
ROPE_LAYOUTS = ("interleaved", "half")
PLACEMENTS = ("pre", "post", "sandwich")


class ConfigNote(UserWarning):
    """A configuration is valid but unusual (printed once, when the config is made)."""


# Every config field (the models' and training's here, sampling's in gpt/generate.py) is
# checked by nn/checks.py's functions, as the layers check their arguments: a bad value is one
# error in one form, ``field=value: rule``.


class _Fields:
    """``to_dict``/``from_dict`` for the config dataclasses (a saved run stores its config as
    a dict; an unknown field is refused by name rather than dropped)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"{cls.__name__}: unknown fields {', '.join(unknown)}")
        return cls(**d)

    def _check_layers(self, norms: tuple, positionals: tuple) -> None:
        """The fields both model configs share, and the MLP width's default."""
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("norm", self.norm, norms)
        check_choice("norm_placement", self.norm_placement, PLACEMENTS)
        check_choice("positional", self.positional, positionals)
        check_real("norm_eps", self.norm_eps, 0.0, open_lo=True)
        check_real("dropout", self.dropout, 0.0, 1.0, open_hi=True)
        if self.d_ff is None:
            self.d_ff = default_d_ff(self.d_model, self.activation in GATED)
        check_count(None, d_ff=self.d_ff)


@dataclass
class GPTConfig(_Fields):
    """A decoder-only transformer. Defaults: nanoGPT's small character-level CPU model."""

    vocab_size: int = 65
    block_size: int = 64
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    d_head: int | None = None
    # Key/value heads (grouped-query attention; 1 = multi-query); None: n_head (plain MHA).
    n_kv_head: int | None = None
    d_ff: int | None = None
    activation: str = "gelu"
    norm: str = "layernorm"  # "none": no norm anywhere (toy models for circuits analysis)
    norm_placement: str = "pre"
    norm_eps: float = 1e-5
    parallel: bool = False  # attention and MLP read the same input (GPT-J style)
    attn_only: bool = False  # no MLP sublayers (the circuits papers' toy models)
    positional: str = "learned"
    rope_base: float = 10000.0
    # RoPE's pairs: (x_2i, x_2i+1) "interleaved", or (x_i, x_i+d/2) "half" (HF Llama family).
    rope_layout: str = "interleaved"
    # None, {"rope_type": "linear", "factor": f} or Llama 3.1's {"rope_type": "llama3", ...}
    rope_scaling: dict | None = None
    # Causal attention over the last sliding_window positions only (Mistral); None: all.
    sliding_window: int | None = None
    max_relative_distance: int = 32
    bias: bool = True
    qkv_bias: bool | None = None  # biases on q, k, v only (Qwen2); None: as ``bias``
    dropout: float = 0.0
    tie_weights: bool = True
    final_norm: bool = True
    init_std: float = 0.02
    # Keep only each block's input for backward and recompute the rest there (tl.checkpoint):
    # activation memory of one block instead of all, for about one more forward pass of time.
    checkpoint_activations: bool = False

    def __post_init__(self) -> None:
        check_count(
            None,
            vocab_size=self.vocab_size,
            block_size=self.block_size,
            n_head=self.n_head,
            d_model=self.d_model,
        )
        check_int("n_layer", self.n_layer, 0)
        check_int("max_relative_distance", self.max_relative_distance, 1)
        check_real("rope_base", self.rope_base, 0.0, open_lo=True)
        check_real("init_std", self.init_std, 0.0)
        for name in (
            "parallel",
            "attn_only",
            "bias",
            "tie_weights",
            "final_norm",
            "checkpoint_activations",
        ):
            check_bool(name, getattr(self, name))
        self._check_layers(NORMS, POSITIONAL)
        check_choice("rope_layout", self.rope_layout, ROPE_LAYOUTS)
        if self.rope_scaling is not None:
            try:
                check_rope_scaling(self.rope_scaling)
            except ValueError as e:
                raise ConfigError(str(e), "rope_scaling", self.rope_scaling, str(e)) from None
        if self.qkv_bias is None:
            self.qkv_bias = self.bias
        check_bool("qkv_bias", self.qkv_bias)
        if self.n_kv_head is None:
            self.n_kv_head = self.n_head
        check_int("n_kv_head", self.n_kv_head, 1, self.n_head)
        if self.n_head % self.n_kv_head:
            raise bad_value("n_kv_head", self.n_kv_head, f"must divide n_head={self.n_head}")
        if self.sliding_window is not None:
            check_int("sliding_window", self.sliding_window, 1)
        if self.d_head is None:
            if self.d_model % self.n_head:
                raise bad_value(
                    "n_head", self.n_head, f"must divide d_model={self.d_model} (or set d_head)"
                )
            self.d_head = self.d_model // self.n_head
        check_count(None, d_head=self.d_head)
        if self.positional == "rope" and self.d_head % 2:
            raise ConfigError(
                f"positional='rope' rotates pairs of dimensions, so d_head must "
                f"be even, got {self.d_head}"
            )
        if self.parallel and (self.attn_only or self.norm_placement == "post"):
            raise ConfigError(
                "parallel=True runs attention and MLP side by side on the block's input: it "
                "needs an MLP (attn_only=False) and norm_placement 'pre' or 'sandwich', got "
                f"attn_only={self.attn_only}, norm_placement={self.norm_placement!r}"
            )
        ratio = self.d_model / self.n_layer if self.n_layer else 128
        if not 16 <= ratio <= 1024:  # valid but unusual: a word
            warnings.warn(
                f"d_model / n_layer = {ratio:.0f}: far from the ~128 that works well at small "
                "scale (Kaplan et al. 2020 find loss flat over a wide range of aspect ratios, "
                "degrading outside about 20-200)",
                ConfigNote,
                stacklevel=3,
            )


@dataclass
class Seq2SeqConfig(_Fields):
    """An encoder-decoder transformer (``gpt.seq2seq.Transformer``), by default "Attention is
    all you need"'s (Vaswani et al. 2017) scaled down: post-norm, sinusoidal positions, ReLU,
    dropout 0.1, embeddings scaled by √d_model, the target embedding tied to W_U.
    ``share_embeddings`` ties the source embedding too (equal vocabularies); ``final_norm``
    (None: all but post-norm) adds a norm after each stack; ``label_smoothing`` is the loss's ε.
    ``pad_id`` positions are masked out of attention and of the loss; ``bos_id`` starts every
    decoder input and ``eos_id`` ends every target."""

    src_vocab_size: int = 16
    tgt_vocab_size: int = 16
    max_len: int = 64
    n_encoder_layer: int = 2
    n_decoder_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    d_ff: int | None = None
    activation: str = "relu"
    norm: str = "layernorm"
    norm_placement: str = "post"
    norm_eps: float = 1e-5
    final_norm: bool | None = None
    positional: str = "sinusoidal"
    bias: bool = True
    dropout: float = 0.1
    tie_weights: bool = True
    share_embeddings: bool = False
    scale_embeddings: bool = True
    label_smoothing: float = 0.0
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_count(
            None,
            src_vocab_size=self.src_vocab_size,
            tgt_vocab_size=self.tgt_vocab_size,
            max_len=self.max_len,
            n_head=self.n_head,
            d_model=self.d_model,
            n_encoder_layer=self.n_encoder_layer,
            n_decoder_layer=self.n_decoder_layer,
        )
        self._check_layers(("layernorm", "rmsnorm"), ("sinusoidal", "learned"))
        if self.d_model % self.n_head:
            raise bad_value("n_head", self.n_head, f"must divide d_model={self.d_model}")
        if self.final_norm is None:
            self.final_norm = self.norm_placement != "post"
        check_real("label_smoothing", self.label_smoothing, 0.0, 1.0, open_hi=True)
        for name in ("bias", "tie_weights", "share_embeddings", "scale_embeddings"):
            check_bool(name, getattr(self, name))
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(
                f"share_embeddings needs src_vocab_size == tgt_vocab_size, got "
                f"{self.src_vocab_size} and {self.tgt_vocab_size}"
            )
        for name in ("pad_id", "bos_id", "eos_id"):
            check_int(name, getattr(self, name), 0, self.tgt_vocab_size - 1)
        if self.pad_id >= self.src_vocab_size:
            rule = f"must be a source id too, below src_vocab_size={self.src_vocab_size}"
            raise bad_value("pad_id", self.pad_id, rule)
        if self.eos_id == self.pad_id:  # the loss ignores pad targets: eos would never be taught
            raise bad_value("eos_id", self.eos_id, f"must differ from pad_id={self.pad_id}")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head


@dataclass
class TrainConfig(_Fields):
    """How to train (gpt/train.py; the model's shape lives in GPTConfig). Every field is
    checked when the config is made; a bad value is a :class:`ConfigError` naming it and its
    valid range."""

    text: str | None = None  # path; None = the CPython docs text (gpt.data.default_text)
    data: str | None = None  # a folder made by ``python -m gpt prepare`` (instead of text)
    tokenizer: str = "char"  # char | bpe | wordpiece | unigram | path to a saved tokenizer
    tokenizer_vocab_size: int = 512  # for trained subword tokenizers
    out_dir: str = "out"
    overwrite: bool = False  # replace a run already in out_dir
    resume: bool = False  # continue the run in out_dir from its checkpoint
    max_iters: int = 2000
    eval_interval: int = 250
    eval_iters: int = 200
    log_interval: int = 10
    batch_size: int = 12
    grad_accum_steps: int = 1  # micro-batches of batch_size per optimizer step
    learning_rate: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    lr_decay_iters: int | None = None  # None = max_iters
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # 0 = no clipping
    val_fraction: float = 0.1
    seed: int = 1337
    device: str = "cpu"
    dtype: str = "float32"  # of the matrix products: float32, or bfloat16/float16 (tl.autocast)
    sample_tokens: int = 200
    watch_interval: int = 50  # training-health records (watch.jsonl) every N steps; 0 = off
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("text", "data", "tokenizer", "out_dir"):
            v = getattr(self, name)
            if not (v is None and name in ("text", "data")) and (not isinstance(v, str) or not v):
                raise bad_value(name, v, "must be a non-empty string")
        if self.data is not None and (self.text is not None or self.tokenizer != "char"):
            raise ConfigError(
                f"data={self.data!r}: prepared data brings its own text and tokenizer; "
                "leave out text and tokenizer"
            )
        for name in ("tokenizer_vocab_size", "max_iters", "eval_interval", "eval_iters"):
            check_int(name, getattr(self, name), 1)
        for name in ("log_interval", "batch_size", "grad_accum_steps"):
            check_int(name, getattr(self, name), 1)
        for name in ("warmup_iters", "seed", "sample_tokens", "watch_interval"):
            check_int(name, getattr(self, name), 0)
        check_real("learning_rate", self.learning_rate, 0.0, open_lo=True)
        check_real("min_lr", self.min_lr, 0.0, self.learning_rate)
        if self.lr_decay_iters is not None:
            check_int("lr_decay_iters", self.lr_decay_iters, 1)
        check_real("weight_decay", self.weight_decay, 0.0)
        check_real("beta1", self.beta1, 0.0, 1.0, open_hi=True)
        check_real("beta2", self.beta2, 0.0, 1.0, open_hi=True)
        check_real("grad_clip", self.grad_clip, 0.0)
        check_real("val_fraction", self.val_fraction, 0.0, 1.0, open_lo=True, open_hi=True)
        check_choice("device", self.device, ("cpu", "cuda"))
        check_choice("dtype", self.dtype, DTYPES)
        for name in ("overwrite", "resume", "progress"):
            check_bool(name, getattr(self, name))


DTYPES = ("float32", "bfloat16", "float16")  # TrainConfig.dtype's choices


def _cupy_installed() -> bool:
    return importlib.util.find_spec("cupy") is not None


def check_device(device: str) -> None:
    """``device="cuda"`` needs CuPy and an NVIDIA GPU: without them, say how to get them (the
    Trainer and the command line check it before any work)."""
    import tensorlab as tl

    if device != "cuda" or tl.backend.cuda_available():
        return
    if _cupy_installed():
        rule = (
            "no CUDA GPU here: CuPy is installed but finds no GPU or no NVIDIA driver "
            "(nvidia-smi lists the GPUs a driver sees); use --device cpu"
        )
    else:
        rule = (
            "no CUDA GPU support installed: on a machine with an NVIDIA GPU, "
            'pip install -e ".[cuda]" (CuPy with the CUDA runtime; ".[cuda13]" for a '
            "CUDA 13 driver); or use --device cpu"
        )
    raise bad_value("device", device, rule)


PRESETS: dict[str, dict] = {
    # nanoGPT's CPU configuration for character-level Shakespeare
    "tiny": dict(n_layer=4, n_head=4, d_model=128, block_size=64),
    # nanoGPT's shakespeare-char GPU configuration
    "small-char": dict(n_layer=6, n_head=6, d_model=384, block_size=256),
    # a two-layer attention-only model for induction-head experiments
    "attn-only-2l": dict(
        n_layer=2, n_head=4, d_model=64, block_size=64, attn_only=True, positional="learned"
    ),
    # GPT-2 small's shape (124M parameters with vocab 50257)
    "gpt2-small": dict(
        vocab_size=50257,
        n_layer=12,
        n_head=12,
        d_model=768,
        block_size=1024,
        activation="gelu_tanh",
    ),
}


def preset(name: str, **overrides) -> GPTConfig:
    """A named configuration (``PRESETS``), with any field overridden."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return GPTConfig(**{**PRESETS[name], **overrides})
