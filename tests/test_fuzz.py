"""Fuzz every input edge: scenario files, parameters files, run records and Alpa's results.

Each example mutates a valid input (structure: delete a key, change a value's type, nest it,
duplicate an entry, add a key; numbers: 0, -1, NaN, inf, 1e308, 1e-300, huge integers; text:
truncation, bytes that are not UTF-8), feeds it to the loader a user's command would use, and,
when the loader accepts it, predicts with it. The only allowed outcomes are a GeosimError (one
line, exit 2) or a prediction whose every figure is finite; anything else fails the example.

Examples are cheap: a small model and a short workload, one technique drawn per example.
HYPOTHESIS_PROFILE=ci (set by .ci/run) runs 2,000 scenario examples (1,200 structural, 800
numeric) and 500 of each other target with a fixed seed; the default profile runs 300 in all. The figures of a run are printed with `-s`.
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections import Counter

import pytest
import tomli_w
from conftest import fuzz_examples
from hypothesis import given, settings
from hypothesis import strategies as st

from geosim.calibrate.cases import read_runs, to_case
from geosim.calibrate.importers import alpa_benchmark_records
from geosim.inputs.case import Case
from geosim.base.errors import GeosimError
from geosim.inputs.params import load_params
from geosim.inputs.records import validate
from geosim.inputs.scenario import load_scenario
from geosim.predict import predict
from geosim.inputs.specs import Model, Workload

TINY = Model("fuzz-tiny", n_layer=2, n_embd=64, n_head=2, vocab=1000, n_ctx=128)
SHORT = Workload(tokens_per_epoch=8 * 128 * 3, seq_len=128, global_batch=8, microbatches=2, epochs=1)
TECHNIQUES = ("data", "zero2", "shard", "pipeshard", "diloco", "sparseloco", "hybrid")
# the low-communication techniques simulate a whole outer round (100 inner steps by default): two keep it cheap
CHEAP_OPTIONS = {"diloco": {"inner_steps": 2}, "sparseloco": {"inner_steps": 2}, "hybrid": {"inner_steps": 2}}
FIGURES = ("total_time_s", "time_per_epoch_s", "iteration_time_s", "first_iteration_s", "startup_s",
           "tflops_per_gpu", "tokens_per_s", "peak_memory_gib", "bytes_per_iteration")

OUTCOMES: dict[str, Counter] = {}
STARTED: dict[str, float] = {}
ENDED: dict[str, float] = {}


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    for target, counts in OUTCOMES.items():
        print(f"\nfuzz {target}: {sum(counts.values())} examples, {dict(counts)}, "
              f"{ENDED[target] - STARTED[target]:.1f} s")


def tally(target: str, outcome: str) -> None:
    STARTED.setdefault(target, time.perf_counter())
    OUTCOMES.setdefault(target, Counter())[outcome] += 1
    ENDED[target] = time.perf_counter()


def check_prediction(pred) -> str:
    if pred.ok:
        for name in FIGURES:
            value = getattr(pred, name)
            assert value is None or math.isfinite(value), f"{pred.technique}: {name} = {value!r}"
        json.dumps(pred.to_dict(), allow_nan=False, default=str)
        return "finite prediction"
    return f"prediction {pred.status}"


def cheap_workload(workload: Workload) -> Workload:
    """The scenario's workload when it is cheap to simulate, else the short one."""
    if workload.microbatches <= 8 and workload.seq_len <= 2048 and workload.global_batch <= 4096:
        return workload
    return SHORT


def cheap_model(scenario) -> Model:
    small = [m for m in scenario.models.values() if m.n_layer <= 8 and m.n_embd <= 1024]
    return small[0] if small else TINY


# --- mutations ------------------------------------------------------------------------------

ODD_NUMBERS = (0, -1, -0.0, 0.5, 1, 2, 3, 7, 1e-300, 5e-324, 1e308, -1e308, float("nan"), float("inf"),
               float("-inf"), 2**63, 10**30, 10**400, -(10**400), 1e6, 1e-6, 4096, 4097)  # 10**400: beyond float range
LEAF = st.one_of(
    st.sampled_from(ODD_NUMBERS),
    st.integers(-10, 10**7),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["", "vm1", "vm2", "A", "B", "T4", "A30", "data", "ring", "fp16", "x" * 300]),
    st.booleans(),
)
ANY = st.recursive(LEAF, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                 st.dictionaries(st.sampled_from(["a", "name", "gpus", "x"]), inner,
                                                                 max_size=2)),
                   max_leaves=6)
KEYS = ("name", "site", "gpus", "between", "rtt_ms", "bandwidth_gbps", "window_mib", "streams", "step_rtts",
        "hosts", "links", "workload", "models", "n_layer", "microbatches", "global_batch", "memory_gib", "zzz")


