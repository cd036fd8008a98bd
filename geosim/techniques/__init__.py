"""The techniques: one module each, found by name. Adding a technique is adding one file.

A technique module defines NAME, DESCRIPTION and
build(cluster, model, workload, params[, options]) -> geosim.sim.schedule.Schedule.
Modules whose names start with an underscore are shared helpers, not techniques.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from functools import cache
from types import ModuleType

from geosim.errors import GeosimError

STUDY_ORDER = ("data", "zero2", "shard", "pipeshard")  # the study's four, in its order


@cache
def _modules() -> dict[str, ModuleType]:
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        found[module.NAME] = module
    return found


def technique_names() -> list[str]:
    names = list(_modules())
    return [n for n in STUDY_ORDER if n in names] + sorted(n for n in names if n not in STUDY_ORDER)


def get_technique(name: str) -> ModuleType:
    modules = _modules()
    if name not in modules:
        raise GeosimError(f"unknown technique {name!r} (known: {', '.join(technique_names())})", key="technique")
    return modules[name]


def build_schedule(name: str, cluster, model, workload, params, options: dict | None = None):
    module = get_technique(name)
    if "options" in inspect.signature(module.build).parameters:
        return module.build(cluster, model, workload, params, options=options)
    return module.build(cluster, model, workload, params)
