"""Live DiLoCo and SparseLoCo (live/techniques/diloco.py, sparseloco.py) on 4 virtual CPU
devices (2 replicas x 2 devices), against provably equal configurations:

1. DiLoCo with plain SGD inside (lr a), H = 1, outer SGD lr 1 without momentum is
   data-parallel SGD (lr a): each replica steps theta - a g_r from the same theta, the outer
   step lands on the replicas' mean, theta - a mean_r(g_r), and mean_r(g_r) is the global
   batch's gradient (equal shards). Losses and parameters equal to float rounding.
2. SparseLoCo with topk = 1 and bits = 32 (everything sent, unquantized; the error buffer
   stays 0) is DiLoCo with the same outer optimizer: here AdamW inside, H = 2, outer Nesterov.
3. Error feedback through the real run: after a sync with outer SGD lr 1, the outer params
   moved by exactly mean_r(sent_r), with sent_r = pseudo-gradient_r + old buffer_r - new
   buffer_r; and sent_r is sparse (<= k values per chunk) and 2-bit (<= 4 levels per chunk).
4. The CLI writes a curve file that geosim.studies.convergence reads, naming the record's run.
The compressor itself (top-k, quantization, payload bytes) is tested in this process.

Multi-device JAX runs in a subprocess (XLA_FLAGS must be set before JAX starts).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from geosim.studies import convergence
from geosim.inputs.records import read_records

FOUR_DEVICES = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}

SCRIPT = r"""
import json, sys, jax, numpy as np, optax
from jax.flatten_util import ravel_pytree
from geosim.live.train import corpus
from geosim.live.train.model import GPTConfig, init_params, optimizer
from geosim.live.train.techniques import Setup, get
from geosim.live.train.techniques.diloco import DiLoCo
from geosim.live.train.techniques.sparseloco import SparseLoCo, kept_per_chunk

assert len(jax.devices()) == 4
cfg = GPTConfig(n_layer=1, n_embd=32, n_head=2, vocab=257, n_ctx=32)
data = corpus.load("generated", cfg.n_ctx, "bytes")
flat = lambda tree: np.asarray(ravel_pytree(jax.device_get(tree))[0])
out = {}

def train(t, steps):
    state = t.init(init_params(cfg, seed=0)); losses = []
    for s in range(steps):
        state, loss = t.step(state, t.place_batch(data.batch(s, 8))); losses.append(float(loss))
    return state, losses

# 1. H=1 DiLoCo (SGD inside, outer lr 1, no momentum) == data-parallel SGD
d = get("data", Setup(cfg, optax.sgd(0.5), 8)); ds, dl = train(d, 3)
a = DiLoCo(Setup(cfg, optax.sgd(0.5), 8), inner_steps=1, outer_lr=1.0, outer_momentum=0.0); as_, al = train(a, 3)
out["one"] = {"data": dl, "diloco": al, "max_param_diff": float(np.abs(flat(ds[0]) - flat(as_[2])).max()),
              "mesh": dict(a.mesh.shape), "replicas": a.replicas}

# 2. SparseLoCo, topk 1, unquantized == DiLoCo (AdamW inside, H=2, outer Nesterov)
kw = dict(inner_steps=2, outer_lr=0.7, outer_momentum=0.9)
b = DiLoCo(Setup(cfg, optimizer(3e-3), 8), **kw); bs, bl = train(b, 4)
c = SparseLoCo(Setup(cfg, optimizer(3e-3), 8), topk_fraction=1.0, bits=32, **kw); cs, cl = train(c, 4)
out["two"] = {"diloco": bl, "sparseloco": cl, "max_param_diff": float(np.abs(flat(bs[2]) - flat(cs[2])).max()),
              "param_scale": float(np.abs(flat(bs[2])).max()), "error_abs_max": float(np.abs(np.asarray(cs[4])).max())}

# 3. error feedback through a real run: 2-bit, top 1/64, outer SGD lr 1 without momentum
t = SparseLoCo(Setup(cfg, optimizer(3e-3), 8), inner_steps=2, topk_fraction=1 / 64, bits=2, outer_lr=1.0, outer_momentum=0.0,
               chunk=1024)
