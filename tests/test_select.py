"""Algorithm 1 (geosim.studies.select): every branch on synthetic probe values, and the probe sources."""

import json

import pytest

from geosim.cli import main
from geosim.base.errors import GeosimError
from geosim.inputs.params import load_params
from geosim.inputs.records import RunRecord, append_record
from geosim.inputs.scenario import get_model, load_scenario
from geosim.studies.reference import study_records
from geosim.studies.select import MeasuredProbes, PredictedProbes, Probe, algorithm1
from geosim.studies.ranking import choice_vs_rtt
from geosim.base.units import parse_numbers

PROBES = {"Tp": ("pipeshard", ("v1", "v2")), "Td1": ("data", ("v1",)), "Ts1": ("shard", ("v1",)),
          "Td2": ("data", ("v2",)), "Ts2": ("shard", ("v2",)), "Tz2": ("zero2", ("v1", "v2"))}


class Table:
    """A probe source that answers from a table of TFLOP/s, and remembers what was asked."""

    kind = "table"

    def __init__(self, **values):
        self.by_probe = {PROBES[name]: value for name, value in values.items()}
        self.asked = []

    def probe(self, technique, hosts):
        self.asked.append((technique, hosts))
        value = self.by_probe.get((technique, hosts), 0.0)
        return Probe(technique, hosts, value, "ok" if value else "out-of-memory")


def choose(delta=0.1, **values):
    return algorithm1(Table(**values), "v1", "v2", delta)


def test_pipeshard_wins_when_more_than_delta_above_the_best_single_vm():
    s = choose(Tp=12.0, Td1=10.0, Ts1=4.0, Td2=3.0, Ts2=2.0)
    assert (s.technique, s.hosts, s.branch) == ("pipeshard", ("v1", "v2"), "pipeshard")
    assert s.tz == 10.0 and "Tz2" not in s.probes  # ZeRO2 is never probed when not needed


def test_single_vm_wins_when_more_than_delta_above_pipeshard():
    s = choose(Tp=4.0, Td1=3.0, Ts1=2.0, Td2=5.0, Ts2=6.0)
    assert (s.technique, s.hosts, s.branch) == ("shard", ("v2",), "single-vm")


@pytest.mark.parametrize("values, expected", [
    (dict(Td1=6.0, Ts1=6.0, Td2=1.0, Ts2=1.0), ("data", ("v1",))),  # Data on a tie inside a VM
    (dict(Td1=6.0, Ts1=1.0, Td2=1.0, Ts2=6.0), ("data", ("v1",))),  # V1 on a tie between VMs
    (dict(Td1=1.0, Ts1=5.0, Td2=2.0, Ts2=2.0), ("shard", ("v1",))),
    (dict(Td1=1.0, Ts1=1.0, Td2=6.0, Ts2=6.0), ("data", ("v2",))),
])
def test_single_vm_ties(values, expected):
    s = choose(Tp=2.0, **values)
    assert (s.technique, s.hosts) == expected


def test_gap_exactly_delta_is_not_enough_either_way():
    # binary-exact values: (4.5 - 4) / 4 == 0.125 exactly, and the test is strict
    s = choose(delta=0.125, Tp=4.5, Td1=4.0, Tz2=1.0)
    assert s.branch == "zero2" and s.technique == "zero2"
    s = choose(delta=0.125, Tp=4.0, Td1=4.5, Tz2=1.0)
    assert s.branch == "zero2"
    # a hair above delta decides
    assert choose(delta=0.125, Tp=4.5 + 1e-9, Td1=4.0).branch == "pipeshard"
    assert choose(delta=0.125, Tp=4.0, Td1=4.5 + 1e-9).branch == "single-vm"


