"""GPT-2 in Flax, in the style of nanoGPT's model.py: one readable file, and Llama's block beside it.

Sizes come from geosim's model catalog (geosim/data/models.toml), so the model that
is measured here is the model that geosim predicts. The language-model head is tied
to the token embedding, as in GPT-2. A shape that is not GPT-2's (GPTConfig.shape: the
catalog's tiny-llama) runs Llama's block (Touvron et al. 2023, Hugging Face's LlamaModel):
RMSNorm, grouped-query attention with rotary positions (no position table), a SwiGLU MLP,
no biases (q/k/v biases where the shape has them), and its own head where it is untied.

Mixed precision: parameters stay float32 (the optimizer updates them in float32);
matmuls run in `dtype` (bfloat16 or float16 where the device supports it), and the
loss is computed in float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from geosim.inputs.specs import Model

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
    shape: Model | None = None  # a catalog shape other than GPT-2's (Llama's block); None: GPT-2

    @property
    def dtype(self):
        return DTYPES[self.precision]

    @property
    def spec(self) -> Model:
        """The simulator's description of this model: its counts are written once, there."""
        if self.shape is not None:
            return replace(self.shape, name="live", n_layer=self.n_layer, n_embd=self.n_embd, n_head=self.n_head,
                           vocab=self.vocab, n_ctx=self.n_ctx)
        return Model("live", self.n_layer, self.n_embd, self.n_head, self.vocab, self.n_ctx)

    @property
    def llama(self) -> bool:
        return self.shape is not None and not self.shape.gpt2_shaped

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


def rotary(x, theta: float = 10000.0):
    """Rotary position embedding (Su et al. 2021) on x [B, T, heads, d], as Hugging Face's Llama applies it
    (rotate_half: the first half of each head's dimensions paired with the second), in float32."""
    T, d = x.shape[1], x.shape[-1]
    inv = 1.0 / theta ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d)
    angle = jnp.arange(T, dtype=jnp.float32)[:, None] * inv[None, :]
    cos, sin = jnp.cos(angle)[None, :, None, :], jnp.sin(angle)[None, :, None, :]
    x1, x2 = x[..., : d // 2].astype(jnp.float32), x[..., d // 2:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


class GroupedQueryAttention(nn.Module):
    """n_head query heads sharing n_kv_head key/value heads (GQA; 1: MQA), rotary positions, causal."""

    config: GPTConfig

    @nn.compact
    def __call__(self, x):
        cfg, spec = self.config, self.config.spec
        B, T, C = x.shape
        a, kv, d = spec.n_head, spec.kv_heads, int(spec.head_width)
        qkv_bias = spec.bias != "none"
        dense = lambda width, name, bias=qkv_bias, std=0.02: nn.Dense(width, use_bias=bias, dtype=cfg.dtype,
                                                                      kernel_init=_normal(std), name=name)
        q = rotary(dense(a * d, "q_proj")(x).reshape(B, T, a, d))
        k = rotary(dense(kv * d, "k_proj")(x).reshape(B, T, kv, d))
        v = dense(kv * d, "v_proj")(x).reshape(B, T, kv, d)
        k, v = jnp.repeat(k, a // kv, axis=2), jnp.repeat(v, a // kv, axis=2)  # each kv head serves a // kv queries
        q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))
        att = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(d))
        causal = jnp.tril(jnp.ones((T, T), dtype=bool))
        att = jax.nn.softmax(jnp.where(causal, att, -jnp.inf).astype(jnp.float32), axis=-1).astype(cfg.dtype)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, a * d)
        return dense(C, "o_proj", spec.bias in ("all", "attention"), 0.02 / math.sqrt(2 * cfg.n_layer))(y)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)), the intermediate width the shape's (Shazeer 2020)."""

    config: GPTConfig

    @nn.compact
    def __call__(self, x):
        cfg, spec = self.config, self.config.spec
        dense = lambda width, name, std=0.02: nn.Dense(width, use_bias=False, dtype=cfg.dtype,
                                                       kernel_init=_normal(std), name=name)
        hidden = nn.silu(dense(spec.ffn, "gate_proj")(x)) * dense(spec.ffn, "up_proj")(x)
        return dense(cfg.n_embd, "down_proj", 0.02 / math.sqrt(2 * cfg.n_layer))(hidden)


class LlamaBlock(nn.Module):
    config: GPTConfig

    @nn.compact
    def __call__(self, x):
        norm = lambda name: nn.RMSNorm(epsilon=1e-5, dtype=self.config.dtype, name=name)
        x = x + GroupedQueryAttention(self.config, name="attn")(norm("ln_1")(x))
        return x + SwiGLU(self.config, name="mlp")(norm("ln_2")(x))


class GPT(nn.Module):
    """Parameters: wte, wpe, h_0 .. h_{L-1}, ln_f (Llama's: no wpe, lm_head when untied). The pieces are also
    usable one by one (embed, block, head below), which is how the pipeline technique cuts the model into stages."""

    config: GPTConfig

    def setup(self):
        cfg = self.config
        self.wte = nn.Embed(cfg.vocab, cfg.n_embd, embedding_init=_normal(0.02), name="wte")
        if not cfg.llama:
            self.wpe = nn.Embed(cfg.n_ctx, cfg.n_embd, embedding_init=_normal(0.01), name="wpe")
        kind = LlamaBlock if cfg.llama else Block
        block = nn.remat(kind) if cfg.remat else kind  # only each block's input is kept for the backward
        self.h = [block(cfg, name=f"h_{i}") for i in range(cfg.n_layer)]
        self.ln_f = (nn.RMSNorm(epsilon=1e-5, dtype=cfg.dtype, name="ln_f") if cfg.llama
                     else nn.LayerNorm(epsilon=1e-5, dtype=cfg.dtype, name="ln_f"))
        if not cfg.spec.tied:
            self.lm_head = nn.Dense(cfg.vocab, use_bias=False, kernel_init=_normal(0.02), name="lm_head")

    def embed(self, idx):
        if self.config.llama:  # rotary positions live in the attention
            return self.wte(idx).astype(self.config.dtype)
        pos = jnp.arange(idx.shape[1])
        return (self.wte(idx) + self.wpe(pos)[None]).astype(self.config.dtype)

    def head(self, x):
        x = self.ln_f(x).astype(jnp.float32)
        return self.wte.attend(x) if self.config.spec.tied else self.lm_head(x)  # logits in float32

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
    """alpa.util.compute_gpt_tflops' numerator: F*B*S*H^2*L*(1 + S/(6H)) + 6*B*S*H*V (geosim.inputs.specs.Model)."""
    return cfg.spec.alpa_flops_per_iteration(batch, cfg.n_ctx, checkpointing)
