"""Algorithm 1 on live probes, end to end: six real training runs of the tiny model on CPU devices."""

import json

import pytest

from geosim.cli import main
from geosim.inputs.records import read_records

pytestmark = pytest.mark.slow

pytest.importorskip("jax", reason="live probes need the 'live' extra (jax)")


def test_select_live_runs_every_probe_and_records_them(tmp_path, capsys):
    runs = tmp_path / "runs.jsonl"
    code = main(["select", "--scenario", "tacc-tacc", "--model", "tiny", "--live", "--steps", "4",
                 "--records-out", str(runs), "--json"])
    assert code == 0
    (doc,) = json.loads(capsys.readouterr().out)["slices"]
    assert doc["source"] == "live"
    probes = doc["probes"]
    # the five probes always run; all ran fine on CPU devices, so each measured a throughput
    for name in ("Tp", "Td1", "Ts1", "Td2", "Ts2"):
        assert probes[name]["status"] == "ok" and probes[name]["tflops"] > 0, probes[name]
    assert doc["branch"] in ("pipeshard", "single-vm", "zero2")
    records = read_records(runs)
    assert len(records) == len(probes)
    assert {r.technique for r in records} >= {"pipeshard", "data", "shard"}
    # one VM = 2 CPU devices, both VMs = 4
    devices = {(r.technique, len(r.cluster["hosts"][0]["gpus"])) for r in records}
    assert ("data", 2) in devices and ("pipeshard", 4) in devices
