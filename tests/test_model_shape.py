"""A model is its shape: counts against published parameter counts and the standard FLOP formulas, GPT-2's
counts to the bit, the config.json reader's refusals, and mixtures of experts under Data's expert parallelism."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from geosim.inputs.case import Case
from geosim.base.errors import GeosimError
from geosim.inputs.model_config import model_from_config, model_from_config_file
from geosim.inputs.params import default_params
from geosim.predict import predict
from geosim.inputs.scale import make_cluster
from geosim.inputs.scenario import _catalog_doc, catalog_models, get_model
from geosim.inputs.specs import Model, Workload
from geosim.techniques import build_schedule, layout_options

CATALOG = catalog_models()
PUBLISHED = {name: t for name, t in _catalog_doc().items() if "published_params" in t}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_each_shipped_config_has_its_published_parameter_count(name):
    """Within 0.1%, or within half a unit of the published figure's last digit where it is rounded ("10B")."""
    entry, model = PUBLISHED[name], CATALOG[name]
    published = entry["published_params"]
    allowed = max(1e-3 * published, entry.get("published_rounded_to", 0) / 2)
    assert abs(model.num_params - published) <= allowed, (name, model.num_params, published)


def test_the_shipped_configs_are_the_llama_family_asked():
    assert {"llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "mistral-7b",
            "intellect-1", "mixtral-8x7b"} <= set(PUBLISHED)
    i1 = CATALOG["intellect-1"]
    assert (i1.n_layer, i1.n_embd, i1.n_inner, i1.n_head, i1.kv_heads, i1.vocab) == (42, 4096, 14336, 32, 8, 128256)
    assert not i1.tied and i1.mlp == "swiglu" and i1.norm == "rmsnorm" and i1.position == "rope"


def test_gpt2_sizes_are_hugging_faces_counts():
    """GPT-2's checkpoints (Hugging Face's model.num_parameters()): learned positions, biases, a tied head."""
    assert [CATALOG[n].num_params for n in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")] == [
        124_439_808, 354_823_168, 774_030_080, 1_557_611_200]


def test_mixtral_active_parameters_are_published_12_9b():
    m = CATALOG["mixtral-8x7b"]
    assert m.active_params == 12_879_925_248  # attention, 2 of 8 experts and the router per layer, embeddings
    assert abs(m.active_params - 12.9e9) <= 0.05e9  # Mistral AI: "12.9B active parameters"
    assert m.expert_params == 32 * 8 * 3 * 4096 * 14336


# --- GPT-2 to the bit: the study's formulas, written out as they were -------------------------------------

def gpt2_counts(L, h, a, v, n):
    return L * (12 * h * h + 13 * h) + v * h + n * h + 2 * h


gpt2_shapes = st.tuples(st.integers(1, 96), st.integers(1, 64), st.integers(1, 64), st.integers(1, 200_000),
                        st.integers(1, 8192)).map(lambda t: (t[0], t[1] * t[2], t[2], t[3], t[4]))


@settings(max_examples=200, deadline=None)
@given(gpt2_shapes, st.integers(1, 8192), st.floats(0.125, 4096.0), st.integers(1, 4096), st.booleans())
def test_gpt2_shape_counts_are_alpas_formulas_to_the_bit(shape, s, sequences, batch, remat):
    L, h, a, v, n = shape
    m = Model("g", L, h, a, v, n)
    assert m.gpt2_shaped
    assert m.num_params == gpt2_counts(L, h, a, v, n)
    assert m.params_per_layer == 12 * h * h + 13 * h
    tokens = sequences * s
    assert m.layer_forward_flops(tokens, s) == 24.0 * tokens * h * h * (1.0 + s / (6.0 * h))
    f = 96 if remat else 72
    assert m.alpa_flops_per_iteration(batch, s, remat) == (f * batch * s * h * h * L * (1 + s / (6 * h))
                                                           + 6 * batch * s * h * v)
    assert m.attention_share(s) == (8 * h * h + 4 * s * h) / (24 * h * h + 4 * s * h)
    assert m.block_activation_values / h == 16.0 and m.block_gradient_values == 8 * h


def test_narayanans_formula_for_gpt():
    """Narayanan et al. 2021, eq. (3): 72 B s L h^2 (1 + s/6h + V/(12 h L)) FLOPs per iteration."""
    m = CATALOG["megatron-76.1b"]
    B, s, L, h, V = 1792, 2048, m.n_layer, m.n_embd, m.vocab
    assert m.alpa_flops_per_iteration(B, s) == pytest.approx(72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L)),
                                                             rel=1e-12)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "mixtral-8x7b", "tiny-llama"])
