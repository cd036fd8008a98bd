"""live/ as three parts with no import loops: every geosim.live module imports, and the
graph of imports between them (read with ast from the files, imports inside functions
included) has no cycle; train/ never imports the network lab or the experiments."""

import ast
import importlib
from pathlib import Path

import pytest

LIVE = Path(__file__).resolve().parent.parent / "live"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(LIVE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["geosim", "live", *parts])


MODULES = {module_name(p): p for p in sorted(LIVE.rglob("*.py"))}


def imports_of(name: str, path: Path) -> set[str]:
    """The geosim.live modules `name` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package upwards
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import mod` imports the module pkg.mod when there is one, else names of pkg
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:  # `import geosim.live.wan.emulator as e` and the like
                target = target.rpartition(".")[0]
            if target and target.startswith("geosim.live") and target != name and target != "geosim.live":
                found.add(target)
    return found


GRAPH = {name: imports_of(name, path) for name, path in MODULES.items()}


def test_the_three_parts_exist():
    for part in ("train", "train.techniques", "wan", "experiments"):
        assert f"geosim.live.{part}" in MODULES
    assert "geosim.live.cli" in MODULES
    for old in ("probe", "validate", "wan_runs", "token_efficiency", "model", "train.train"):
        assert f"geosim.live.{old}" not in MODULES


def test_import_graph_has_no_cycles():
    state: dict[str, int] = {}  # 1 on the DFS stack, 2 done

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(GRAPH):
        if node not in state:
            visit(node, [node])


def test_layers_point_one_way():
    """train/ is the trainer alone; wan/ is the network lab (it may ask train/ for a node's
    address); experiments/ use both; nothing but cli.py imports experiments/."""
    for name, targets in GRAPH.items():
        if name.startswith("geosim.live.train"):
            assert not {t for t in targets if t.startswith(("geosim.live.wan", "geosim.live.experiments"))}, name
        if name.startswith("geosim.live.wan"):
            assert not {t for t in targets if t.startswith("geosim.live.experiments")}, name
    assert GRAPH["geosim.live.train.techniques.diloco"] >= {"geosim.live.train.lowcomm"}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_imports(name):
    module = importlib.import_module(name)
    assert Path(module.__file__).resolve() == MODULES[name].resolve()  # this checkout's file, not another tree's


def test_no_environment_variable_carries_options():
    for name, path in MODULES.items():
        assert "GEOSIM_LOWCOMM" not in path.read_text(), name
