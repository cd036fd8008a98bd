"""Llama's block in live: the Flax model's own parameters are the shape's count, a run on CPU devices trains
and writes a record that keeps the shape, and `geosim calibrate check` predicts that record."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from geosim.inputs.scenario import get_model


@pytest.mark.parametrize("change", [{}, {"tied": False}, {"bias": "qkv"}, {"bias": "attention"}, {"n_kv_head": 1}])
def test_the_flax_llama_has_the_shapes_parameter_count(change):
    jax = pytest.importorskip("jax")
    from geosim.live.train.model import GPTConfig, init_params

    spec = replace(get_model("tiny-llama"), **change)
    cfg = GPTConfig(spec.n_layer, spec.n_embd, spec.n_head, 257, spec.n_ctx, shape=spec)
    # the tree init_params builds, traced to its shapes without compiling (a compile each was 2-4 s;
    # the training tests below and in test_live_techniques.py run the real initialisation)
    params = jax.eval_shape(lambda: init_params(cfg, 0))
    assert sum(x.size for x in jax.tree_util.tree_leaves(params)) == cfg.spec.num_params
    assert "wpe" not in params and ("lm_head" in params) == (not spec.tied)
    assert params["h_0"]["attn"]["k_proj"]["kernel"].shape == (64, spec.kv_heads * 16)  # GQA: narrower k and v


def test_live_refuses_a_technique_that_cuts_gpt2_blocks():
    from geosim.base.errors import GeosimError
    from geosim.live.train.loop import Options, run

    with pytest.raises(GeosimError, match="not GPT-2 shaped"):
        run(Options(technique="pipeshard", model="tiny-llama"))


@pytest.mark.slow
def test_tiny_llama_trains_and_its_record_is_checked(tmp_path):
    pytest.importorskip("jax")
    records = tmp_path / "runs.jsonl"
    run = subprocess.run([sys.executable, "-m", "geosim", "live", "run", "--technique", "data", "--model", "tiny-llama",
                          "--steps", "8", "--records-out", str(records)], capture_output=True, text=True, timeout=600,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    record = json.loads(records.read_text().splitlines()[0])
    assert record["status"] == "ok" and record["model"] == "tiny-llama"
    assert record["model_dims"]["mlp"] == "swiglu" and record["model_dims"]["n_kv_head"] == 2
    check = subprocess.run([sys.executable, "-m", "geosim", "calibrate", "check", "--records", str(records), "--json"],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    rows = json.loads(check.stdout)["rows"] if "rows" in json.loads(check.stdout) else json.loads(check.stdout)
    text = json.dumps(rows)
    assert '"predicted_status": "ok"' in text and '"memory_agrees": true' in text