def test_equal_throughput_falls_through_to_zero2():
    s = choose(Tp=5.0, Td1=5.0, Ts1=5.0, Td2=5.0, Ts2=5.0, Tz2=2.0)
    assert (s.technique, s.hosts, s.branch) == ("zero2", ("v1", "v2"), "zero2")
    assert s.probes["Tz2"].tflops == 2.0


def test_pipeshard_alone_running_still_goes_to_zero2_as_written():
    s = choose(Tp=5.0, Tz2=1.0)
    assert s.branch == "zero2" and any("Pipeshard ran" in n for n in s.notes)


def test_single_vm_alone_running_still_goes_to_zero2_as_written():
    s = choose(Td2=3.0, Tz2=1.0)
    assert s.branch == "zero2" and any("single VM ran" in n for n in s.notes)


def test_every_probe_failing_means_more_memory_needed():
    source = Table()
    s = algorithm1(source, "v1", "v2")
    assert s.technique is None and s.branch == "none" and s.label == "none: more GPU memory needed"
    assert "every probe failed" in s.reason and len(source.asked) == 6


def test_zero2_only_when_needed_and_last():
    source = Table(Tp=1.0, Td1=1.0)
    algorithm1(source, "v1", "v2")
    assert source.asked[-1] == ("zero2", ("v1", "v2")) and len(source.asked) == 6


@pytest.mark.parametrize("delta", [0.0, -0.1, 1.5])
def test_delta_outside_0_1_is_refused(delta):
    with pytest.raises(GeosimError, match="delta"):
        choose(delta=delta, Tp=1.0)


# -- probe sources -----------------------------------------------------------------------------


def case(name="utah-mass", model="gpt2L"):
    scenario = load_scenario(name)
    return scenario.cluster, get_model(model), scenario.workload(epochs=1), load_params()


def test_predicted_gpt2_xl_single_vms_run_out_of_memory_and_a_probe_that_may_not_fit_counts_as_failed():
    # gpt2-xl (1.56 B parameters, 16 B each) fits neither one VM nor a two-stage pipeline; ZeRO-2's sharded
    # states need 21.7 of 21.6 GiB usable: "may not fit", which a probe counts as a failure (issue 41: Alpa's
    # peaks run above the layout), so no technique is chosen.
    cluster, model, workload, params = case(model="gpt2-xl")
    s = algorithm1(PredictedProbes(cluster, model, workload, params), "vm1", "vm2")
    for name in ("Tp", "Td1", "Ts1", "Td2", "Ts2"):
        assert s.probes[name].tflops == 0 and s.probes[name].status == "out-of-memory"
    assert s.probes["Tz2"].status == "may not fit" and s.probes["Tz2"].tflops == 0 and s.technique is None
    assert "counted as failed" in s.probes["Tz2"].detail and "needs 21.7 of 21.6 GiB" in s.probes["Tz2"].detail
    # gpt2L's Data on one VM of two 24 GiB GPUs may not fit (the study saw that cell run out of memory): not chosen
    s = algorithm1(PredictedProbes(*case()), "vm1", "vm2")
    assert s.probes["Td1"].status == "may not fit" and s.label != "Data on vm1"


def record(technique, hosts, status="ok", tflops=None, when="2026-01-01T00:00:00+00:00", **extra):
    measured = {"tflops_per_gpu": tflops} if tflops is not None else {}
    return RunRecord(technique=technique, model="gpt2m", status=status, scenario="utah-gpn", hosts=hosts,
                     measured=measured, when=when, **extra)


