"""A technique's tunables: a frozen dataclass whose fields say how they are read and fitted.

Each technique module defines `Settings` with fields made by `tunable(...)` (written to and
read from the parameters file under [NAME], checked against their range or choices, and
offered to the fitter where `fit` gives a range) or `option(...)` (per run only: the planner
or a caller passes it, the parameters file never holds it). Nothing outside the module lists
them: the params file, `--params` validation and the fitter discover them from here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from geosim.base.errors import GeosimError
from geosim.base.validate import is_finite


@dataclass(frozen=True)
class Tunable:
    help: str
    kind: type  # float | int | bool | str
    low: float | None = 0.0  # inclusive; None: unbounded
    high: float | None = None
    choices: tuple[str, ...] = ()
    fit: tuple[float, float] | None = None  # the range the fitter may move it in
    in_file: bool = True  # False: a per-run option, never in the parameters file
    unit: str = ""  # of the value (in the file and in the Settings alike: techniques' settings need no conversion)
    source: str = ""  # where the default comes from


def tunable(default, help: str, *, low: float | None = 0.0, high: float | None = None,
            choices: tuple[str, ...] = (), fit: tuple[float, float] | None = None, unit: str = "", source: str = ""):
    """A setting the parameters file holds under [NAME]: declared here once, with its unit, range
    (low, high, or choices), the range a fit may move it in, and the source of its default."""
    kind = type(default)
    return field(default=default, metadata={"tunable": Tunable(help, kind, low, high, tuple(choices), fit,
                                                               unit=unit, source=source)})


def option(default, help: str):
    """A per-run choice (the planner's layer split, a replica layout): not a parameter."""
    return field(default=default, metadata={"tunable": Tunable(help, object, None, None, (), None, in_file=False)})


def tunables(settings_cls) -> dict[str, Tunable]:
    return {f.name: f.metadata["tunable"] for f in dataclasses.fields(settings_cls) if "tunable" in f.metadata}


def file_tunables(settings_cls, inherited: set[str] = frozenset()) -> dict[str, Tunable]:
    """The tunables the parameters file holds under the technique's own table."""
    return {n: t for n, t in tunables(settings_cls).items() if t.in_file and n not in inherited}


def check_value(t: Tunable, value: Any, source: str, key: str):
    """The value converted to the tunable's type, or a GeosimError naming source and key."""
    if t.kind is object:
        return value
    if t.kind is bool:
        if not isinstance(value, bool):
            raise GeosimError(f"must be true or false, got {value!r}", source=source, key=key)
        return value
    if t.kind is str:
        if t.choices and value not in t.choices:
            raise GeosimError(f"must be one of {', '.join(t.choices)}, got {value!r}", source=source, key=key)
        if not isinstance(value, str):
            raise GeosimError(f"must be a string, got {value!r}", source=source, key=key)
        return value
    # is_finite: an int of any size is finite, but past 1e300 it is no float (a TOML integer is unbounded)
    if not is_finite(value) or abs(value) > 1e300:
        raise GeosimError(f"must be a finite number, got {value!r:.60}", source=source, key=key)
    if t.kind is int and int(value) != value:
        raise GeosimError(f"must be a whole number, got {value!r}", source=source, key=key)
    if (t.low is not None and value < t.low) or (t.high is not None and value > t.high):
        low = "-inf" if t.low is None else f"{t.low:g}"
        high = "inf" if t.high is None else f"{t.high:g}"
        raise GeosimError(f"must be in [{low}, {high}], got {value!r}", source=source, key=key)
    return t.kind(value)


def with_options(settings, options: dict | None, technique: str):
    """settings with the caller's per-run values, each checked like a file value."""
    if not options:
        return settings
    known = tunables(type(settings))
    changes = {}
    for name, value in options.items():
        if name not in known:
            raise GeosimError(f"{technique} has no setting {name!r} (it has: {', '.join(known) or 'none'})",
                              key=f"{technique}.{name}")
        changes[name] = check_value(known[name], value, "<options>", f"{technique}.{name}")
    return dataclasses.replace(settings, **changes)
