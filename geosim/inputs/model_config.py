"""A model's shape from where people write it: a catalog or scenario table, or a Hugging Face config.json.

A table (geosim/data/models.toml, a scenario's [models.NAME], a run record's model_dims) names the
shape's fields as geosim.inputs.model_shape.Model has them; a config.json names them as its architecture's
transformers class does. Architectures read (`model_type`): llama, mistral, qwen2 (Llama's block with
q/k/v biases), mixtral (Mistral's block with experts), deepseek (DeepSeek-MoE: shared experts, leading
dense layers), gpt2 and gpt_neox. Anything else is refused in one line naming the key, as is a key
that would change the counts and that geosim does not model (DeepSeek-V2's latent attention, an MoE
layer only every few layers). Every file passes geosim/base/input_limits.py's size and nesting checks first.
"""

from __future__ import annotations

from pathlib import Path

from geosim.base.errors import GeosimError
from geosim.base.input_limits import read_json_file
from geosim.inputs.model_shape import BIASES, MLP_KINDS, NORMS, POSITIONS, Model
from geosim.base.validate import check_number, regular_input

MODEL_RANGES = {"n_layer": (1, 1024), "n_embd": (1, 65536), "n_head": (1, 1024), "vocab": (1, 10_000_000),
                "n_ctx": (1, 1_000_000)}
# the shape's other numbers (Model's fields): a table may leave any of them out (GPT-2's choice)
SHAPE_RANGES = {"n_kv_head": (1, 1024), "head_dim": (1, 65536), "n_inner": (1, 1_048_576), "n_expert": (0, 4096),
                "expert_top_k": (0, 4096), "n_shared_expert": (0, 4096), "moe_inner": (1, 1_048_576),
                "first_dense_layers": (0, 1024)}
SHAPE_CHOICES = {"mlp": MLP_KINDS, "position": POSITIONS, "norm": NORMS, "bias": BIASES}
CAPACITY_RANGE = (0.0, 64.0)
TABLE_KEYS = set(MODEL_RANGES) | set(SHAPE_RANGES) | set(SHAPE_CHOICES) | {"tied", "capacity_factor"}
CONFIG_MAX_BYTES = 1 << 20  # a config.json is 1-3 KB; a file this large is not one

ARCHITECTURES = ("llama", "mistral", "qwen2", "mixtral", "deepseek", "gpt2", "gpt_neox")


def model_from_table(name: str, table: dict, source: str, prefix: str) -> Model:
    """A validated shape from a table of Model's field names (n_layer, n_embd and n_head required)."""
    if not isinstance(table, dict):
        raise GeosimError(f"must be a table, got {type(table).__name__}", source=source, key=prefix.rstrip("."))
    for key in table:
        if key not in TABLE_KEYS:
            raise GeosimError(f"unknown key (expected one of: {', '.join(sorted(TABLE_KEYS))})", source=source,
                              key=prefix + key)
    for key in ("n_embd", "n_head", "n_layer"):
        if key not in table:
            raise GeosimError("missing", source=source, key=prefix + key)
    values: dict = {}
    for key, value in table.items():
        if key in MODEL_RANGES or key in SHAPE_RANGES:
            values[key] = check_number(value, source, prefix + key, *{**MODEL_RANGES, **SHAPE_RANGES}[key],
                                       integer=True)
        elif key in SHAPE_CHOICES:
            if value not in SHAPE_CHOICES[key]:
                raise GeosimError(f"must be one of {', '.join(SHAPE_CHOICES[key])}, got {value!r}", source=source,
                                  key=prefix + key)
            values[key] = value
        elif key == "tied":
            values[key] = _boolean(value, source, prefix + key)
        else:
            values[key] = float(check_number(value, source, prefix + key, *CAPACITY_RANGE))
    return check_shape(Model(name=name, **values), source, prefix)


def check_shape(model: Model, source: str, prefix: str = "") -> Model:
    """The fields agree with each other: heads divide the width (or a head width is given), key/value
    heads divide the query heads, an MoE routes to at most its experts."""
    if model.head_dim is None and model.n_embd % model.n_head:
        raise GeosimError(f"n_embd ({model.n_embd}) must be divisible by n_head ({model.n_head}) unless head_dim "
                          "is given", source=source, key=prefix + "n_head")
    if model.n_head % model.kv_heads:
        raise GeosimError(f"n_head ({model.n_head}) must be a multiple of n_kv_head ({model.kv_heads})", source=source,
                          key=prefix + "n_kv_head")
    if model.moe and not 1 <= model.expert_top_k <= model.n_expert:
        raise GeosimError(f"expert_top_k must be 1 to n_expert ({model.n_expert}), got {model.expert_top_k}",
                          source=source, key=prefix + "expert_top_k")
    if not model.moe and (model.expert_top_k or model.n_shared_expert or model.first_dense_layers):
        raise GeosimError("expert keys without n_expert (a dense model has no experts)", source=source,
                          key=prefix + "n_expert")
    if model.first_dense_layers >= model.n_layer:
        raise GeosimError(f"first_dense_layers must be fewer than n_layer ({model.n_layer})", source=source,
                          key=prefix + "first_dense_layers")
    return model


def _boolean(value, source: str, key: str) -> bool:
    if not isinstance(value, bool):
        raise GeosimError(f"must be true or false, got {value!r}", source=source, key=key)
    return value


# --- Hugging Face config.json ------------------------------------------------------------------

