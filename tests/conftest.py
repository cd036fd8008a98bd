"""Hypothesis profiles: `default` (quick, fixed seed) for a developer's run, `ci` (fixed seed,
1,000 property examples, 2,000 scenario fuzz examples) selected by HYPOTHESIS_PROFILE=ci, which
.ci/run sets. Tests read their example counts from the loaded profile (tests/test_fuzz.py,
tests/test_properties.py), so one variable sizes the whole suite."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# calibrate/, live/ and scenarios/ install as geosim.calibrate, geosim.live, geosim.scenarios
# (pyproject's package-dir). An editable install made from another checkout maps those names
# to that checkout; the tests must exercise the checkout they live in, so map them here.
ROOT = Path(__file__).resolve().parents[1]
for _sub in ("calibrate", "live", "scenarios"):
    _name, _dir = f"geosim.{_sub}", ROOT / _sub
    if _name not in sys.modules and (_dir / "__init__.py").exists():
        _spec = importlib.util.spec_from_file_location(_name, _dir / "__init__.py", submodule_search_locations=[str(_dir)])
        _module = importlib.util.module_from_spec(_spec)
        sys.modules[_name] = _module
        _spec.loader.exec_module(_module)

# Hypothesis draws some numbers (5%) from the constants in the source of every local module that
# is loaded (hypothesis.internal.conjecture.providers: the pool grows whenever sys.modules does).
# Modules geosim imports lazily, inside functions, would make the examples a property test draws
# depend on which tests ran before it (the CI profile's faster-GPU property failed only after
# tests/test_fuzz.py or tests/test_network_models.py, which import such modules). Importing them
# all here fixes the pool before the first example: the examples then depend on what is collected,
# never on the order. Not the JAX-backed training modules: importing jax here would change what
# other tests see (XLA_FLAGS, the sweep's fork check); tests that need them import them at
# collection.
_HEAVY = ("geosim.live.train.model", "geosim.live.train.techniques", "geosim.live.train.alpa_backend")


def _import_the_checkout(package: str) -> None:
    import pkgutil

    try:
        module = importlib.import_module(package)
    except ImportError:  # an optional extra that is not installed
        return
    for info in pkgutil.iter_modules(getattr(module, "__path__", []), package + "."):
        if info.name.endswith(".__main__") or info.name.startswith(_HEAVY):
            continue
        _import_the_checkout(info.name)


for _package in ("geosim", "geosim.calibrate", "geosim.live", "geosim.scenarios"):
    _import_the_checkout(_package)

_COMMON = dict(deadline=None, derandomize=True, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
settings.register_profile("default", max_examples=12, **_COMMON)
settings.register_profile("ci", max_examples=1000, **_COMMON)
# searching for new counterexamples: random seeds, many examples (HYPOTHESIS_PROFILE=search)
settings.register_profile("search", max_examples=1000, **{**_COMMON, "derandomize": False})
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# the fuzz suite's scenario examples by profile; other targets run a share of it (tests/test_fuzz.py)
FUZZ_EXAMPLES = {"default": 150, "ci": 2000, "search": 2000}


def fuzz_examples(share: float = 1.0) -> int:
    return max(10, round(FUZZ_EXAMPLES.get(settings._current_profile, 150) * share))


def examples(full: int, quick: int) -> int:
    """A property test's example count: `full` under the ci and search profiles (what .ci/run's whole
    suite runs), `quick` under the default profile (a developer's run and the quick tier). Only for
    properties that still hold meaning at the smaller count (each example a whole random cluster)."""
    return quick if settings._current_profile == "default" else full


def default_sigint() -> None:
    """preexec_fn for a child process a test interrupts: SIGINT back to its default disposition.

    A child inherits an ignored SIGINT (a shell starts a background job with SIGINT ignored:
    `nohup python -m pytest &`), and Python then installs no KeyboardInterrupt handler, so the
    test's SIGINT would do nothing. With the default restored the child behaves as under a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def assert_same_run(full, reduced) -> None:
    """Two engine runs of one schedule agree to the last bit on what a prediction reads: the
    shortcuts (symmetry, arithmetic collectives) must change nothing but how long they take."""
    assert reduced.iteration_end == full.iteration_end
    assert reduced.compute_s == full.compute_s
    assert reduced.overhead_s == full.overhead_s
    assert reduced.bytes_sent == full.bytes_sent
    assert reduced.transfers == full.transfers


# A toy technique, one file added to the registry for a test (tests/test_layout.py, tests/test_golden.py):
# what a new technique is, and what every command must take with no other file touched.
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
    pause_s: float = tunable(0.5, "seconds of pause per iteration", low=0.0, high=60.0, fit=(0.01, 60.0), unit="s",
                             source="a toy")


def build(case, settings):
    schedule = data.build(case, case.params.settings("data"))
    pause = Compute(0.0, "pause", kind="overhead", seconds=settings.pause_s)
    schedule.programs = {r: list(p) + [pause] for r, p in schedule.programs.items()}
    schedule.technique = NAME
    return schedule
'''


@pytest.fixture
def toy_technique(tmp_path):
    import textwrap

    import geosim.techniques as techniques

    (tmp_path / "toy.py").write_text(textwrap.dedent(TOY))
    techniques.__path__.append(str(tmp_path))
    techniques.refresh()
    yield "toy"
    techniques.__path__.remove(str(tmp_path))
    techniques.refresh()


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """`geosim ARGV` in this process: (exit code, stdout, stderr); argparse's own exits give their code."""
    import contextlib
    import io

    from geosim.cli import main  # imported here: the checkout's geosim is put first on sys.path above

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own errors
            code = exc.code
    if code == 130:  # the command took a Ctrl-C meant for pytest (its own exit code): give pytest it back
        raise KeyboardInterrupt
    return code, out.getvalue(), err.getvalue()
