"""Finding the modules of a package that extend it: techniques, network backends, subcommands and live
implementations are each one file, found by name. Every registry asks this one function, so the rule
is written once: a module whose name starts with an underscore is a helper its neighbours share, not
an entry."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from types import ModuleType


def module_names(package: str, path: Iterable[str]) -> list[str]:
    """The full names of the entry modules in a package's directories (not imported), sorted."""
    return sorted(f"{package}.{info.name}" for info in pkgutil.iter_modules(list(path))
                  if not info.name.startswith("_"))


def modules(package: str, path: Iterable[str], *required: str) -> list[ModuleType]:
    """The package's entry modules, imported; with `required`, only those that define every one of
    these attributes (a module without them is a helper that happens to have a plain name)."""
    found = [importlib.import_module(name) for name in module_names(package, path)]
    return [m for m in found if all(hasattr(m, attr) for attr in required)]