def paths(node, prefix=()):
    """Every (container path, key) in a document, and every numeric leaf."""
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += paths(v, prefix + (i,))
    return out


def get(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def mutate(data, doc, *, numeric_only: bool = False):
    """One structural or numeric change at a drawn place of doc (in place); returns doc."""
    every = paths(doc)
    numeric = [p for p in every if p and isinstance(get(doc, p), (int, float)) and not isinstance(get(doc, p), bool)]
    if numeric_only or (numeric and data.draw(st.integers(0, 2)) == 0):
        if not numeric:
            return doc
        path = data.draw(st.sampled_from(numeric))
        old = get(doc, path)
        if data.draw(st.booleans()) and abs(old) < 1e300:  # a plausible variation: scaled, an integer if it was one
            value = old * 10 ** data.draw(st.floats(-3, 3))
            value = int(round(value)) if isinstance(old, int) else value
        else:
            value = data.draw(st.one_of(st.sampled_from(ODD_NUMBERS), st.floats(allow_nan=True, allow_infinity=True),
                                        st.integers(-(2**70), 2**70)))
        get(doc, path[:-1])[path[-1]] = value
        return doc
    path = data.draw(st.sampled_from(every))
    op = data.draw(st.sampled_from(["delete", "replace", "wrap", "unwrap", "duplicate", "add"]))
    if not path:
        if op == "add":
            doc[data.draw(st.sampled_from(KEYS))] = data.draw(ANY)
        return doc
    parent, key = get(doc, path[:-1]), path[-1]
    value = parent[key]
    if op == "delete":
        del parent[key]
    elif op == "replace":
        parent[key] = data.draw(ANY)
    elif op == "wrap":
        parent[key] = [value]
    elif op == "unwrap" and isinstance(value, list) and value:
        parent[key] = value[0]
    elif op == "duplicate" and isinstance(value, list) and value:
        value.append(copy.deepcopy(value[data.draw(st.integers(0, len(value) - 1))]))
    elif op == "add" and isinstance(value, dict):
        value[data.draw(st.sampled_from(KEYS))] = data.draw(ANY)
    return doc


def mutated_doc(data, base: dict, numeric_only: bool = False) -> dict:
    doc = copy.deepcopy(base)
    for _ in range(data.draw(st.integers(1, 3))):
        doc = mutate(data, doc, numeric_only=numeric_only)
        if not isinstance(doc, dict):
            break
    return doc


def text_damage(data, text: str) -> bytes:
    """Sometimes damage the serialized text: truncate it, or put bytes that are not UTF-8 in it."""
    raw = text.encode()
    kind = data.draw(st.sampled_from(["none", "none", "none", "truncate", "latin1", "nul"]))
    if kind == "truncate":
        return raw[:data.draw(st.integers(0, len(raw)))]
    if kind == "latin1":
        at = data.draw(st.integers(0, len(raw)))
        return raw[:at] + b"\xff\xfe" + raw[at:]
    if kind == "nul":
        return raw.replace(b"\n", b"\n\x00", 1)
    return raw


def toml_bytes(data, doc) -> bytes | None:
    try:
        text = tomli_w.dumps(doc)
    except (TypeError, ValueError):  # a document TOML cannot hold (e.g. a non-table root): not a file
        return None
    return text_damage(data, text)


# --- scenarios ------------------------------------------------------------------------------

SCENARIOS = [
    {"name": "fuzz-two", "hosts": [{"name": "vm1", "site": "A", "gpus": ["T4"]},
                                   {"name": "vm2", "site": "B", "gpus": ["T4"]}],
     "links": [{"between": ["vm1", "vm2"], "rtt_ms": 20.0, "bandwidth_gbps": 10.0}],
     "workload": {"global_batch": 8, "microbatches": 2, "seq_len": 128, "tokens_per_epoch": 3072, "epochs": 1},
     "models": {"small": {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab": 1000, "n_ctx": 128}}},
    {"name": "fuzz-three", "reference_slice": "none",
     "gpus": {"X1": {"memory_gib": 16, "memory_bandwidth_gbs": 300, "fp32_tflops": 8.0, "fp16_tensor_tflops": 60.0,
                     "pcie_gen": 3}},
     "hosts": [{"name": "h0", "site": "S0", "gpus": ["X1", "X1"]}, {"name": "h1", "site": "S1", "gpus": ["A30", "A30"]},
               {"name": "h2", "site": "S2", "gpus": ["RTX6000", "RTX6000"], "intra_host": "nvlink"}],
     "links": [{"between": ["S0", "S1"], "rtt_ms": 5.0, "bandwidth_gbps": 25.0, "window_mib": 4.0, "streams": 2},
               {"between": ["S1", "S2"], "rtt_ms": 50.0, "bandwidth_gbps": 1.0, "step_rtts": 0.5, "service": "L2STS"},
               {"between": ["h0", "h2"], "rtt_ms": 1.0, "bandwidth_gbps": 5.0}],
     "workload": {"global_batch": 12, "microbatches": 2, "seq_len": 64, "tokens_per_epoch": 2304, "epochs": 2,
                  "precision": "bf16", "checkpointing": True},
     "models": {"mini": {"n_layer": 4, "n_embd": 32, "n_head": 4, "vocab": 500, "n_ctx": 64}}},
]


def scenario_example(tmp_path, data, *, numeric_only: bool, target: str) -> None:
    base = data.draw(st.sampled_from(SCENARIOS))
    raw = toml_bytes(data, mutated_doc(data, base, numeric_only=numeric_only))
    if raw is None:
        tally(target, "not serializable")
        return
    path = tmp_path / "scenario.toml"
    path.write_bytes(raw)
    try:
        scenario = load_scenario(path)
        workload = cheap_workload(scenario.workload())
    except GeosimError as exc:
        assert "\n" not in exc.line()
        tally(target, "geosim error")
        return
    technique = data.draw(st.sampled_from(TECHNIQUES))
    try:
        pred = predict(Case(scenario.cluster, cheap_model(scenario), workload, load_params()), technique,
                       options=CHEAP_OPTIONS.get(technique))
    except GeosimError:
        tally(target, "geosim error at predict")
        return
    tally(target, check_prediction(pred))


@settings(max_examples=fuzz_examples(0.6))
@given(data=st.data())
def test_fuzz_scenario_structure(tmp_path_factory, data):
    scenario_example(tmp_path_factory.mktemp("s"), data, numeric_only=False, target="scenario structure")


@settings(max_examples=fuzz_examples(0.4))
@given(data=st.data())
def test_fuzz_scenario_numbers(tmp_path_factory, data):
    scenario_example(tmp_path_factory.mktemp("n"), data, numeric_only=True, target="scenario numbers")


# --- parameters files -----------------------------------------------------------------------

PARAMS_DOC = {
    "compute": {"default_efficiency": 0.1, "efficiency": {"T4": 0.11, "A30": 0.02}},
    "transport": {"window_mib": 1.6, "streams": 1, "stream_rate_gbps": 8.0, "per_message_overhead_us": 20.0,
                  "collective_step_rtts": 0.12, "slow_start_after_idle": True, "initial_window_kib": 14.26,
                  "idle_restart_ms": 200.0},
    "host": {"lan_rtt_ms": 0.2, "lan_bandwidth_gbps": 25.0, "pcie_gbps": {"3": 80.0, "4": 160.0}},
    "overhead": {"iteration_s": {"data": 0.12, "pipeshard": 0.12}, "startup_s": {"data": 60.0}},
    "memory": {"workspace_gib": 1.0, "optimizer_bytes_per_param": 12.0},
    "xla": {"combine_mib": 30.0},
    "pipeshard": {"schedule": "1f1b"},
    "collectives": {"data": "ring", "zero2": "tree"},
    "fitted": {"on": ["x"], "warnings": ["w"]},
}
PARAMS_CLUSTER = load_scenario("utah-gpn").cluster


@settings(max_examples=fuzz_examples(0.25))
@given(data=st.data())
def test_fuzz_params_file(tmp_path_factory, data):
    raw = toml_bytes(data, mutated_doc(data, PARAMS_DOC, numeric_only=data.draw(st.booleans())))
    if raw is None:
        return tally("params", "not serializable")
    path = tmp_path_factory.mktemp("p") / "params.toml"
    path.write_bytes(raw)
    try:
        params = load_params(path)
        technique = data.draw(st.sampled_from(TECHNIQUES))
        pred = predict(Case(PARAMS_CLUSTER, TINY, SHORT, params), technique, options=CHEAP_OPTIONS.get(technique))
    except GeosimError as exc:
        assert "\n" not in exc.line()
        return tally("params", "geosim error")
    tally("params", check_prediction(pred))


# --- run records ----------------------------------------------------------------------------

RECORDS = [
    {"technique": "data", "model": "gpt2", "status": "ok", "scenario": "utah-gpn", "source": "live",
     "measured": {"time_per_iteration_s": 0.5, "peak_memory_gib": 3.0, "steps": 10},
     "workload": {"global_batch": 8, "microbatches": 2, "seq_len": 128}, "hosts": ["vm1", "vm2"], "run_id": "a1"},
    {"technique": "pipeshard", "model": "tiny", "status": "out-of-memory", "source": "alpa-benchmark",
     "model_dims": {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab": 1000, "n_ctx": 128},
     "cluster": SCENARIOS[0], "options": {"layer_split": [1, 1]}, "workload": {"global_batch": 8}, "run_id": "b2"},
    {"technique": "pipeshard", "model": "gpt2", "status": "ok", "scenario": "utah-gpn", "run_id": "d4",
     "measured": {"tokens_per_s": 900.0}, "options": {"layer_split": [6, 6], "meshes": [["vm1"], ["vm2"]],
                                                      "intra_stage": "data", "schedule": "gpipe"}},
    {"technique": "shard", "model": "gpt2", "status": "ok", "scenario": "tacc-tacc",
     "measured": {"total_time_s": 3600.0, "tokens_per_s": 1000.0}, "run_id": "c3", "when": "2026-01-01T00:00:00+00:00"},
]


@settings(max_examples=fuzz_examples(0.25))
@given(data=st.data())
def test_fuzz_run_records(tmp_path_factory, data):
    docs = [mutated_doc(data, r, numeric_only=data.draw(st.booleans())) if data.draw(st.booleans()) else r
            for r in data.draw(st.lists(st.sampled_from(RECORDS), min_size=1, max_size=3))]
    text = "".join(json.dumps(d) + "\n" for d in docs)  # json.dumps writes NaN/Infinity: the reader must refuse them
    path = tmp_path_factory.mktemp("r") / "runs.jsonl"
    path.write_bytes(text_damage(data, text))
    try:
        for where, record in read_runs(path):
            case = to_case(where, record)
            if case.metric is not None:
                assert math.isfinite(math.log(case.measured)), case.measured  # what the fit takes
            pred = predict(Case(case.cluster, TINY, SHORT, load_params()), case.technique, hosts=case.hosts,
                           options=case.options if case.technique == "pipeshard" and case.hosts is None else None)
            check_prediction(pred)
    except GeosimError as exc:
        assert "\n" not in exc.line()
        return tally("records", "geosim error")
    tally("records", "read")


# --- Alpa's benchmark results (TSV and console) -----------------------------------------------

GPT = "GPTModelConfig(seq_len=1024, hidden_size=1024, num_layers=24, num_heads=16, vocab_size=51200)"
ALPA_ROW = ["gpt", GPT, "4", "4", "UniformParallelArgs(prefer_reduce_scatter=True, use_remat=True, dp=2, op=1, pp=2, "
            "force_batch_dim_mapping=True)", "2.160", "0.020", "0.355B", "2.29", "6.512", "{}"]
TOKENS = ("nan", "inf", "-1", "-5", "0", "1e309", "x", "", "(1, 4)", "[[0], [1]]", "True", "'x'", "-1.000", "1e-300",
          "LoadSolutionParallelArgs(True, False, 2, [[0, 1]], [(1, 4)], [(4, 1)], [{}])", "SearchParallelArgs()",
          "ShardParallelArgs(False, False, (1, 4), False)", "(16, 1024, 1024, 24, 16, 51200)", "((((", "1" * 5000)


@settings(max_examples=fuzz_examples(0.25))
@given(data=st.data())
def test_fuzz_alpa_results(tmp_path_factory, data):
    row = list(ALPA_ROW)
    for _ in range(data.draw(st.integers(0, 3))):
        i = data.draw(st.integers(0, len(row) - 1))
        if data.draw(st.booleans()):
            row[i] = data.draw(st.one_of(st.sampled_from(TOKENS), st.text(max_size=8)))
        else:  # change one number inside a config
            import re

            numbers = list(re.finditer(r"\d+", row[i]))
            if numbers:
                m = data.draw(st.sampled_from(numbers))
                row[i] = row[i][:m.start()] + data.draw(st.sampled_from(TOKENS)) + row[i][m.end():]
    if data.draw(st.integers(0, 5)) == 0:
        row = row[:data.draw(st.integers(0, len(row)))]
    heads = ("Type", "Model Config", "#Microbatch", "#GPU", "Parallel Config", "Mean Time (s)", "Std Time (s)",
             "#Params (Billion)", "TFLOPs", "Peak Mem (GB)", "Metadata")
    if data.draw(st.booleans()):
        text = "\t".join(row) + "\n"
    else:  # the same row as write_tsv prints it
        text = "Working on case: BenchmarkCase(batch_size=64, ...)\n" + "".join(
            f"{h}: {v}  " for h, v in zip(heads, row)) + "\n"
    path = tmp_path_factory.mktemp("a") / "results.tsv"
    path.write_bytes(text_damage(data, text))
    try:
        for i, record in enumerate(alpa_benchmark_records(path, "utah-gpn", global_batch=data.draw(
                st.sampled_from([None, 8, 64])))):
            validate(json.loads(record.to_json()), "round trip")
            to_case(f"{path}#{i + 1}", record)
    except GeosimError as exc:
        assert "\n" not in exc.line()
        return tally("alpa", "geosim error")
    tally("alpa", "imported")
