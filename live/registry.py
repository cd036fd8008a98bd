"""Which techniques run live: the simulator's one registry (geosim.techniques), narrowed to those
with a live implementation, a module of the same name in live/train/techniques/.

A technique is found by its simulator module; adding `live/train/techniques/<name>.py` (a
`TECHNIQUE` class) is what makes it run live, in `geosim live run` and on FABRIC. This module
imports neither jax nor the live implementations: the command line lists them before any work.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from geosim.base.discover import module_names
from geosim.base.errors import GeosimError
from geosim.techniques import is_low_communication, technique_names

IMPLEMENTATIONS = Path(__file__).resolve().parent / "train" / "techniques"
PACKAGE = "geosim.live.train.techniques"  # IMPLEMENTATIONS, as the installed package names it


def live_techniques() -> list[str]:
    """Every technique with a live implementation, in the registry's order (found without importing
    them: they import jax)."""
    implemented = {name.rsplit(".", 1)[1] for name in module_names(PACKAGE, [str(IMPLEMENTATIONS)])}
    return [n for n in technique_names() if n in implemented]


def synchronous() -> tuple[str, ...]:
    """The live techniques that compute the same synchronous step (same losses from the same seed)."""
    return tuple(n for n in live_techniques() if not is_low_communication(n))


def low_communication() -> tuple[str, ...]:
    """The live techniques that train locally and synchronize every H steps (they take options)."""
    return tuple(n for n in live_techniques() if is_low_communication(n))


def live_module(name: str) -> ModuleType:
    """A live technique's implementation (it imports jax): the one place its module path is built."""
    return importlib.import_module(f"{PACKAGE}.{check_live(name)}")


def placement(name: str):
    """How a live technique places its step on a device, for the memory model
    (geosim.sim.memory_layout.live_step): the simulator's module of the same name says it
    (`jax_placement`), so live and simulator share one placement and this imports no jax."""
    return importlib.import_module(f"geosim.techniques.{check_live(name)}").jax_placement


def check_live(name: str, key: str = "--technique") -> str:
    if name in live_techniques():
        return name
    if name in technique_names():
        raise GeosimError(f"{name!r} runs in the simulator only: no live implementation "
                          f"(live/train/techniques/{name}.py); live: {', '.join(live_techniques())}", key=key)
    raise GeosimError(f"unknown technique {name!r} (known: {', '.join(live_techniques())})", key=key)
