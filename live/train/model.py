"""GPT-2 in Flax, in the style of nanoGPT's model.py: one readable file.

Sizes come from geosim's model catalog (geosim/data/models.toml), so the model that
is measured here is the model that geosim predicts. The language-model head is tied
to the token embedding, as in GPT-2.

Mixed precision: parameters stay float32 (the optimizer updates them in float32);
matmuls run in `dtype` (bfloat16 or float16 where the device supports it), and the
loss is computed in float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from geosim.specs import Model

DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}


@dataclass(frozen=True)
class GPTConfig:
    n_layer: int
    n_embd: int
    n_head: int
    vocab: int
    n_ctx: int
    precision: str = "fp32"  # compute dtype: fp32 | bf16 | fp16
    remat: bool = False  # rebuild each block's activations in the backward (activation checkpointing)

    @property
    def dtype(self):
        return DTYPES[self.precision]

    @property
    def spec(self) -> Model:
        """The simulator's description of this model: its counts are written once, there."""
        return Model("live", self.n_layer, self.n_embd, self.n_head, self.vocab, self.n_ctx)

    def num_params(self) -> int:
        return self.spec.num_params


# GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 * n_layer).
def _normal(std):
    return nn.initializers.normal(stddev=std)


class CausalSelfAttention(nn.Module):
    config: GPTConfig

    @nn.compact
    def __call__(self, x):
        cfg = self.config
        B, T, C = x.shape
        qkv = nn.Dense(3 * C, dtype=cfg.dtype, kernel_init=_normal(0.02), name="c_attn")(x)
        q, k, v = jnp.split(qkv, 3, axis=-1)
        # (B, T, C) -> (B, nh, T, hs)
        heads = lambda a: a.reshape(B, T, cfg.n_head, C // cfg.n_head).transpose(0, 2, 1, 3)
        q, k, v = heads(q), heads(k), heads(v)
        att = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(k.shape[-1]))
        causal = jnp.tril(jnp.ones((T, T), dtype=bool))
        # softmax in float32: float16 overflows on long rows
        att = jax.nn.softmax(jnp.where(causal, att, -jnp.inf).astype(jnp.float32), axis=-1).astype(cfg.dtype)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        return nn.Dense(C, dtype=cfg.dtype, kernel_init=_normal(0.02 / math.sqrt(2 * cfg.n_layer)), name="c_proj")(y)


class MLP(nn.Module):
    config: GPTConfig

    @nn.compact
    def __call__(self, x):
        cfg = self.config
        x = nn.Dense(4 * cfg.n_embd, dtype=cfg.dtype, kernel_init=_normal(0.02), name="c_fc")(x)
        x = nn.gelu(x, approximate=True)
        return nn.Dense(cfg.n_embd, dtype=cfg.dtype, kernel_init=_normal(0.02 / math.sqrt(2 * cfg.n_layer)), name="c_proj")(x)


class Block(nn.Module):
    config: GPTConfig

    @nn.compact
    def __call__(self, x):
        x = x + CausalSelfAttention(self.config, name="attn")(nn.LayerNorm(epsilon=1e-5, dtype=self.config.dtype, name="ln_1")(x))
        x = x + MLP(self.config, name="mlp")(nn.LayerNorm(epsilon=1e-5, dtype=self.config.dtype, name="ln_2")(x))
        return x


class GPT(nn.Module):
    """Parameters: wte, wpe, h_0 .. h_{L-1}, ln_f. The pieces are also usable one by one
    (embed, block, head below), which is how the pipeline technique cuts the model into stages."""

    config: GPTConfig

    def setup(self):
        cfg = self.config
        self.wte = nn.Embed(cfg.vocab, cfg.n_embd, embedding_init=_normal(0.02), name="wte")
        self.wpe = nn.Embed(cfg.n_ctx, cfg.n_embd, embedding_init=_normal(0.01), name="wpe")
        block = nn.remat(Block) if cfg.remat else Block  # only each block's input is kept for the backward
        self.h = [block(cfg, name=f"h_{i}") for i in range(cfg.n_layer)]
        self.ln_f = nn.LayerNorm(epsilon=1e-5, dtype=cfg.dtype, name="ln_f")

    def embed(self, idx):
        pos = jnp.arange(idx.shape[1])
        return (self.wte(idx) + self.wpe(pos)[None]).astype(self.config.dtype)

    def head(self, x):
        return self.wte.attend(self.ln_f(x).astype(jnp.float32))  # tied weights; logits in float32

    def __call__(self, idx):
        x = self.embed(idx)
        for block in self.h:
            x = block(x)
        return self.head(x)


def init_params(cfg: GPTConfig, seed: int):
    """Same seed, same parameters, whatever the technique: initialised on the host CPU."""
    dummy = jnp.zeros((1, cfg.n_ctx), jnp.int32)
    with jax.default_device(jax.local_devices(backend="cpu")[0]):
        return jax.jit(GPT(cfg).init)(jax.random.PRNGKey(seed), dummy)["params"]


def cross_entropy(logits, targets):
    return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets).mean()


def loss_fn(cfg: GPTConfig, params, batch):
    """batch: int32 [B, T+1]; the model reads tokens 0..T-1 and predicts 1..T."""
    logits = GPT(cfg).apply({"params": params}, batch[:, :-1])
    return cross_entropy(logits, batch[:, 1:])


# The pieces, for the pipeline technique (they use the same modules as GPT.__call__).
def embed_apply(cfg, params, idx):
    return GPT(cfg).apply({"params": {"wte": params["wte"], "wpe": params["wpe"]}}, idx, method=GPT.embed)


def block_apply(cfg, block_params, x):
    apply = lambda p, h: Block(cfg).apply({"params": p}, h)
    return jax.checkpoint(apply)(block_params, x) if cfg.remat else apply(block_params, x)


def head_loss(cfg, params, x, targets):
    logits = GPT(cfg).apply({"params": {"wte": params["wte"], "ln_f": params["ln_f"]}}, x, method=GPT.head)
    return cross_entropy(logits, targets)


def optimizer(learning_rate: float = 3e-4, weight_decay: float = 0.1):
    """AdamW on every parameter. Adam is elementwise, so the ZeRO-2 technique (which updates
    a flat shard of all parameters) computes exactly the update the others compute; a
    per-parameter decay mask would need a matching flat mask there."""
    return optax.adamw(learning_rate, b1=0.9, b2=0.95, weight_decay=weight_decay)


def alpa_flops_per_iter(cfg: GPTConfig, batch: int, checkpointing: bool = False) -> float:
    """alpa.util.compute_gpt_tflops' numerator: F*B*S*H^2*L*(1 + S/(6H)) + 6*B*S*H*V (geosim.specs.Model)."""
    return cfg.spec.alpa_flops_per_iteration(batch, cfg.n_ctx, checkpointing)
