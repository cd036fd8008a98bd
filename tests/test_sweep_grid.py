"""Grid specs: lists, START:STOP:STEP and START:STOP:xFACTOR ranges (the one syntax, geosim.base.units),
'native', workload fields, and clear errors."""

import math

import pytest

from geosim.cli.sweep import add_arguments, build_grid
from geosim.base.errors import GeosimError
from geosim.inputs.scale import make_cluster, scale_scenario
from geosim.techniques import default_techniques, technique_names
from geosim.studies.sweep.grid import Grid, parse_assignment, parse_values, point_key


def test_lists_and_single_values():
    assert parse_values("1,10,25", "float", "--bandwidth-gbps") == [1.0, 10.0, 25.0]
    assert parse_values("gpt2m, gpt2L", "str", "--model") == ["gpt2m", "gpt2L"]
    assert parse_values("8", "int", "--batch") == [8]
    assert parse_values("1,1,2", "int", "--batch") == [1, 2]  # repeats dropped, order kept


def test_step_range_includes_stop_when_a_step_lands_on_it():
    assert parse_values("0:100:25", "float", "x") == [0.0, 25.0, 50.0, 75.0, 100.0]
    assert parse_values("8:64:8", "int", "x") == [8, 16, 24, 32, 40, 48, 56, 64]
    assert parse_values("0:10:4", "float", "x") == [0.0, 4.0, 8.0]


def test_factor_range():
    values = parse_values("0.1:150:x1.2", "float", "--rtt-ms")
    assert values[0] == 0.1 and values[-1] <= 150.0 < values[-1] * 1.2
    ratios = [b / a for a, b in zip(values, values[1:])]
    assert max(ratios) == pytest.approx(min(ratios), rel=1e-4)  # evenly spaced in log
    assert parse_values("8:64:x2", "int", "--global-batch") == [8, 16, 32, 64]


def test_one_range_syntax_in_select_plan_and_sweep():
    from geosim.base.units import parse_numbers

    # "0:100:10" used to mean 10 values to the sweep and a step of 10 to select: now a step everywhere
    assert parse_values("0:100:10", "float", "--rtt-ms") == parse_numbers("0:100:10", "--sweep-rtt")
    assert len(parse_numbers("0:100:10", "--sweep-rtt")) == 11


def test_mixed_items_and_native():
    values = parse_values("native,1:10:9,100", "float", "--rtt-ms", allow_native=True)
    assert values == ["native", 1.0, 10.0, 100.0]


def test_values_are_rounded_so_keys_are_stable():
    v = parse_values("0.1:150:x3", "float", "x")
    assert all(x == float(f"{x:.6g}") for x in v)
    assert parse_values("0.1:150:x3", "float", "x") == v


@pytest.mark.parametrize("spec, kind, message", [
    ("", "float", "empty value list"),
    ("1,,2", "float", "empty item"),
    ("abc", "float", "is not a number"),
    ("1.5", "int", "not a whole number"),
    ("1:2", "float", "START:STOP:STEP"),
    ("1:2:3:4", "float", "START:STOP:STEP"),
    ("10:1:3", "float", "START must not exceed STOP"),
    ("0:10:x2", "float", "needs FACTOR > 1 and START > 0"),
    ("1:10:x1", "float", "needs FACTOR > 1 and START > 0"),
    ("1:10:0", "float", "STEP must be > 0"),
    ("1:10:5log", "float", "COUNTlog ranges are gone; use START:STOP:xFACTOR"),
    ("1:10:abc", "float", "is not a number"),
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
    grid = build_grid(_args("--scenario", "utah-gpn", "--rtt-ms", "10:400:10", "--bandwidth-gbps", "1,10,25",
                            "--model", "gpt2m,gpt2L", "--global-batch", "8,16", "--set", "precision=fp16,bf16"))
    # every technique by default (but those run on request: fsdp), as predict, plan and select rank (issue 34)
    assert len(grid) == 1 * len(default_techniques()) * 2 * 40 * 3 * 2 * 2
    assert grid.axes["precision"] == ["fp16", "bf16"]
    default = build_grid(_args())
    assert len(default.axes["scenario"]) == 5 and default.axes["rtt_ms"][0] == "native"
    assert default.axes["technique"] == default_techniques()  # what predict, plan and select rank
    assert build_grid(_args("--technique", "all")).axes["technique"] == technique_names()
    with pytest.raises(GeosimError, match="--global-batch: must be >= 1"):
        build_grid(_args("--global-batch", "0,8"))


def test_technique_repeated_keeps_every_one():
    # the bug: `--technique data --technique pipeshard` kept only the last
    assert build_grid(_args("--technique", "data", "--technique", "pipeshard")).axes["technique"] == ["data", "pipeshard"]
    assert build_grid(_args("--technique", "data,zero2", "--technique", "shard")).axes["technique"] == [
        "data", "zero2", "shard"]


def test_generated_scenarios_from_flags():
    grid = build_grid(_args("--site-count", "2,16", "--hosts-per-site", "8", "--gpus-per-host", "8"))
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
