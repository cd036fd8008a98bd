"""The mistakes a newcomer made (issue 25) each give one line naming the flag or the key, and values
no real system has are accepted with one warning naming the file and the key (geosim.base.plausibility)."""

from __future__ import annotations


import pytest

from geosim.base import plausibility
from geosim.cli import build_parser

from conftest import run_cli as run

SLICE = """
[[hosts]]
name = "vm1"
site = "UTAH"
gpus = ["RTX6000", "RTX6000"]

[[hosts]]
name = "vm2"
site = "MASS"
gpus = ["RTX6000", "RTX6000"]

[[links]]
between = ["vm1", "vm2"]
{link}
"""


@pytest.fixture(autouse=True)
def fresh_warnings():
    plausibility._warned.clear()  # warn-once is per process; each test starts clean
    yield
    plausibility._warned.clear()


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


@pytest.mark.parametrize("link, key, says", [
    ("rtt_ms = 57.4\nbandwidth_gbps = 10000", "links[0].bandwidth_gbps", "10000 Gbit/s"),
    ("rtt_ms = 0.001\nbandwidth_gbps = 10", "links[0].rtt_ms", "0.001 ms"),
    ("rtt_ms = 1.0\nbandwidth_gbps = 10", "links[0].rtt_ms", "faster than light"),  # UTAH-MASS is ~3,000 km
    ("rtt_ms = 57.4\nbandwidth_gbps = 10\nwindow_mib = 4096", "links[0].window_mib", "4096 MiB"),
])
def test_an_implausible_scenario_value_warns_once_naming_the_file_and_key(tmp_path, link, key, says):
    path = tmp_path / "odd.toml"
    path.write_text(SLICE.format(link=link))
    code, _, err = run(["predict", "--scenario", str(path), "--technique", "data", "--hosts", "all"])
    assert code == 0  # it runs: the value is valid, only implausible
    line = one_line(err)
    assert line.startswith(f"geosim: warning: {path}: {key}: ") and says in line and "scenarios-params.md" in line


def test_an_implausible_flag_warns_naming_the_flag():
    code, _, err = run(["predict", "--scenario", "utah-gpn", "--technique", "data", "--hosts", "all",
                        "--bandwidth-gbps", "10000"])
    assert code == 0 and one_line(err).startswith("geosim: warning: --bandwidth-gbps: 10000 Gbit/s")


def test_an_implausible_parameter_warns_naming_the_parameters_file_and_key(tmp_path):
    params = tmp_path / "lan.toml"
    params.write_text("[host]\nlan_bandwidth_gbps = 100000\n")
    code, _, err = run(["predict", "--scenario", "tacc-tacc", "--technique", "data", "--hosts", "all",
                        "--params", str(params)])
    assert code == 0 and one_line(err).startswith(f"geosim: warning: {params}: host.lan_bandwidth_gbps: 100000 Gbit/s")


def test_the_builtin_slices_are_plausible():
    code, _, err = run(["predict", "--technique", "data", "--hosts", "all"])
    assert code == 0 and err == ""


def test_a_link_without_rtt_is_estimated_from_the_sites(tmp_path):
    path = tmp_path / "estimated.toml"
    path.write_text(SLICE.format(link="bandwidth_gbps = 10"))
    code, out, err = run(["predict", "--scenario", str(path), "--technique", "data", "--hosts", "all"])
    assert code == 0 and err == "" and "(estimated from distance)" in out


@pytest.mark.parametrize("argv, flag", [
    (["predict", "--scenario", "utah-gpn", "--global-batch", "30"], "--global-batch"),  # not the file's microbatches
    (["predict", "--scenario", "utah-gpn", "--technique", "magic"], "--technique"),
    (["predict", "--scenario", "utah-gpn", "--hosts", "vm3"], "--hosts"),
    (["trace", "--hosts", "vm1,vm2"], "--hosts"),
    (["live", "run", "--technique", "hybrid"], "--technique"),  # no live hybrid: said, not a traceback
    (["select", "--scenario", "utah-gpn", "--records-out", "x.jsonl"], "--records-out"),
    (["calibrate", "import", "study"], "--records-out"),
    (["calibrate", "fit", "--out", "p.toml"], "--records"),
    (["fabric", "slice", "create", "--dry-run"], "--scenario"),
])
def test_a_mistake_is_one_line_naming_the_flag(argv, flag):
    code, out, err = run(argv)
    assert code == 2 and out == ""
    line = one_line(err)
    assert "error:" in line and flag in line and "Traceback" not in err


def test_global_batch_mistake_names_the_flag_and_says_where_the_other_value_comes_from():
    _, _, err = run(["predict", "--scenario", "utah-gpn", "--global-batch", "30"])
    line = one_line(err)
    assert "error: --global-batch: " in line and "workload.microbatches" in line and "--microbatches" in line
    assert "utah-gpn.toml" not in line  # the file is not what the user got wrong


@pytest.mark.parametrize("argv", [
    ["predict", "--precision", "FP16"], ["plan", "--intra-stage", "DATA"], ["sweep", "--metric", "TOTAL_TIME_S"],
    ["predict", "--scenario", "UTAH-GPN", "--technique", "DATA"],
])
def test_choices_and_names_are_case_insensitive(argv):
    args = build_parser(argv[0]).parse_args(argv)
    assert args is not None


def test_live_validate_help_quotes_the_catalogs_parameter_count():
    from geosim.inputs.scenario import get_model

    parser = build_parser("live")
    text = parser._subparsers._group_actions[0].choices["live"].format_help()
    validate_help = next(a for a in parser._subparsers._group_actions[0].choices["live"]._actions
                         if a.dest == "live_command").choices["validate"].format_help()
    assert text
    assert f"{get_model('small-wan').num_params / 1e6:.0f}M parameters" in " ".join(validate_help.split())


def test_no_help_points_at_a_readme_section():
    from pathlib import Path

    headings = {line.lstrip("# ").strip() for line in (Path(__file__).resolve().parents[1] / "README.md").read_text()
                .splitlines() if line.startswith("#")}
    parser = build_parser()
    stack, texts = [parser], []
    while stack:
        p = stack.pop()
        texts.append(p.format_help())
        for action in p._actions:
            if hasattr(action, "choices") and isinstance(action.choices, dict):
                stack += list(action.choices.values())
    for text in texts:
        for section in (part.split(")")[0].split(";")[0] for part in " ".join(text.split()).split("README: ")[1:]):
            assert any(section.startswith(h) for h in headings), section


@pytest.mark.slow
def test_live_run_takes_a_list_of_techniques_one_record_each(tmp_path):
    import os
    import subprocess
    import sys

    from geosim.inputs.records import read_records

    runs = tmp_path / "runs.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, "-m", "geosim", "live", "run", "--technique", "data,ZERO2", "--steps", "3",
                           "--gpus-per-host", "2", "--records-out", str(runs)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [r.technique for r in read_records(runs)] == ["data", "zero2"]