def test_flops_per_token_are_6n_plus_attention(name):
    """Kaplan et al. 2020's C = 6N per token over the (active) non-embedding matrices, the head's 6hV and
    attention's score and value products, 12 L S d_attn (fwd + bwd); GQA narrows k and v only."""
    m = CATALOG[name]
    s = 4096
    matrices = sum(m.n_embd * w for w in (m.q_width, m.kv_width, m.kv_width, m.q_width)) * m.n_layer
    mlp = 3 * m.n_embd * m.ffn if not m.moe else 3 * m.n_embd * m.expert_ffn * m.expert_top_k + m.n_embd * m.n_expert
    expected = 6 * (matrices + mlp * m.n_layer) + 6 * m.n_embd * m.vocab + 12 * m.n_layer * s * m.q_width
    assert m.alpa_flops_per_iteration(1, s) / s == pytest.approx(expected, rel=1e-12)
    assert m.alpa_flops_per_iteration(1, s, checkpointing=True) > m.alpa_flops_per_iteration(1, s)


def test_llama_8b_is_close_to_6n():
    m = CATALOG["llama-3.1-8b"]
    per_token = m.alpa_flops_per_iteration(1, 2048) / 2048
    assert 6 * m.num_params * 0.95 < per_token < 6 * m.num_params * 1.15  # attention adds ~8% at S = 2048


# --- config.json -------------------------------------------------------------------------------------

def test_gpt2_and_neox_and_deepseek_configs():
    gpt2 = model_from_config({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257,
                              "n_positions": 1024}, "c", "gpt2")
    assert gpt2.num_params == 124_439_808 and gpt2.gpt2_shaped
    pythia = model_from_config({"model_type": "gpt_neox", "hidden_size": 768, "num_hidden_layers": 12,
                                "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 50304,
                                "max_position_embeddings": 2048, "tie_word_embeddings": False}, "c", "pythia-160m")
    assert pythia.num_params == 162_322_944  # Biderman et al. 2023, Pythia's Table 1 ("total params")
    deepseek = model_from_config({"model_type": "deepseek", "hidden_size": 2048, "num_hidden_layers": 28,
                                  "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 10944,
                                  "moe_intermediate_size": 1408, "n_routed_experts": 64, "num_experts_per_tok": 6,
                                  "n_shared_experts": 2, "first_k_dense_replace": 1, "moe_layer_freq": 1,
                                  "vocab_size": 102400, "max_position_embeddings": 4096}, "c", "deepseek-moe-16b")
    # Dai et al. 2024, DeepSeekMoE: 16.4B total, 2.8B activated
    assert abs(deepseek.num_params - 16.4e9) <= 0.05e9 and abs(deepseek.active_params - 2.8e9) <= 0.05e9
    assert deepseek.moe_layers == 27 and deepseek.n_shared_expert == 2


@pytest.mark.parametrize("doc, key", [
    ({"model_type": "falcon"}, "model_type"),
    ({"hidden_size": 8}, "model_type"),
    ({"model_type": "llama", "hidden_size": 4096}, "num_hidden_layers"),
    ({"model_type": "deepseek", "kv_lora_rank": 512}, "kv_lora_rank"),
    ({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 32,
      "num_key_value_heads": 5, "vocab_size": 10, "max_position_embeddings": 8, "intermediate_size": 8},
     "num_key_value_heads"),
    ({"model_type": "llama", "hidden_size": "4096", "num_hidden_layers": 2}, "hidden_size"),
    ({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "vocab_size": 10, "max_position_embeddings": 8, "intermediate_size": 8, "tie_word_embeddings": "yes"},
     "tie_word_embeddings"),
])
def test_a_config_geosim_cannot_read_is_refused_naming_the_key(doc, key):
    with pytest.raises(GeosimError) as exc:
        model_from_config(doc, "config.json", "x")
    assert exc.value.key == key, exc.value.line()


def test_the_config_file_is_checked_before_it_is_parsed(tmp_path):
    big = tmp_path / "config.json"
    big.write_text(json.dumps({"model_type": "llama", "pad": "x" * (2 << 20)}))
    with pytest.raises(GeosimError, match="larger than"):
        model_from_config_file(big)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(GeosimError, match="not valid JSON"):
        model_from_config_file(bad)
    with pytest.raises(GeosimError, match="no such file"):
        model_from_config_file(tmp_path / "missing.json")


