"""The techniques: one module each, found by name. Adding a technique is adding one file.

A technique module defines NAME, DESCRIPTION, a frozen `Settings` dataclass of its tunables
(geosim.techniques._settings; may be empty) and build(case, settings) -> Schedule. Optional
module attributes say what other modules need to know without naming it:
  PIPELINED        its stages exchange activations point to point (pipeline bubbles, rendezvous)
  BUILDS_ON        techniques whose schedules it reuses (their settings affect it too)
  plan_variants()  the planner's per-technique choices (stage orders, microbatches, splits)
Modules whose names start with an underscore are shared helpers, not techniques.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from functools import cache
from types import ModuleType

from geosim.errors import GeosimError
from geosim.techniques._settings import with_options

STUDY_ORDER = ("data", "zero2", "shard", "pipeshard")  # the study's four, in its order


@dataclasses.dataclass(frozen=True)
class _NoSettings:
    pass


@cache
def _modules() -> dict[str, ModuleType]:
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        found[module.NAME] = module
    return found


def refresh() -> None:
    """Look for technique modules again (after __path__ gained a directory)."""
    _modules.cache_clear()


def technique_names() -> list[str]:
    names = list(_modules())
    return [n for n in STUDY_ORDER if n in names] + sorted(n for n in names if n not in STUDY_ORDER)


def get_technique(name: str) -> ModuleType:
    modules = _modules()
    if name not in modules:
        raise GeosimError(f"unknown technique {name!r} (known: {', '.join(technique_names())})", key="technique")
    return modules[name]


def settings_class(name: str) -> type:
    return getattr(get_technique(name), "Settings", _NoSettings)


def settings_parent(name: str) -> str | None:
    """The technique whose Settings this one's extends: its inherited tunables live in that one's table."""
    mine = settings_class(name)
    for other in technique_names():
        theirs = settings_class(other)
        if other != name and theirs is not _NoSettings and theirs in mine.__mro__[1:]:
            return other
    return None


def is_pipelined(name: str) -> bool:
    return bool(getattr(get_technique(name), "PIPELINED", False))


def builds_on(name: str) -> tuple[str, ...]:
    return tuple(getattr(get_technique(name), "BUILDS_ON", ()))


def build_schedule(name: str, case, options: dict | None = None):
    """The technique's schedule for the case, with its parameter-file settings and the caller's options."""
    module = get_technique(name)
    settings = with_options(case.params.settings(name), options, name)
    return module.build(case, settings)