state = t.init(init_params(cfg, seed=0))
checks = []
for s in range(6):
    batch = t.place_batch(data.batch(s, 8))
    if (t.steps_done + 1) % t.inner_steps == 0:  # the next step syncs: what the replicas hold before the outer step
        copy = jax.tree.map(lambda x: x.copy(), (state[0], state[1]))
        replicas, _, _ = t._compiled(*copy, batch)
        outer0, err0 = flat(state[2]), np.asarray(state[4]).reshape(t.replicas, -1)
        state, loss = t.step(state, batch)
        outer1, err1 = flat(state[2]), np.asarray(state[4]).reshape(t.replicas, -1)
        rep = np.stack([flat(jax.tree.map(lambda x: x[r], replicas)) for r in range(t.replicas)])
        size = outer0.size
        pad = err0.shape[1] - size
        delta = np.pad(outer0[None] - rep, ((0, 0), (0, pad)))
        sent = delta + err0 - err1
        k = kept_per_chunk(t.topk, t.chunk)
        chunks = sent.reshape(t.replicas, -1, t.chunk)
        checks.append({
            "outer_moved_by_mean_sent": float(np.abs((outer0 - outer1) - sent.mean(0)[:size]).max()),
            "scale": float(np.abs(sent).max()),
            "max_nonzero_per_chunk": int((chunks != 0).sum(-1).max()), "k": k,
            "max_levels_per_chunk": int(max(len(np.unique(np.abs(c[c != 0]).round(6))) for c in chunks.reshape(-1, t.chunk))),
            "error_norm": float(np.abs(err1).sum()), "delta_norm": float(np.abs(delta).sum())})
    else:
        state, loss = t.step(state, batch)
out["three"] = checks
out["bytes_per_replica"] = t.sync_bytes_per_replica()
out["diloco_bytes_per_replica"] = b.sync_bytes_per_replica()

# 4. the CLI: a curve file convergence.py reads, naming the run
from geosim.cli import main
code = main(["live", "run", "--technique", "diloco", "--steps", "7", "--inner-steps", "3", "--global-batch", "8",
             "--seq-len", "32", "--data", "generated", "--tokenizer", "bytes", "--log-every", "3",
             "--records-out", sys.argv[1], "--loss-curve-out", sys.argv[2], "--loss-curve-window", "3"])
out["cli_code"] = code
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lowcomm")
    runs, curves = tmp / "runs.jsonl", tmp / "curves.jsonl"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(runs), str(curves)], env=FOUR_DEVICES,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), runs, curves


@pytest.mark.slow
def test_h1_diloco_with_sgd_inside_is_data_parallel_sgd(four_devices):
    out = four_devices[0]["one"]
    assert out["mesh"] == {"replica": 2, "data": 2} and out["replicas"] == 2
    assert out["data"][-1] < out["data"][0]  # it learns
    np.testing.assert_allclose(out["diloco"], out["data"], rtol=1e-5)
    assert out["max_param_diff"] < 1e-5


@pytest.mark.slow
def test_sparseloco_sending_everything_is_diloco(four_devices):
    out = four_devices[0]["two"]
    assert out["diloco"][-1] < out["diloco"][0]
    np.testing.assert_allclose(out["sparseloco"], out["diloco"], rtol=1e-5)
    assert out["max_param_diff"] < 1e-5 * max(1.0, out["param_scale"])
    assert out["error_abs_max"] == 0.0  # nothing left unsent


@pytest.mark.slow
def test_error_feedback_keeps_the_unsent_mass(four_devices):
    checks = four_devices[0]["three"]
    assert len(checks) == 3  # syncs at steps 2, 4, 6
    for c in checks:
        # outer SGD lr 1: the outer params moved by the mean of what was sent, where
        # sent = pseudo-gradient + old buffer - new buffer (buffer + sent = pseudo-gradient + old buffer)
        assert c["outer_moved_by_mean_sent"] < 1e-6 * max(1.0, c["scale"]) + 1e-7
        assert 0 < c["max_nonzero_per_chunk"] <= c["k"]  # top-k: at most k values a chunk
        assert c["max_levels_per_chunk"] <= 4  # 2 bits: magnitudes 0.25 and 0.75 x each chunk's scale
        assert c["error_norm"] > 0.5 * c["delta_norm"]  # most of the mass waits in the buffer at 1/64 density


@pytest.mark.slow
def test_sync_bytes(four_devices):
    out = four_devices[0]
    # 2-bit values + uint16 indices + a float32 scale per 1024-value chunk vs fp32 everything
    assert out["bytes_per_replica"] < out["diloco_bytes_per_replica"] / 50