def model_from_config_file(path: str | Path, name: str | None = None, source: str | None = None) -> Model:
    """The shape a config.json describes (regular file, size and nesting checked before it is parsed)."""
    where = source or str(path)
    regular_input(path, where)
    try:
        doc = read_json_file(path, where, CONFIG_MAX_BYTES)
    except UnicodeDecodeError as exc:
        raise GeosimError(f"not UTF-8 text (byte {exc.start})", source=where) from None
    except ValueError as exc:  # json.JSONDecodeError
        raise GeosimError(f"not valid JSON ({exc})", source=where) from None
    return model_from_config(doc, where, name or Path(path).stem)


def model_from_config(doc, source: str, name: str) -> Model:
    """The shape a config.json's document describes (see the module's docstring)."""
    if not isinstance(doc, dict):
        raise GeosimError(f"must be a JSON object, got {type(doc).__name__}", source=source)
    kind = doc.get("model_type")
    if kind is None:
        raise GeosimError(f"missing (geosim reads: {', '.join(ARCHITECTURES)})", source=source, key="model_type")
    if kind not in ARCHITECTURES:
        raise GeosimError(f"unknown architecture {kind!r} (geosim reads: {', '.join(ARCHITECTURES)})", source=source,
                          key="model_type")
    for key in ("kv_lora_rank", "q_lora_rank"):  # DeepSeek-V2/V3: before any other key, the one that says why
        if doc.get(key) is not None:
            raise GeosimError("multi-head latent attention (DeepSeek-V2/V3) is not modelled", source=source, key=key)
    read = _Reader(doc, source)
    if kind == "gpt2":
        h = read.int("n_embd")
        values = dict(n_layer=read.int("n_layer"), n_embd=h, n_head=read.int("n_head"), vocab=read.int("vocab_size"),
                      n_ctx=read.int("n_positions"), n_inner=read.int("n_inner", None),
                      tied=read.bool("tie_word_embeddings", True))
    else:
        values = dict(n_layer=read.int("num_hidden_layers"), n_embd=read.int("hidden_size"),
                      n_head=read.int("num_attention_heads"), vocab=read.int("vocab_size"),
                      n_ctx=read.int("max_position_embeddings"), n_inner=read.int("intermediate_size"),
                      position="rope", tied=read.bool("tie_word_embeddings", False))
    if kind == "gpt_neox":  # LayerNorm, biases everywhere, a GELU MLP of intermediate_size, rotary positions
        values.update(n_kv_head=None, mlp="gelu", norm="layernorm", bias="all")
    elif kind != "gpt2":  # Llama's block: GQA, SwiGLU, RMSNorm
        kv = read.int("num_key_value_heads", values["n_head"])
        bias = "qkv" if kind == "qwen2" else "attention" if read.bool("attention_bias", False) else "none"
        if read.bool("mlp_bias", False):
            raise GeosimError("MLP biases are not modelled (geosim counts Llama's MLP without them)", source=source,
                              key="mlp_bias")
        values.update(n_kv_head=kv, head_dim=read.int("head_dim", None), mlp="swiglu", norm="rmsnorm", bias=bias)
    if kind == "mixtral":
        values.update(n_expert=read.int("num_local_experts"), expert_top_k=read.int("num_experts_per_tok"))
    elif kind == "deepseek":
        if read.int("moe_layer_freq", 1) != 1:
            raise GeosimError("an MoE layer every few layers is not modelled (only every layer after "
                              "first_k_dense_replace)", source=source, key="moe_layer_freq")
        experts = read.int("n_routed_experts", None)
        if experts:
            values.update(n_expert=experts, expert_top_k=read.int("num_experts_per_tok"),
                          n_shared_expert=read.int("n_shared_experts", 0), moe_inner=read.int("moe_intermediate_size"),
                          first_dense_layers=read.int("first_k_dense_replace", 0))
    try:  # the one table check: ranges, choices and the fields' agreement
        return model_from_table(name, {k: v for k, v in values.items() if v is not None}, source, "")
    except GeosimError as exc:  # name the config's key, not geosim's field
        keys = {} if kind == "gpt2" else _CONFIG_KEY  # GPT-2's config names the fields as geosim does
        raise GeosimError(exc.problem, source=source, key=keys.get(exc.key or "", exc.key)) from None


_CONFIG_KEY = {"n_layer": "num_hidden_layers", "n_embd": "hidden_size", "n_head": "num_attention_heads",
               "n_kv_head": "num_key_value_heads", "vocab": "vocab_size", "n_ctx": "max_position_embeddings",
               "n_inner": "intermediate_size", "n_expert": "num_local_experts / n_routed_experts",
               "expert_top_k": "num_experts_per_tok", "first_dense_layers": "first_k_dense_replace",
               "moe_inner": "moe_intermediate_size", "n_shared_expert": "n_shared_experts"}


class _Reader:
    """A config's values, each checked where it is read: a whole number in geosim's range, a boolean."""

    def __init__(self, doc: dict, source: str):
        self.doc, self.source = doc, source

    def int(self, key: str, default=...):
        value = self.doc.get(key)
        if value is None:
            if default is ...:
                raise GeosimError("missing", source=self.source, key=key)
            return default
        return check_number(value, self.source, key, 0, 10_000_000, integer=True)

    def bool(self, key: str, default: bool) -> bool:
        value = self.doc.get(key)
        return default if value is None else _boolean(value, self.source, key)