def test_a_scenario_names_a_config(tmp_path):
    from geosim.inputs.scenario import load_scenario

    (tmp_path / "llama.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 2, "intermediate_size": 688, "vocab_size": 1000, "max_position_embeddings": 512}))
    (tmp_path / "s.toml").write_text('[[hosts]]\nname = "a"\nsite = "UTAH"\ngpus = ["A30"]\n'
                                     '[models.mine]\nconfig = "llama.json"\n')
    scenario = load_scenario(str(tmp_path / "s.toml"))
    m = get_model("mine", scenario.models)
    assert (m.name, m.kv_heads, m.ffn, m.mlp, m.tied) == ("mine", 2, 688, "swiglu", False)


# --- a mixture of experts under expert parallelism ------------------------------------------------------

def _case(model, sites=2, hosts=1, gpus=8):
    cluster = make_cluster(sites, hosts, gpus, "H100", intra_host="nvlink")
    workload = Workload(global_batch=64, microbatches=4, seq_len=1024, precision="bf16", epochs=1)
    return Case(cluster, model, workload, default_params())


def test_expert_parallelism_splits_the_experts_and_exchanges_tokens_inside_a_site():
    small = Model("moe", 4, 512, 8, vocab=32000, n_ctx=2048, n_kv_head=2, mlp="swiglu", n_inner=1024,
                  position="rope", norm="rmsnorm", bias="none", tied=False, n_expert=8, expert_top_k=2)
    case = _case(small, sites=2, hosts=1, gpus=8)
    hosts = tuple(h.name for h in case.cluster.hosts)
    options = layout_options("data", case, hosts, expert=8)
    schedule = build_schedule("data", case, options)
    whole = build_schedule("data", case)
    held = small.num_params - small.expert_params * 7 / 8
    assert schedule.memory_parts[0]["weights"] == pytest.approx(2 * held)  # bf16 weights: 1/8 of the experts
    assert whole.memory_parts[0]["weights"] == pytest.approx(2 * small.num_params)
    # two all-to-alls per MoE layer each way, inside one site's 8 GPUs; each GPU's buffer: its tokens x top-k
    ops = [op for op in schedule.programs[0][0].ops if getattr(op, "op", None) is None and hasattr(op, "ops")]
    exchanges = [r for r in ops if r.ops and getattr(r.ops[0], "op", "") == "all_to_all"]
    assert len(exchanges) == 2 and all(r.count == small.moe_layers and len(r.ops) == 2 for r in exchanges)
    a2a = exchanges[0].ops[0]
    assert a2a.group == tuple(range(8)) and a2a.nbytes == 64 / 4 / 16 * 1024 * 512 * 2 * 2
    result = predict(case, "data", options=options)
    assert result.ok and result.iteration_time_s > 0
    # FLOPs and TFLOP/s count the active parameters: top-2 of 8 experts
    assert small.active_params < small.num_params
    with pytest.raises(GeosimError, match="cross a WAN link"):
        layout_options("data", _case(small, sites=2, hosts=1, gpus=4), hosts, expert=8)
    with pytest.raises(GeosimError, match="dense model"):
        layout_options("data", _case(get_model("gpt2m")), hosts, expert=8)


def test_a_diloco_sync_moves_every_expert():
    m = CATALOG["mixtral-8x7b"]
    assert m.num_params == m.active_params + m.moe_layers * (m.n_expert - m.expert_top_k) * 3 * m.n_embd * m.expert_ffn


@pytest.mark.parametrize("name", ["gpt2m", "tiny-llama", "llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b"])
@pytest.mark.parametrize("tensor_parallel", [1, 4])
def test_the_kernels_do_the_counted_flops(name, tensor_parallel):
    """The op-level model's GEMMs of one block (q/k/v of q + 2k columns, SwiGLU's gate and up, an MoE's router
    and experts) are the block's counted forward FLOPs, split over a tensor-parallel group; the backward twice."""
    from geosim.sim.compute import block_backward, block_forward, kernel_flops

    m = get_model(name)
    sequences, s = 4.0, 1024
    counted = m.layer_forward_flops(sequences * s, s) / tensor_parallel
    if m.moe:  # the router is not split: every GPU of the group routes every token
        counted += 2 * sequences * s * m.n_expert * m.n_embd * (1 - 1 / tensor_parallel)
    assert kernel_flops(block_forward(m, sequences, s, "bf16", tensor_parallel)) == pytest.approx(counted, rel=1e-12)
    assert kernel_flops(block_backward(m, sequences, s, "bf16", tensor_parallel)) == pytest.approx(2 * counted,
                                                                                                    rel=1e-12)
    assert m.layer_forward_flops(sequences * s, s) == pytest.approx(m.alpa_flops_per_iteration(1, s) / 3 / m.n_layer
                                                                    * sequences - 2 * sequences * s * m.n_embd
                                                                    * m.vocab / m.n_layer, rel=1e-9)