@pytest.mark.slow
def test_cli_writes_a_curve_convergence_reads(four_devices):
    out, runs, curves = four_devices
    assert out["cli_code"] == 0
    (record,) = read_records(runs)
    assert record.technique == "diloco" and "H=3" in record.note
    (doc,) = [json.loads(line) for line in curves.read_text().splitlines()]
    assert doc["run_id"] == record.run_id and doc["options"]["inner_steps"] == 3
    # the synchronized model's losses (steps 0, 3, 6: the first step of each round), trailing means,
    # at the tokens trained on before each
    losses = doc["losses"]
    assert [t for t, _ in doc["loss_curve"]] == [0, 3 * 8 * 32, 6 * 8 * 32]
    assert [v for _, v in doc["loss_curve"]] == pytest.approx(
        [losses[0], np.mean([losses[0], losses[3]]), np.mean([losses[0], losses[3], losses[6]])], abs=1e-5)
    assert convergence.read_loss_curves(curves)["diloco"] == [tuple(p) for p in doc["loss_curve"]]


# ---------------------------------------------------------------- in this process

def test_loss_curve_samples_every_window_steps_with_a_trailing_mean():
    from geosim.live.experiments.token_efficiency import loss_curve, mean_step_time

    losses = [10.0 - i for i in range(10)]  # 10, 9, ..., 1
    assert loss_curve(losses, 100, window=3, smooth=1) == [[0, 10.0], [300, 7.0], [600, 4.0], [900, 1.0]]
    assert loss_curve(losses, 100, window=3, smooth=2) == [[0, 10.0], [300, 8.5], [600, 5.5], [900, 2.5]]
    # mean over whole rounds after the first (compilation) round: sync steps count
    times = [5.0] + [1.0, 1.0, 4.0] * 3
    assert mean_step_time(times[:9], inner_steps=3) == pytest.approx(2.0)



@pytest.mark.slow
def test_compressor_topk_quantization_and_payload_bytes():
    import jax.numpy as jnp

    from geosim.live.train.techniques.sparseloco import compress, decompress, pack, payload_bytes, unpack

    rng = np.random.default_rng(0)
    chunk, size, topk, bits = 4096, 4 * 4096, 1 / 64, 2
    acc = jnp.asarray(rng.normal(size=size).astype(np.float32))
    payload, sent = compress(acc, topk, bits, chunk)
    sent, a = np.asarray(sent), np.asarray(acc)
    k = 64
    for c in range(size // chunk):  # exactly the k largest |acc| of each chunk are sent
        s, x = sent[c * chunk:(c + 1) * chunk], a[c * chunk:(c + 1) * chunk]
        assert set(np.flatnonzero(s)) == set(np.argsort(-np.abs(x))[:k])
        kept = np.flatnonzero(s)
        scale = np.abs(x[kept]).max()
        assert np.all(np.sign(s[kept]) == np.sign(x[kept]))
        assert np.abs(s[kept] - x[kept]).max() <= scale / 4 + 1e-6  # half a 2-bit step (scale / 2)
        assert len(np.unique(np.abs(s[kept]).round(6))) <= 2  # magnitudes 0.25 and 0.75 x scale
    # error feedback: buffer + sent = pseudo-gradient + old buffer
    err_old = rng.normal(size=size).astype(np.float32) * 0.1
    delta = rng.normal(size=size).astype(np.float32)
    _, sent2 = compress(jnp.asarray(delta + err_old), topk, bits, chunk)
    err_new = (delta + err_old) - np.asarray(sent2)
    np.testing.assert_allclose(err_new + np.asarray(sent2), delta + err_old, atol=1e-6)
    # bytes: values exactly topk x bits per value sent; indices 2 bytes each; a scale per chunk
    nbytes = {name: int(np.asarray(part).nbytes) for name, part in zip(("values", "indices", "scales"), payload)}
    assert nbytes["values"] == size * topk * bits / 8 == 64
    assert nbytes == {k_: v for k_, v in payload_bytes(size, topk, bits, chunk).items() if k_ != "total"}
    assert payload_bytes(size, topk, bits, chunk)["total"] == 64 + 256 * 2 + 16
    # decode(payload) is what was counted as sent
    np.testing.assert_array_equal(np.asarray(decompress(payload, topk, bits, chunk, size)), sent)
    for b in (1, 2, 4, 8):
        codes = jnp.asarray(rng.integers(0, 2 ** b, size=(3, 37)).astype(np.uint8))
        np.testing.assert_array_equal(np.asarray(unpack(pack(codes, b), b, 37)), np.asarray(codes))
    # topk 1, 32 bits: everything, exactly
    payload, sent = compress(acc, 1.0, 32, chunk)
    np.testing.assert_array_equal(np.asarray(sent), a)