def test_measured_probes_latest_record_wins_and_failures_count_zero(tmp_path):
    path = tmp_path / "runs.jsonl"
    for r in (record("pipeshard", None, tflops=2.0), record("data", ["vm1"], tflops=1.0),
              record("data", ["vm1"], tflops=3.0, when="2026-02-01T00:00:00+00:00"),
              record("shard", ["vm1"], status="out-of-memory"), record("data", ["vm2"], tflops=0.5),
              record("shard", ["vm2"], status="failed", error="boom")):
        append_record(path, r)
    cluster, model, workload, _ = case("utah-gpn", "gpt2m")
    from geosim.inputs.records import read_records
    source = MeasuredProbes(read_records(path), cluster, "utah-gpn", model, workload, str(path))
    s = algorithm1(source, "vm1", "vm2")
    assert s.probes["Td1"].tflops == 3.0 and s.probes["Ts1"].tflops == 0 and s.probes["Ts2"].tflops == 0
    assert (s.technique, s.hosts) == ("data", ("vm1",))  # (3 - 2) / 2 > 0.1


def test_measured_missing_probes_name_the_runs_to_do(tmp_path):
    path = tmp_path / "runs.jsonl"
    append_record(path, record("pipeshard", ["vm1", "vm2"], tflops=2.0))
    cluster, model, workload, _ = case("utah-gpn", "gpt2m")
    from geosim.inputs.records import read_records
    with pytest.raises(GeosimError) as err:
        algorithm1(MeasuredProbes(read_records(path), cluster, "utah-gpn", model, workload, str(path)), "vm1", "vm2")
    text = err.value.line()
    for technique, vm in (("data", "vm1"), ("shard", "vm1"), ("data", "vm2"), ("shard", "vm2")):
        assert f"{technique} on {vm}: `geosim live run --technique {technique} --model gpt2m" in text
    assert "pipeshard on" not in text


def test_study_measurements_do_not_suffice_for_algorithm1():
    cluster, model, workload, _ = case("utah-gpn", "gpt2m")
    source = MeasuredProbes(study_records(), cluster, "utah-gpn", model, workload, "study", record_hint="runs.jsonl")
    assert source.probe("pipeshard", ("vm1", "vm2")).tflops == 2.49  # the quoted figure
    assert source.probe("data", ("vm1",)).status == "ok"  # the single-VM run the text quotes
    with pytest.raises(GeosimError, match="shard on vm1") as err:
        algorithm1(source, "vm1", "vm2")
    assert "data on vm1" not in err.value.line()


# -- sweeps and the command --------------------------------------------------------------------


def test_parse_rtts():
    assert parse_numbers("10,1,0.1", "--sweep-rtt") == [0.1, 1.0, 10.0]
    assert parse_numbers("0:30:10", "--sweep-rtt") == [0.0, 10.0, 20.0, 30.0]
    for bad in ("x", "5:1:1", "-1,2"):
        with pytest.raises(GeosimError):
            parse_numbers(bad, "--sweep-rtt")


def test_sweep_bisects_to_the_flip():
    rows, flips = choice_vs_rtt([0.0, 50.0, 100.0], lambda r: ("A" if r < 37.0 else "B", None), rel_tol=1e-4)
    assert [label for _, label, _ in rows] == ["A", "B", "B"]
    (lo, hi, below, above), = flips
    assert lo < 37.0 <= hi and hi - lo < 0.02 and (below, above) == ("A", "B")


def test_select_command_json(capsys):
    assert main(["select", "--scenario", "utah-mass", "--model", "gpt2-xl", "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)["slices"]
    assert doc["branch"] == "none" and set(doc["probes"]) == set(PROBES) | {"Tz2"}  # ZeRO2 may not fit: failed
    assert doc["probes"]["Tz2"]["status"] == "may not fit"


def test_select_command_prints_every_probe_and_the_branch(capsys):
    assert main(["select", "--scenario", "utah-gpn", "--model", "gpt2m"]) == 0
    out = capsys.readouterr().out
    for name in ("Tp", "Td1", "Ts1", "Td2", "Ts2", "Tz ", "branch:", "choice:"):
        assert name in out


def test_select_measured_study_explains_what_is_missing(capsys):
    assert main(["select", "--scenario", "utah-gpn", "--records", "study"]) == 2
    assert "shard on vm1: `geosim live run --technique shard --model gpt2m" in capsys.readouterr().err
