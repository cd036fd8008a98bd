"""The model: a decoder-only transformer stated by its shape, as the field states it.

GPT-2 (the study's models), Llama, Qwen2, Mistral, GPT-NeoX and mixtures of experts (Mixtral,
DeepSeek-MoE) differ in a few choices: key/value heads (grouped-query attention, GQA; one for
multi-query, MQA), the MLP (GELU with 4h, or SwiGLU's gate, up and down matrices of its own
intermediate width), position encoding (learned table or RoPE, which has no parameters), the norm
(LayerNorm's weight and bias, RMSNorm's weight), which biases exist (all, only q/k/v as Qwen2, none
as Llama), a tied or untied LM head, and experts. Every count below follows from these fields, each
in one function: parameters (total and active per token), FLOPs per token (matmuls and attention),
and the activation values a block keeps for its backward. The defaults are GPT-2's, so a model
stated with n_layer, n_embd and n_head alone is the GPT-2 shape the study trained, counted to the bit
as before (Alpa's compute_gpt_tflops; tests/test_model_shape.py holds both to it).

geosim/inputs/model_config.py reads a shape from a catalog table, a scenario's [models.NAME] table or a
Hugging Face config.json.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

MLP_KINDS = ("gelu", "swiglu")
POSITIONS = ("learned", "rope")
NORMS = ("layernorm", "rmsnorm")
BIASES = ("all", "attention", "qkv", "none")


@dataclass(frozen=True)
class Model:
    """A decoder's shape. The first six fields are a GPT-2; the rest default to GPT-2's choices."""

    name: str
    n_layer: int
    n_embd: int
    n_head: int
    vocab: int = 50257
    n_ctx: int = 1024
    n_kv_head: int | None = None  # key/value heads: fewer than n_head is GQA, 1 is MQA; None: n_head
    head_dim: int | None = None  # None: n_embd / n_head
    mlp: str = "gelu"  # gelu: up and down matrices | swiglu: gate, up and down
    n_inner: int | None = None  # the MLP's intermediate width; None: 4 n_embd
    position: str = "learned"  # learned: an n_ctx x n_embd table | rope: rotary, no parameters
    norm: str = "layernorm"  # layernorm: weight and bias | rmsnorm: weight
    # which linear layers have biases: all (GPT-2, GPT-NeoX) | attention (q, k, v, o: Llama's attention_bias)
    # | qkv (Qwen2) | none (Llama)
    bias: str = "all"
    tied: bool = True  # the LM head is the token embedding (GPT-2) or a matrix of its own (Llama 3 8B)
    # mixture of experts: each MoE layer's MLP is n_expert experts (SwiGLU or GELU of moe_inner), a token
    # routed to expert_top_k of them, plus n_shared_expert experts every token passes through
    n_expert: int = 0  # 0: a dense model
    expert_top_k: int = 0
    n_shared_expert: int = 0
    moe_inner: int | None = None  # an expert's intermediate width; None: n_inner
    first_dense_layers: int = 0  # leading layers with a dense MLP (DeepSeek-MoE's first_k_dense_replace)
    capacity_factor: float = 0.0  # an expert's buffer: this x its even share of routed tokens; 0: dropless

    def shape_table(self) -> dict:
        """The shape as a table (a run record's model_dims, a scenario's [models.NAME]): the five numbers
        and every other field that is not GPT-2's choice."""
        table = {"n_layer": self.n_layer, "n_embd": self.n_embd, "n_head": self.n_head, "vocab": self.vocab,
                 "n_ctx": self.n_ctx}
        for f in fields(self):
            if f.name not in table and f.name != "name" and getattr(self, f.name) != f.default:
                table[f.name] = getattr(self, f.name)
        return table

    # --- the shape's resolved widths -------------------------------------------------------------

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def head_width(self) -> float:
        return self.head_dim if self.head_dim else self.n_embd / self.n_head

    @property
    def q_width(self) -> int:
        """Width of the queries (and of the attention output): heads x head width."""
        return self.n_head * self.head_dim if self.head_dim else self.n_embd

    @property
    def kv_width(self) -> int:
        """Width of the keys (and of the values)."""
        return self.kv_heads * self.head_dim if self.head_dim else self.n_embd * self.kv_heads // self.n_head

    @property
    def ffn(self) -> int:
        """The dense MLP's intermediate width."""
        return self.n_inner or 4 * self.n_embd

    @property
    def expert_ffn(self) -> int:
        return self.moe_inner or self.ffn

    @property
    def moe(self) -> bool:
        return self.n_expert > 0

    @property
    def moe_layers(self) -> int:
        return self.n_layer - self.first_dense_layers if self.moe else 0

    @property
    def dense_layers(self) -> int:
        return self.n_layer - self.moe_layers

    @property
    def gpt2_shaped(self) -> bool:
        """GPT-2's own choices throughout (what Alpa's formula and the study's kernels describe)."""
        return (self.kv_heads == self.n_head and self.q_width == self.n_embd and self.mlp == "gelu"
                and self.ffn == 4 * self.n_embd and self.position == "learned" and self.norm == "layernorm"
                and self.bias == "all" and self.tied and not self.moe)

    # --- parameters ------------------------------------------------------------------------------

    @property
    def attention_matrix_params(self) -> int:
        h = self.n_embd
        return h * self.q_width + 2 * h * self.kv_width + self.q_width * h  # q, k, v, output

    def mlp_matrix_params(self, inner: int) -> int:
        return (3 if self.mlp == "swiglu" else 2) * self.n_embd * inner

    @property
    def attention_bias_params(self) -> int:
        qkv = self.q_width + 2 * self.kv_width
        return {"all": qkv + self.n_embd, "attention": qkv + self.n_embd, "qkv": qkv, "none": 0}[self.bias]

    def mlp_bias_params(self, inner: int) -> int:
        if self.bias != "all":
            return 0
        return (2 if self.mlp == "swiglu" else 1) * inner + self.n_embd

    @property
    def norm_params(self) -> int:
        """One norm's parameters."""
        return (2 if self.norm == "layernorm" else 1) * self.n_embd

    @property
    def router_params(self) -> int:
        return self.n_embd * self.n_expert

    def _expert(self) -> int:
        inner = self.expert_ffn
        return self.mlp_matrix_params(inner) + self.mlp_bias_params(inner)

    @property
    def expert_params(self) -> int:
        """Every routed expert of the model (what expert parallelism splits)."""
        return self.moe_layers * self.n_expert * self._expert()

    def _dense_layer(self) -> int:
        return (self.attention_matrix_params + self.attention_bias_params + self.mlp_matrix_params(self.ffn)
                + self.mlp_bias_params(self.ffn) + 2 * self.norm_params)

    def _moe_layer(self, experts: int) -> int:
        return (self.attention_matrix_params + self.attention_bias_params + 2 * self.norm_params
                + self.router_params + (experts + self.n_shared_expert) * self._expert())

    @property
    def block_params(self) -> int:
        """Every block's parameters (all experts)."""
        return self.dense_layers * self._dense_layer() + self.moe_layers * self._moe_layer(self.n_expert)

    @property
    def params_per_layer(self) -> int | float:
        """A block's parameters (the mean over blocks where dense and MoE blocks mix)."""
        total = self.block_params
        return total // self.n_layer if total % self.n_layer == 0 else total / self.n_layer

    @property
    def head_params(self) -> int:
        """The LM head's matrix: the embedding's copy on a pipeline's last stage when tied, its own when not."""
        return self.vocab * self.n_embd

    @property
    def embedding_params(self) -> int:
        """Everything outside the blocks: token embedding, learned positions, the final norm, an untied head."""
        positions = self.n_ctx * self.n_embd if self.position == "learned" else 0
        return self.vocab * self.n_embd + positions + self.norm_params + (0 if self.tied else self.head_params)

    @property
    def num_params(self) -> int:
        return self.block_params + self.embedding_params

    @property
    def active_params(self) -> int:
        """The parameters one token passes through: all of a dense model; top-k of the experts of an MoE."""
        if not self.moe:
            return self.num_params
        idle = self.moe_layers * (self.n_expert - self.expert_top_k) * self._expert()
        return self.num_params - idle

    def stage_params(self, layers: float, first: bool, last: bool) -> float:
        """Parameters a pipeline stage of `layers` blocks holds: the embedding with the final norm on the
        first stage (as the study's layout counts it), the head's matrix on the last when it is another stage
        or untied (tied: the embedding's copy)."""
        held = layers * self.params_per_layer + (self.embedding_params - (0 if self.tied else self.head_params)
                                                 if first else 0)
        return held + (self.head_params if last and (not first or not self.tied) else 0)

    # --- the matrices a tensor-parallel group splits ----------------------------------------------

    def _layer_matrices(self, experts: int) -> int | float:
        """A block's weight matrices with `experts` routed experts in each MoE block (the mean over blocks)."""
        total = (self.dense_layers * (self.attention_matrix_params + self.mlp_matrix_params(self.ffn))
                 + self.moe_layers * (self.attention_matrix_params + self.router_params + (
                     experts + self.n_shared_expert) * self.mlp_matrix_params(self.expert_ffn)))
        return total // self.n_layer if total % self.n_layer == 0 else total / self.n_layer

    @property
    def layer_matrix_params(self) -> int | float:
        """A block's weight matrices, every expert: what Megatron's layout splits."""
        return self._layer_matrices(self.n_expert)

    @property
    def active_layer_matrix_params(self) -> int | float:
        """A block's matrices one token passes through (its top-k experts): its FLOPs are twice these."""
        return self._layer_matrices(self.expert_top_k)

    # --- FLOPs --------------------------------------------------------------------------------------

    def _coefficient(self) -> tuple[int | float, float]:
        """(c, r): a block's forward is 2 c tokens h^2 (1 + r), c h^2 its active matrices and r the attention's
        share (scores and values: 4 tokens S q_width). GPT-2: c = 12 and r = S / 6h, Alpa's terms exactly."""
        h2 = self.n_embd * self.n_embd
        matrices = self.active_layer_matrix_params
        c = matrices // h2 if isinstance(matrices, int) and matrices % h2 == 0 else matrices / h2
        return c, matrices

    def attention_ratio(self, seq_len: int) -> float:
        """The attention products' FLOPs over the matrices' (GPT-2: S / 6h, as one correctly rounded division)."""
        return (2 * seq_len * self.q_width) / self._coefficient()[1]

    def layer_forward_flops(self, tokens: float, seq_len: int) -> float:
        """One transformer block, forward: its matrices (2 FLOPs a parameter a token) and attention's score
        and value products (4 S q_width a token). GPT-2: 24 t h^2 (1 + S/6h), a third of Alpa's F=72 term."""
        h = self.n_embd
        c = self._coefficient()[0]
        return 2.0 * c * tokens * h * h * (1.0 + self.attention_ratio(seq_len))

    def attention_share(self, seq_len: int) -> float:
        """Of a block's forward FLOPs, the attention half's (projections and products; the rest the MLP's)."""
        s = seq_len  # GPT-2: Megatron's (8h^2 + 4sh) / (24h^2 + 4sh), the same integers
        attention = 2 * self.attention_matrix_params + 4 * s * self.q_width
        return attention / (2 * self.active_layer_matrix_params + 4 * s * self.q_width)

    def head_forward_flops(self, tokens: float) -> float:
        """The LM head, forward: a third of Alpa's 6*B*S*H*V term."""
        return 2.0 * tokens * self.n_embd * self.vocab

    def alpa_flops_per_iteration(self, batch: int, seq_len: int, checkpointing: bool = False) -> float:
        """Model FLOPs of one iteration (Alpa's compute_gpt_tflops; Narayanan et al. 2021's
        72 B S L h^2 (1 + S/6h + V/12hL)): forward, backward twice the forward, and a recomputed forward
        under checkpointing, over the active parameters (an MoE's top-k experts, no capacity padding)."""
        passes = 4 if checkpointing else 3
        c = self._coefficient()[0]
        f = 2 * passes * c  # 72 (96) for GPT-2: Alpa's integer, so its product is exact as before
        h, s = self.n_embd, seq_len
        return f * batch * s * h * h * self.n_layer * (1 + self.attention_ratio(s)) + 6 * batch * s * h * self.vocab

    # --- activations ----------------------------------------------------------------------------------

    @property
    def routed_tokens(self) -> float:
        """Expert passes per token in an MoE layer, capacity padding included (top-k x the capacity factor)."""
        return self.expert_top_k * max(1.0, self.capacity_factor)

    def _mlp_values(self, inner: int) -> int:
        """Values a token keeps in an MLP: GELU's input and output; SwiGLU's gate, up and their product."""
        return (3 if self.mlp == "swiglu" else 2) * inner

    @property
    def block_activation_values(self) -> float:
        """Values one token keeps in a block for its backward, besides attention's scores (the mean over
        blocks): both norms' inputs and outputs (4h), q, k, v, the attention output, the MLP's (or the
        routed experts' and the router's). GPT-2: 16h."""
        h = self.n_embd
        attention = 4 * h + 2 * self.q_width + 2 * self.kv_width
        dense = attention + self._mlp_values(self.ffn)
        if not self.moe:
            return dense
        moe = (attention + self.n_expert + (self.routed_tokens + self.n_shared_expert)
               * self._mlp_values(self.expert_ffn))
        return (self.dense_layers * dense + self.moe_layers * moe) / self.n_layer

    @property
    def block_gradient_values(self) -> float:
        """The widest gradients a block's backward makes at once per token: the MLP's (GPT-2: 2 x 4h)."""
        width = max(self.ffn if self.dense_layers else 0,
                    (self.routed_tokens + self.n_shared_expert) * self.expert_ffn if self.moe else 0)
        return (3 if self.mlp == "swiglu" else 2) * width
