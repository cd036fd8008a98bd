"""On disk, geosim writes only what and where it was asked (issue 27): through the one atomic writer
(geosim/base/fileio.py: a temporary name from mkstemp, never a fixed `<file>.tmp` someone could plant as
a symbolic link), never into directories it made up, never outside the output directory because of
a name that came from a file. Each test here failed before the fix it covers."""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

import pytest
from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = (ROOT / "scenarios" / "utah-mass.toml").read_text()


def geosim(*args, cwd):
    """`geosim ARGS` in this process, in CWD (the same exit code, stdout and stderr, without a Python
    start and fablib's imports each): every command here is refused or a dry run that writes a file."""
    with contextlib.chdir(cwd):
        code, out, err = run_cli(list(args))
    return subprocess.CompletedProcess(list(args), code, out, err)


def test_a_planted_tmp_symlink_does_not_redirect_the_graphml(tmp_path):
    """The fabric code wrote `<file>.tmp` then renamed it: a symbolic link planted at x.graphml.tmp
    made --graphml x.graphml overwrite the link's target."""
    pytest.importorskip("fabrictestbed_extensions")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "x.graphml.tmp").symlink_to(victim)
    proc = geosim("fabric", "slice", "create", "--scenario", str(ROOT / "scenarios" / "utah-mass.toml"), "--dry-run",
                  "--graphml", "x.graphml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert victim.read_text() == "precious\n"
    graphml = tmp_path / "x.graphml"
    assert graphml.is_file() and not graphml.is_symlink() and "<graphml" in graphml.read_text()
    assert (tmp_path / "x.graphml.tmp").is_symlink()  # left alone, not followed


def test_graphml_into_a_missing_directory_is_refused_not_made(tmp_path):
    proc = geosim("fabric", "slice", "create", "--scenario", str(ROOT / "scenarios" / "utah-mass.toml"), "--dry-run",
                  "--graphml", "missing/dir/x.graphml", cwd=tmp_path)
    assert proc.returncode == 2 and "--graphml" in proc.stderr and "no such directory" in proc.stderr, proc.stderr
    assert not (tmp_path / "missing").exists()


def _escaping_scenario(tmp_path) -> Path:
    path = tmp_path / "escape.toml"
    path.write_text(SCENARIO.replace('name = "UTAH-MASS"', 'name = "../../../escaped"', 1))
    return path


def _wan_state(tmp_path) -> Path:
    state = tmp_path / "state.json"
    hosts = [{"address": f"10.77.0.{i + 1}", "interface": f"gw{i}", "namespace": f"gns{i}"} for i in range(2)]
    state.write_text(json.dumps({"id": "test", "hosts": hosts, "rtt_ms": [[0, 57.4], [57.4, 0]]}))
    return state


def test_a_scenario_name_cannot_write_outside_the_directory(tmp_path):
    """`fabric slice emulate` names its files after the slice, which is named after the scenario:
    a scenario named ../../../escaped wrote escaped.toml and escaped.slice.json above the working
    directory (and made a `geosim-..` directory to get there)."""
    work = tmp_path / "a" / "b" / "work"
    work.mkdir(parents=True)
    scenario, state = _escaping_scenario(tmp_path), _wan_state(tmp_path)
    before = sorted(p for p in tmp_path.rglob("*"))
    proc = geosim("fabric", "slice", "emulate", "--scenario", str(scenario), "--wan-state", str(state), cwd=work)
    assert proc.returncode == 2, proc.stderr
    assert "\n" not in proc.stderr.strip() and "cannot name a file" in proc.stderr
    assert sorted(p for p in tmp_path.rglob("*")) == before  # nothing written anywhere


def test_slice_create_default_path_is_checked_before_the_dry_run(tmp_path):
    work = tmp_path / "a" / "b" / "work"
    work.mkdir(parents=True)
    proc = geosim("fabric", "slice", "create", "--scenario", str(_escaping_scenario(tmp_path)), "--dry-run", cwd=work)
    assert proc.returncode == 2 and "cannot name a file" in proc.stderr, proc.stderr
    proc = geosim("fabric", "slice", "create", "--scenario", str(ROOT / "scenarios" / "utah-mass.toml"), "--dry-run",
                  "--name", "../up", cwd=work)
    assert proc.returncode == 2 and "--name" in proc.stderr, proc.stderr


def test_an_emulated_vm_name_cannot_leave_the_homes_directory(tmp_path):
    from geosim.base.errors import GeosimError
    from geosim.base.validate import inside

    assert inside(tmp_path, "vm1", "the VM name") == tmp_path / "vm1"
    for name in ("../vm1", "a/b", "..", ".", "", "x\0y"):
        with pytest.raises(GeosimError, match="cannot name a file"):
            inside(tmp_path, name, "the VM name")


def test_fabric_writes_go_through_the_one_atomic_writer():
    """No fixed temporary names left in the fabric code: every write is geosim.base.fileio.write_atomic."""
    for path in (ROOT / "geosim" / "fabric").glob("*.py"):
        text = path.read_text()
        assert '.tmp")' not in text and '".part"' not in text and "write_text(" not in text, path


def test_save_figure_writes_atomically(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from geosim.base.fileio import save_figure

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "plot.png.tmp").symlink_to(victim)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    save_figure(fig, tmp_path / "plot.png", dpi=50)
    plt.close(fig)
    assert victim.read_text() == "precious\n"
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png", "plot.png.tmp", "victim.txt"]
