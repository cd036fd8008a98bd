"""The second newcomer trial's findings (issue 34), each fixed and held here: sweep ranks what
predict, plan and select rank; plan's search line once; calibrate import --json is only JSON; a
trace draws no overlapping slices on one track; integer flags take 1e9; a runtime other than
Alpa says why its times differ; trace --json has one shape."""

from __future__ import annotations

import json
from collections import defaultdict

from geosim.techniques import default_techniques

from conftest import run_cli as run


def test_sweep_sweeps_every_technique_by_default(tmp_path):
    code, out, err = run(["sweep", "--scenario", "tacc-tacc", "--rtt-ms", "native", "--hosts", "all", "--workers", "1",
                          "--sweep-dir", str(tmp_path / "sweep"), "--quiet", "--json", "--no-best"])
    assert code == 0, err
    for name in default_techniques():  # every technique but those run on request (fsdp)
        assert f'"{name}"' in out


def test_plan_prints_its_search_line_once():
    code, out, _ = run(["plan", "--scenario", "utah-mass", "--top", "3"])
    assert code == 0
    searches = [line for line in out.splitlines() if "options weighed" in line or " options: " in line]
    assert len(searches) == 1 and searches[0].strip().startswith("search (") and "feasible" in searches[0]


def test_calibrate_import_json_is_only_the_json_document(tmp_path):
    code, out, err = run(["calibrate", "import", "study", "--records-out", str(tmp_path / "runs.jsonl"), "--json"])
    assert code == 0, err
    doc = json.loads(out)  # nothing before it, nothing after it
    assert doc["written"] == len(doc["records"]) > 0


def test_a_trace_draws_no_overlapping_slices_on_one_link_track(tmp_path):
    out = tmp_path / "t.json"
    code, _, err = run(["trace", "--scenario", "scale:3x4x1:A30", "--technique", "data", "--model", "gpt2",
                        "--out", str(out)])
    assert code == 0, err
    doc = json.loads(out.read_text())
    tracks = defaultdict(list)
    names = {}
    for e in doc["traceEvents"]:
        if e["pid"] == 2 and e["ph"] == "X":
            tracks[e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
        elif e["pid"] == 2 and e.get("name") == "thread_name":
            names[e["tid"]] = e["args"]["name"]
    for slices in tracks.values():
        slices.sort()
        for (_, end), (start, _) in zip(slices, slices[1:]):
            assert start >= end - 1e-6 * max(1.0, abs(end))  # microseconds; float rounding only
    # flows did share links here: the extra rows carry them (a link's second row is "NAME (2)")
    assert any(name.endswith(" (2)") for name in names.values())


def test_trace_json_has_one_shape_for_one_technique_or_several(tmp_path):
    shapes = []
    for techniques in ("data", "data,shard"):
        code, out, err = run(["trace", "--scenario", "tacc-tacc", "--technique", techniques, "--iterations", "1",
                              "--hosts", "vm1", "--out", str(tmp_path / "t.json"), "--json"])
        assert code == 0, err
        doc = json.loads(out)
        assert doc["schema"] == "geosim.trace/1" and doc["hosts"] == ["vm1"]
        assert [t["technique"] for t in doc["traces"]] == techniques.split(",")
        shapes.append(sorted(doc))
    assert shapes[0] == shapes[1]


def test_integer_flags_take_float_notation():
    code, out, err = run(["predict", "--scenario", "utah-gpn", "--technique", "data", "--hosts", "vm1",
                          "--tokens-per-epoch", "1e7", "--json"])
    assert code == 0, err
    (row,) = json.loads(out)["slices"][0]["predictions"]
    _, base, _ = run(["predict", "--scenario", "utah-gpn", "--technique", "data", "--hosts", "vm1",
                      "--tokens-per-epoch", "10_000_000", "--json"])
    assert row["iterations"] == json.loads(base)["slices"][0]["predictions"][0]["iterations"]


def test_a_bad_number_is_one_line_without_the_usage():
    for value, problem in (("2.5", "not a whole number: '2.5'"), ("lots", "not a whole number: 'lots'")):
        code, out, err = run(["predict", "--epochs", value])
        assert code == 2 and out == ""
        assert err.strip().splitlines() == [err.strip()] and "--epochs" in err and problem in err
        assert "usage:" not in err


def test_another_runtime_says_what_it_pays_that_alpa_does_not():
    argv = ["predict", "--scenario", "scale:1x2x8:H100", "--technique", "shard", "--hosts", "s0v0"]
    _, alpa, _ = run(argv)
    code, jax, err = run(argv + ["--runtime", "jax"])
    assert code == 0, err
    assert "against the study's Alpa fit" not in alpa
    (line,) = [x for x in jax.splitlines() if "against the study's Alpa fit" in x]
    assert "round trips" in line and "in a tensor-sharded layer" in line
    _, doc, _ = run(argv + ["--runtime", "jax", "--json"])
    assert json.loads(doc)["slices"][0]["runtime_differences"]
