"""One answer: predict, select and plan rank every technique they consider on one measure (time to
the same training progress, geosim.studies.ranking.time_to_progress_s), so for every built-in slice
they print the same first line, with the default techniques and with `--technique all`; their JSON
shares one envelope (geosim.answer/1)."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from geosim.cli import main
from geosim.scenario import BUILTIN_SCENARIOS

COMMANDS = ("predict", "select", "plan")


def run(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0
    return out.getvalue()


def first_lines(text: str) -> list[tuple[str, str]]:
    """(slice header, the line after it) for each slice: a slice's answer starts with a blank line,
    its header, then the verdict."""
    lines = text.splitlines()
    return [(lines[i + 1], lines[i + 2]) for i, line in enumerate(lines[:-2])
            if line == "" and lines[i + 1] and not lines[i + 1].startswith(" ") and lines[i + 2].startswith("  verdict:")]


@pytest.mark.parametrize("techniques", [[], ["--technique", "all"]], ids=["default", "all"])
def test_predict_select_and_plan_print_the_same_first_line_for_every_builtin_slice(techniques):
    answers = {command: first_lines(run(command, *techniques)) for command in COMMANDS}
    assert [header.split()[0] for header, _ in answers["predict"]] == [s.upper() for s in BUILTIN_SCENARIOS]
    assert answers["select"] == answers["predict"]
    assert answers["plan"] == answers["predict"]
    assert all(text.lstrip().startswith("verdict: use ") for _, text in answers["predict"])


def test_a_low_communication_best_says_its_efficiency_is_assumed_and_the_table_agrees():
    text = run("predict", "--scenario", "gat-amst", "--technique", "all")
    [(_, verdict)] = first_lines(text)
    best = re.match(r"\s+verdict: use (\S+) on (\S+) \(\d+ GPUs\): ([\d.]+ \w+) predicted to Data's progress "
                    r"\(token efficiency ([\d.]+), assumed\)", verdict)
    assert best, verdict
    technique, hosts, time, efficiency = best.groups()
    # the time-to-target table's row for the verdict's option is the verdict's own time (1.00x)
    row = next(line for line in text.splitlines() if line.split()[:2] == [technique.lower(), hosts])
    assert time in row and "1.00x" in row and efficiency in row


def test_predict_with_one_low_communication_technique_still_prints_a_verdict():
    [(_, verdict)] = first_lines(run("predict", "--scenario", "gat-amst", "--technique", "sparseloco"))
    assert "use SparseLoCo on vm1+vm2" in verdict and "assumed" in verdict


def test_a_measured_efficiency_is_not_called_assumed(tmp_path):
    curves = tmp_path / "curves.jsonl"
    curves.write_text("".join(json.dumps({"technique": t, "loss_curve": c}) + "\n" for t, c in (
        ("data", [[0, 10.0], [1e6, 5.0], [2e6, 4.0]]), ("sparseloco", [[0, 10.0], [1e6, 6.0], [2e6, 4.5], [3e6, 4.0]]))))
    [(_, verdict)] = first_lines(run("predict", "--scenario", "gat-amst", "--technique", "data,sparseloco",
                                     "--loss-curves", str(curves)))
    assert "measured" in verdict and "assumed" not in verdict


def test_the_study_techniques_alone_rank_as_before():
    # efficiency 1: the measure is the predicted time itself, so no verdict mentions efficiency
    [(_, verdict)] = first_lines(run("plan", "--scenario", "utah-gpn", "--technique", "data,zero2,shard,pipeshard"))
    assert "efficiency" not in verdict


@pytest.mark.parametrize("command", COMMANDS)
def test_one_json_envelope(command):
    doc = json.loads(run(command, "--scenario", "utah-gpn,gat-amst", "--json"))
    assert doc["schema"] == "geosim.answer/1" and doc["command"] == command
    assert {"params", "note", "slices"} <= set(doc)
    assert [s["scenario"] for s in doc["slices"]] == ["UTAH-GPN", "GAT-AMST"]
    assert all(s["verdict"].startswith("verdict: use ") for s in doc["slices"])
    verdicts = [s["verdict"] for s in doc["slices"]]
    assert verdicts == [s["verdict"] for s in json.loads(run("plan", "--scenario", "utah-gpn,gat-amst",
                                                               "--json"))["slices"]]
