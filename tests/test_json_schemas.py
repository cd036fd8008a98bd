"""Every --json is one JSON document of one schema per command (issue 34): docs/reference/schemas/ holds
a JSON Schema for each subcommand that takes --json, and each command's output on a small case is
checked against its schema here; a failure under --json is geosim.error/1's document."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from geosim.cli import build_parser

from conftest import run_cli

SCHEMAS = Path(__file__).resolve().parents[1] / "docs" / "reference" / "schemas"
# what needs root, a WAN slice, a Ray cluster or FABRIC to print its document: its schema is checked
# (a valid JSON Schema, written from the code that prints it), its output is not produced here
NOT_RUN_HERE = {"live probe": "a Ray cluster", "live validate": "root and an emulated WAN",
                "live wan up": "root (network namespaces)", "live wan measure": "an emulated WAN slice",
                "fabric slice emulate": "an emulated WAN slice", "fabric calibrate": "a FABRIC or emulated slice"}


def json_commands() -> list[str]:
    """'predict', 'calibrate import', ...: every subcommand that takes --json."""
    found = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    if any("--json" in a.option_strings for a in sub._actions):
                        found.append(f"{path} {name}".strip())
                    walk(sub, f"{path} {name}")

    walk(build_parser(), "")
    return found


def schema_of(command: str) -> dict:
    return json.loads((SCHEMAS / f"{command.replace(' ', '-')}.schema.json").read_text())


def run_json(argv: list[str]) -> tuple[int, object]:
    code, out, _ = run_cli(argv)
    return code, json.loads(out)  # one document: json.loads refuses two


def test_every_json_command_has_one_schema_and_every_schema_a_command():
    commands = json_commands()
    assert "predict" in commands and "calibrate import" in commands and "live wan status" in commands
    names = {f"{c.replace(' ', '-')}.schema.json" for c in commands} | {"error.schema.json"}
    assert names == {p.name for p in SCHEMAS.glob("*.schema.json")}
    for path in SCHEMAS.glob("*.schema.json"):
        schema = json.loads(path.read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$id"] == path.name and schema.get("title") and schema.get("type", schema.get("oneOf"))


def test_every_schema_is_listed_in_the_cli_reference():
    reference = (SCHEMAS.parent / "cli.md").read_text()
    for command in json_commands():
        assert f"schemas/{command.replace(' ', '-')}.schema.json" in reference, command


CASES = [
    ["predict", "--scenario", "utah-gpn", "--technique", "data,pipeshard"],
    ["predict", "--scenario", "utah-gpn", "--technique", "data,diloco", "--hosts", "each"],
    ["predict", "--scenario", "tacc-tacc", "--technique", "fsdp", "--hosts", "all", "--replica-per", "host"],
    ["select", "--scenario", "utah-gpn", "--technique", "data,shard"],
    ["select", "--scenario", "utah-gpn", "--technique", "data", "--sweep-rtt", "1,50"],
    ["plan", "--scenario", "utah-gpn", "--technique", "data,pipeshard", "--top", "3"],
    ["plan", "--scenario", "utah-gpn", "--records", "study"],
    ["plan", "--scenario", "scale:1x4x4:H100", "--technique", "pipeshard", "--tensor-parallel", "2",
     "--pipeline-parallel", "2", "--global-batch", "32"],
    ["trace", "--scenario", "utah-gpn", "--technique", "data", "--iterations", "1", "--out", "{tmp}/one.json"],
    ["trace", "--scenario", "utah-gpn", "--technique", "data,pipeshard", "--iterations", "1", "--out", "{tmp}/t.json"],
    ["models"],
    ["sites"],
    ["calibrate", "import", "study", "--records-out", "{tmp}/runs.jsonl"],
    ["calibrate", "check", "--records", "study"],
    ["calibrate", "wan-public"],
    ["fabric", "slice", "create", "--scenario", "utah-gpn", "--dry-run", "--out", "{tmp}/slice"],
]


@pytest.mark.parametrize("argv", CASES, ids=[" ".join(a[:2]) + f" #{i}" for i, a in enumerate(CASES)])
def test_a_commands_json_is_its_schemas(argv, tmp_path):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    command = " ".join(a for a in argv[:3] if not a.startswith("-") and a in _words())
    code, doc = run_json(argv + ["--json"])
    assert code == 0
    jsonschema.validate(doc, schema_of(command))


def _words() -> set[str]:
    return {w for c in json_commands() for w in c.split()}


def test_trace_is_one_shape_for_one_technique_or_several(tmp_path):
    _, one = run_json(["trace", "--scenario", "utah-gpn", "--technique", "data", "--iterations", "1", "--out",
                       str(tmp_path / "a.json"), "--json"])
    _, two = run_json(["trace", "--scenario", "utah-gpn", "--technique", "data,shard", "--iterations", "1", "--out",
                       str(tmp_path / "b.json"), "--json"])
    assert set(one) == set(two) and len(one["traces"]) == 1 and len(two["traces"]) == 2
    assert set(one["traces"][0]) == set(two["traces"][1])


def test_sweep_and_its_report(tmp_path):
    out = str(tmp_path / "sw")
    code, doc = run_json(["sweep", "--scenario", "utah-gpn", "--technique", "data,shard", "--rtt-ms", "1,20",
                          "--sweep-dir", out, "--workers", "1", "--quiet", "--json"])
    assert code == 0
    jsonschema.validate(doc, schema_of("sweep"))
    code, doc = run_json(["report", "--sweep-dir", out, "--json"])
    assert code == 0
    jsonschema.validate(doc, schema_of("report"))


def test_live_wan_status_is_the_slice_or_null():
    code, doc = run_json(["live", "wan", "status", "--json"])
    assert code == (0 if doc is not None else 1)
    jsonschema.validate(doc, schema_of("live wan status"))


@pytest.mark.parametrize("argv", [["predict", "--scenario", "no-such-slice"], ["plan", "--top", "0"],
                                  ["calibrate", "check", "--records", "/nonexistent.jsonl"],
                                  ["sweep", "--workers", "0"]])
def test_a_failure_under_json_is_the_error_document(argv):
    code, doc = run_json(argv + ["--json"])
    assert code == 2
    jsonschema.validate(doc, json.loads((SCHEMAS / "error.schema.json").read_text()))
    assert doc["exit"] == 2 and "\n" not in doc["error"]


@pytest.mark.slow
def test_calibrate_fit_and_crossval(tmp_path):
    # the documents' shape, not the fit's quality (tests/test_calibrate.py judges that): three
    # least-squares iterations a fit keep every field (32 s of CPU at the default 25)
    runs = str(tmp_path / "runs.jsonl")
    assert run_json(["calibrate", "import", "study", "--records-out", runs, "--json"])[0] == 0
    code, doc = run_json(["calibrate", "fit", "--records", runs, "--out", str(tmp_path / "f.toml"), "--json",
                          "--max-evaluations", "3"])
    assert code == 0
    jsonschema.validate(doc, schema_of("calibrate fit"))
    code, doc = run_json(["calibrate", "crossval", "--kind", "loso", "--json", "--max-evaluations", "3", "--plot", ""])
    assert code == 0
    jsonschema.validate(doc, schema_of("calibrate crossval"))


@pytest.mark.slow
def test_live_run(tmp_path):
    pytest.importorskip("jax")
    # its own process: jax's CPU device count is set once, before its backend starts, and an earlier
    # test of this session may have started it with another count
    proc = subprocess.run([sys.executable, "-m", "geosim", "live", "run", "--technique", "data", "--model", "tiny",
                           "--steps", "3", "--json"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # one document: json.loads refuses two
    jsonschema.validate(doc, schema_of("live run"))


def test_what_is_not_run_here_is_named_with_why():
    assert set(NOT_RUN_HERE) <= set(json_commands())
