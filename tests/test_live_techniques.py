"""The four techniques on 4 virtual CPU devices train the same model to the same losses.

Multi-device JAX runs in a subprocess (XLA_FLAGS must be set before JAX starts, and
tests of other modules must not see 4 devices).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from geosim.inputs.records import read_records

FOUR_DEVICES = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}

SCRIPT = r"""
import json, jax, numpy as np
from jax.flatten_util import ravel_pytree
from geosim.live.train import corpus
from geosim.live.train.model import GPTConfig, init_params, loss_fn, optimizer
from geosim.live.train.techniques import Setup, TECHNIQUES, get

assert len(jax.devices()) == 4
cfg = GPTConfig(n_layer=2, n_embd=64, n_head=4, vocab=257, n_ctx=64)
data = corpus.load("generated", cfg.n_ctx, "bytes")
out = {}
for name in TECHNIQUES:
    t = get(name, Setup(cfg, optimizer(1e-3), global_batch=8, microbatches=2))
    state = t.init(init_params(cfg, seed=0))
    losses = []
    for step in range(4):
        state, loss = t.step(state, t.place_batch(data.batch(step, 8)))
        losses.append(float(loss))
    params = jax.device_get(t.full_params(state))
    shardings = {str(leaf.sharding.spec) for leaf in jax.tree.leaves(state[0])}
    out[name] = {"losses": losses, "params": ravel_pytree(params)[0][::97].tolist(), "specs": sorted(shardings),
                 "mesh": dict(t.mesh.shape)}
# the reference: one device, no parallelism, plain jax.grad on the whole batch
params = init_params(cfg, seed=0); tx = optimizer(1e-3); opt = tx.init(params)
step = jax.jit(lambda p, o, b: (lambda l, g: (l,) + tuple(tx.update(g, o, p)))(*jax.value_and_grad(lambda p: loss_fn(cfg, p, b))(p)))
import optax
ref = []
for s in range(4):
    l, updates, opt = step(params, opt, data.batch(s, 8)); params = optax.apply_updates(params, updates); ref.append(float(l))
out["reference"] = {"losses": ref, "params": ravel_pytree(params)[0][::97].tolist()}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_four_techniques_train_to_the_same_losses():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=FOUR_DEVICES, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    ref = out.pop("reference")
    assert ref["losses"][-1] < ref["losses"][0]  # it learns
    for name, got in out.items():
        np.testing.assert_allclose(got["losses"], ref["losses"], rtol=2e-5, err_msg=name)
        np.testing.assert_allclose(got["params"], ref["params"], rtol=1e-3, atol=2e-5, err_msg=name)
    # ... and the parallelization is real: how each technique laid out its parameters
    assert out["data"]["specs"] == ["P()"] and out["data"]["mesh"] == {"data": 4}
    assert any("'model'" in s for s in out["shard"]["specs"]) and out["shard"]["mesh"] == {"model": 4}
    assert out["pipeshard"]["mesh"] == {"stage": 2, "model": 2}
    assert any("'stage'" in s and "'model'" in s for s in out["pipeshard"]["specs"])
    assert any("'data'" in s for s in out["fsdp"]["specs"]) and out["fsdp"]["mesh"] == {"data": 4}  # sharded


@pytest.mark.slow
def test_each_technique_writes_a_record_calibration_reads(tmp_path):
    runs = tmp_path / "runs.jsonl"
    code = ("import sys; from geosim.cli import main\n"
            "codes = [main(['live', 'run', '--technique', t, '--steps', '5', '--global-batch', '8', '--microbatches', '2',"
            " '--records', sys.argv[1]]) for t in ('data', 'zero2', 'shard', 'pipeshard')]\n"
            "sys.exit(max(codes))")
    proc = subprocess.run([sys.executable, "-c", code, str(runs)], env=FOUR_DEVICES, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step 5/5  loss" in proc.stderr  # progress lines
    records = read_records(runs)  # the schema geosim calibrate fit reads
    assert [r.technique for r in records] == ["data", "zero2", "shard", "pipeshard"]
    for r in records:
        assert r.status == "ok" and r.backend == "jax" and r.collective_impl == "xla-cpu" and r.source == "live"
        assert r.measured["steps"] == 5 and r.measured["time_per_iteration_s"] > 0 and r.measured["tokens_per_s"] > 0
        assert r.measured["tflops_per_gpu"] > 0 and r.measured["compile_time_s"] > 0 and r.measured["peak_memory_gib"] > 0
        assert r.workload == {"global_batch": 8, "microbatches": 2, "seq_len": 64, "tokens_per_epoch": r.workload["tokens_per_epoch"],
                              "precision": "fp32", "runtime": "jax"}  # live runs are on the jax runtime (geosim/inputs/runtime.py)
        assert r.model == "tiny" and r.model_dims["vocab"] == 257  # bytes, not GPT-2's 50257
        assert r.cluster["hosts"][0]["gpus"] == ["CPU"] * 4 and "CPU" in r.cluster["gpus"]
        assert {"jax", "flax", "optax", "geosim"} <= set(r.software)
    losses = {r.note.split("loss ")[1].split(";")[0] for r in records}
    assert len(losses) == 1, losses  # the same first and last loss from every technique


@pytest.mark.parametrize("argv, needle", [
    (["--technique", "shard", "--global-batch", "8", "--gpus-per-host", "3"], "n_embd (64) must be divisible by devices (3)"),
    # a second JAX child (2.2 s of CPU) for the same path: the whole suite runs it, the quick tier the first
    pytest.param(["--technique", "data", "--global-batch", "6", "--gpus-per-host", "4"],
                 "global batch (6) must be divisible by devices x microbatches (4)", marks=pytest.mark.slow),
])
def test_layouts_that_do_not_divide_are_user_errors(argv, needle):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, "-m", "geosim", "live", "run", "--steps", "1", *argv], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and needle in proc.stderr and "Traceback" not in proc.stderr
