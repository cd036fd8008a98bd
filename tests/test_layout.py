"""The layout keeps its promises: layers import downwards only, a technique is one file."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

import geosim.techniques as techniques
from geosim.calibrate.free import default_free
from geosim.calibrate.cases import cases_from_records
from geosim.case import Case
from geosim.params import load_params, params_to_toml, write_params
from geosim.scenario import get_model, load_scenario
from geosim.sim.predict import predict
from geosim.studies.reference import study_records

ROOT = Path(__file__).resolve().parents[1]


def module_imports(path: Path, package_root: Path, prefix: str) -> tuple[str, set[str]]:
    """(module name, geosim modules it imports at module level)."""
    rel = path.relative_to(package_root).with_suffix("")
    parts = [prefix, *rel.parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    name = ".".join(parts)
    found = set()
    for node in ast.parse(path.read_text()).body:  # module level only: function-level imports are lazy on purpose
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return name, {m for m in found if m.startswith("geosim")}


def all_modules() -> dict[str, set[str]]:
    graph = {}
    for folder, prefix in ((ROOT / "geosim", "geosim"), (ROOT / "calibrate", "geosim.calibrate"),
                           (ROOT / "live", "geosim.live")):
        for path in folder.rglob("*.py"):
            name, imports = module_imports(path, folder, prefix)
            graph[name] = imports
    return {name: {i for i in imports if i in graph} for name, imports in graph.items()}


def test_nothing_under_geosim_imports_calibrate_or_live():
    offenders = []
    for path in (ROOT / "geosim").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):  # lazy imports count here: the core must not reach up at all
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for n in names:
                if n.split(".")[:2] in (["geosim", "calibrate"], ["geosim", "live"]) or n.split(".")[0] in (
                        "calibrate", "live"):
                    offenders.append(f"{path.relative_to(ROOT)}: {n}")
    assert offenders == []


def test_no_import_loops():
    graph = all_modules()
    state: dict[str, int] = {}
    cycles = []

    def visit(node, stack):
        state[node] = 1
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


TOY = '''
"""A toy technique: Data's schedule with a tunable per-iteration pause."""
from dataclasses import dataclass, replace

from geosim.sim.schedule import Compute
from geosim.techniques import data
from geosim.techniques._settings import tunable

NAME = "toy"
DESCRIPTION = "data parallel plus a pause"


@dataclass(frozen=True)
class Settings:
    pause_s: float = tunable(0.5, "seconds of pause per iteration", low=0.0, high=60.0, fit=(0.01, 60.0))


def build(case, settings):
    schedule = data.build(case, case.params.settings("data"))
    pause = Compute(0.0, "pause", kind="overhead", seconds=settings.pause_s)
    schedule.programs = {r: list(p) + [pause] for r, p in schedule.programs.items()}
    schedule.technique = NAME
    return schedule
'''


@pytest.fixture
def toy_technique(tmp_path):
    (tmp_path / "toy.py").write_text(textwrap.dedent(TOY))
    techniques.__path__.append(str(tmp_path))
    techniques.refresh()
    yield "toy"
    techniques.__path__.remove(str(tmp_path))
    techniques.refresh()


def test_a_technique_with_a_tunable_is_one_file(toy_technique, tmp_path):
    scenario = load_scenario("tacc-tacc")
    case = Case(scenario.cluster, get_model("gpt2m"), scenario.workload(epochs=1), load_params())
    base, toy = predict(case, "data"), predict(case, "toy")
    # predict: the pause is there, once per iteration
    assert toy.iteration_time_s == pytest.approx(base.iteration_time_s + 0.5, rel=1e-6)
    assert predict(case, "toy", options={"pause_s": 2.0}).iteration_time_s == pytest.approx(
        base.iteration_time_s + 2.0, rel=1e-6)
    # the parameters file: written, read back, checked
    path = tmp_path / "params.toml"
    write_params(case.params.with_settings("toy", pause_s=1.25), path)
    assert params_to_toml(load_params(path))["toy"] == {"pause_s": 1.25}
    bad = tmp_path / "bad.toml"
    bad.write_text("[toy]\npause_s = -1\n")
    with pytest.raises(Exception, match=r"toy.pause_s: must be in \[0, 60\]"):
        load_params(bad)
    # the fitter offers it, and only for runs of that technique
    cases = [c for c in cases_from_records(study_records(), "s") if c.technique == "data"]
    free = default_free(cases, case.params, extra=("toy.pause_s",))
    assert "toy.pause_s" not in [p.name for p in free]  # no toy run among the records
    toy_cases = [c.__class__(**{**c.__dict__, "technique": "toy"}) for c in cases]
    assert "toy.pause_s" in [p.name for p in default_free(toy_cases, case.params, extra=("toy.pause_s",))]


# Lines outside geosim/techniques/ that may still spell a technique's name: data, not decisions.
# file -> what the name is there (no module branches on a technique's name)
NAME_AS_DATA = {
    "geosim/report/plots.py": "colour table keyed by NAME",
    "calibrate/plot.py": "colour table keyed by NAME",
    "live/experiments/validate_report.py": "a colour table keyed by NAME",
    "geosim/studies/reference.py": "the study's reference names -> NAME",
    "geosim/cli/trace.py": "the default technique to trace",
    "calibrate/importers.py": "Alpa's parallel configs -> the study's technique names",
    "geosim/studies/convergence.py": "the default baseline of token efficiencies",
    "live/cli.py": "the default technique of a live run",
    "live/train/loop.py": "the default technique of a live run",
    "live/experiments/token_efficiency.py": "the default baseline, an example record",
    "live/experiments/wan_runs.py": "'data' here is the --data flag's field, not the technique",
    "live/train/lowcomm.py": "per-technique default options keyed by NAME",
    "live/experiments/validate.py": "the settings profiled on a grid, keyed by NAME.SETTING",
}
# decisions on a name still to be moved: the memory helper replaces live/train/memory.py by the
# simulator's memory model (issue 23)
PENDING = {"live/train/memory.py"}
BRANCH = ("==", "!=", "in", "not in")  # '"pipeshard" in x', 'x == "pipeshard"': a decision on the name


def test_no_module_outside_the_techniques_branches_on_a_technique_name():
    """No `x == "shard"`, `"data" in names` outside geosim/techniques/: what a technique is, its module says."""
    names = techniques.technique_names()
    offenders = []
    for folder in ("geosim", "calibrate", "live"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(("geosim/techniques/", "live/train/techniques/")) or rel in PENDING:
                continue
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                code = line.split("#", 1)[0]
                for name in names:
                    quoted = f'"{name}"'
                    if quoted not in code:
                        continue
                    branches = any(f"{op} {quoted}" in code or f"{quoted} {op}" in code for op in BRANCH)
                    if branches or rel not in NAME_AS_DATA:
                        offenders.append(f"{rel}:{number}: {line.strip()}")
    assert offenders == []
