"""Grid specs: lists, linear and log ranges, 'native', workload fields, and clear errors."""

import math

import pytest

from geosim.cli.sweep import add_arguments, build_grid
from geosim.errors import GeosimError
from geosim.scale import make_cluster, scale_scenario
from geosim.techniques import technique_names
from geosim.studies.sweep.grid import Grid, parse_assignment, parse_values, point_key


def test_lists_and_single_values():
    assert parse_values("1,10,25", "float", "--bandwidth-gbps") == [1.0, 10.0, 25.0]
    assert parse_values("gpt2m, gpt2L", "str", "--model") == ["gpt2m", "gpt2L"]
    assert parse_values("8", "int", "--batch") == [8]
    assert parse_values("1,1,2", "int", "--batch") == [1, 2]  # repeats dropped, order kept


def test_linear_range_includes_both_ends():
    assert parse_values("0:100:5", "float", "x") == [0.0, 25.0, 50.0, 75.0, 100.0]
    assert parse_values("8:64:8", "int", "x") == [8, 16, 24, 32, 40, 48, 56, 64]


def test_log_range():
    values = parse_values("0.1:150:40log", "float", "--rtt-ms")
    assert len(values) == 40 and values[0] == 0.1 and values[-1] == 150.0
    ratios = [b / a for a, b in zip(values, values[1:])]
    assert max(ratios) == pytest.approx(min(ratios), rel=1e-4)  # evenly spaced in log
    assert parse_values("8:64:4log", "int", "--batch") == [8, 16, 32, 64]


def test_mixed_items_and_native():
    values = parse_values("native,1:10:2,100", "float", "--rtt-ms", allow_native=True)
    assert values == ["native", 1.0, 10.0, 100.0]


def test_values_are_rounded_so_keys_are_stable():
    v = parse_values("0.1:150:7log", "float", "x")
    assert all(x == float(f"{x:.6g}") for x in v)
    assert parse_values("0.1:150:7log", "float", "x") == v


@pytest.mark.parametrize("spec, kind, message", [
    ("", "float", "empty value list"),
    ("1,,2", "float", "empty item"),
    ("abc", "float", "is not a number"),
    ("1.5", "int", "not a whole number"),
    ("1:2", "float", "START:STOP:COUNT"),
    ("1:2:3:4", "float", "START:STOP:COUNT"),
    ("10:1:3", "float", "START must not exceed STOP"),
    ("0:10:5log", "float", "log range needs START > 0"),
    ("1:10:0", "float", "COUNT must be a whole number >= 1"),
    ("1:10:xlog", "float", "COUNT must be a whole number >= 1"),
    ("1:10:1", "float", "one point cannot span"),
    ("-5", "float", "must be >= 0"),
    ("inf", "float", "not a finite number"),
    ("native", "float", "'native' is not a value"),
    ("maybe", "bool", "not true or false"),
])
def test_bad_specs_say_what_is_wrong(spec, kind, message):
    with pytest.raises(GeosimError, match=message) as info:
        parse_values(spec, kind, "--rtt-ms")
    assert info.value.source == "--rtt-ms"


def test_assignment_for_any_workload_field():
    assert parse_assignment("global_batch=8,16") == ("global_batch", [8, 16])
    assert parse_assignment("precision=fp16,bf16") == ("precision", ["fp16", "bf16"])
    assert parse_assignment("checkpointing=true,false") == ("checkpointing", [True, False])
    with pytest.raises(GeosimError, match="unknown workload field 'batch'"):
        parse_assignment("batch=8")
    with pytest.raises(GeosimError, match="FIELD=VALUES"):
        parse_assignment("global_batch")


def test_grid_product_and_keys():
    grid = Grid({"scenario": ["utah-gpn"], "technique": ["data", "shard"], "model": ["gpt2m"],
                 "rtt_ms": [1.0, 10.0, 100.0], "global_batch": [8, 16]})
    points = grid.points()
    assert len(points) == len(grid) == 12
    keys = {point_key(p) for p in points}
    assert len(keys) == 12
    assert points[0]["workload"] == {"global_batch": 8}
    assert grid.varying() == ["technique", "rtt_ms", "global_batch"]
    with pytest.raises(GeosimError, match="unknown sweep axis"):
        Grid({"colour": ["red"]})


def _args(*argv):
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_command_line_grid():
    grid = build_grid(_args("--scenario", "utah-gpn", "--rtt-ms", "0.1:150:40log", "--bandwidth-gbps", "1,10,25",
                            "--model", "gpt2m,gpt2L", "--batch", "8,16", "--set", "precision=fp16,bf16"))
    assert len(grid) == 1 * 4 * 2 * 40 * 3 * 2 * 2  # the study's four techniques by default
    assert grid.axes["precision"] == ["fp16", "bf16"]
    default = build_grid(_args())
    assert len(default.axes["scenario"]) == 5 and default.axes["rtt_ms"][0] == "native"
    assert default.axes["technique"] == ["data", "zero2", "shard", "pipeshard"]
    assert build_grid(_args("--technique", "all")).axes["technique"] == technique_names()
    with pytest.raises(GeosimError, match="must be > 0"):
        build_grid(_args("--batch", "0,8"))


def test_generated_scenarios_from_flags():
    grid = build_grid(_args("--sites", "2,16", "--vms-per-site", "8", "--gpus-per-vm", "8"))
    assert grid.axes["scenario"] == ["scale:2x8x8:A30", "scale:16x8x8:A30"]
    big = scale_scenario("scale:16x8x8:A30")
    assert big.cluster.num_gpus == 1024
    assert len({h.site for h in big.cluster.hosts}) == 16
    assert len(big.cluster.links) == 16 * 15 // 2
    workload = big.workload()
    assert workload.global_batch == 1024 * workload.microbatches  # one sequence per GPU per microbatch
    with pytest.raises(GeosimError, match="scale:SITESxVMSxGPUS"):
        scale_scenario("scale:16x8")
    with pytest.raises(GeosimError, match="at least 2 VMs"):
        make_cluster(1, 1, 8)
    assert math.prod([4, 4, 8]) == make_cluster(4, 4, 8).num_gpus
