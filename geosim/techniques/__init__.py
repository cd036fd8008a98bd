"""The techniques: one module each, found by name. Adding a technique is adding one file.

A technique module defines NAME, DESCRIPTION, a frozen `Settings` dataclass of its tunables
(geosim.techniques._settings; may be empty) and build(case, settings) -> Schedule. Optional
module attributes say what other modules need to know without naming it:
  LABEL            its name in tables and verdicts (default: NAME)
  LOW_COMMUNICATION  it synchronizes every H steps and needs more tokens for the same loss:
                   ranked on time to a target, never on time per epoch against synchronous training
  ON_REQUEST       runs only when asked by name (or 'all'), not among the defaults without --technique
  PIPELINED        its stages exchange activations point to point (pipeline bubbles, rendezvous)
  BUILDS_ON        techniques whose schedules it reuses (their settings affect it too)
  plan_variants(case, hosts, **choices)  the planner's per-technique choices (stage orders,
                   microbatches, splits) as (workload changes, options) pairs; default: one, ({}, None)
  plan_floor_s(case, hosts, workload, options)  a floor under the predicted total time (default 0)
  variant_label(hosts, workload, options) / option_kind(hosts, options)  how the planner names an option
  PLAN_FLAGS       `geosim plan`'s flags of its own, as data: ({"flag", "choices", "help"}, ...); plan_choices(args)
                   turns what they ask into plan_variants' keywords
  PLANNER          the name of a sibling module that holds the planner functions above (and PLAN_FLAGS,
                   plan_choices) instead of this one: Pipeshard's "_pipeshard_plan"
  layout_options(case, hosts, **layout)  the per-run options of a layout asked on the command line (its
                   keywords are the layout keys it takes: tensor, pipeline, ..., replica_per)
Modules whose names start with an underscore are shared helpers, not techniques.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from functools import cache
from types import ModuleType

from geosim.base.discover import modules as entry_modules
from geosim.base.errors import GeosimError
from geosim.inputs.structure import host_list
from geosim.techniques._settings import tunables, with_options
from geosim.base.parameters import number_text

STUDY_ORDER = ("data", "zero2", "shard", "pipeshard")  # the study's four, in its order


@dataclasses.dataclass(frozen=True)
class _NoSettings:
    pass


@cache
def _modules() -> dict[str, ModuleType]:
    return {module.NAME: module for module in entry_modules(__name__, __path__)}


def refresh() -> None:
    """Look for technique modules again (after __path__ gained a directory)."""
    _modules.cache_clear()


def technique_names() -> list[str]:
    names = list(_modules())
    return [n for n in STUDY_ORDER if n in names] + sorted(n for n in names if n not in STUDY_ORDER)


def default_techniques(*, synchronous: bool = False) -> list[str]:
    """What a command runs when no --technique is given: every technique found (a new file included)
    but those that run on request only (ON_REQUEST: FSDP), or only the synchronous ones (ranked on time
    per epoch: plan, select, sweep)."""
    return [n for n in technique_names() if not (synchronous and is_low_communication(n)) and not on_request(n)]


def on_request(name: str) -> bool:
    """Whether the technique runs only when asked for by name (its module's ON_REQUEST)."""
    return bool(getattr(get_technique(name), "ON_REQUEST", False))


def is_baseline(name: str) -> bool:
    """The technique token efficiencies are measured against (Data: BASELINE = True in its module)."""
    return bool(getattr(get_technique(name), "BASELINE", False))


def simulation_rate(name: str) -> float:
    """Counted units (geosim.cost) the technique's predictions simulate per CPU second: its module's
    SIMULATED_UNITS_PER_CPU_S, else the slowest any module declares."""
    modules = _modules()
    declared = [m.SIMULATED_UNITS_PER_CPU_S for m in modules.values() if hasattr(m, "SIMULATED_UNITS_PER_CPU_S")]
    module = modules.get(name)
    return getattr(module, "SIMULATED_UNITS_PER_CPU_S", None) or min(declared)


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


def label(name: str) -> str:
    return getattr(get_technique(name), "LABEL", name)


def is_low_communication(name: str) -> bool:
    return bool(getattr(get_technique(name), "LOW_COMMUNICATION", False))


def _planner_hook(name: str, attr: str):
    """A planner function of a technique: its module's own, or its planner module's where it names one
    (PLANNER: a sibling module holding the planner's search, as Pipeshard's), else None."""
    module = get_technique(name)
    if hasattr(module, attr):
        return getattr(module, attr)
    planner = getattr(module, "PLANNER", None)
    if planner:
        return getattr(importlib.import_module(f"{__name__}.{planner}"), attr, None)
    return None


def option_kind(name: str, hosts: tuple[str, ...], options: dict | None = None) -> str:
    """Technique and VMs only: what a change of latency flips between (not a variant's details)."""
    own = _planner_hook(name, "option_kind")
    return own(tuple(hosts), options) if own else f"{label(name)} on {host_list(hosts)}"


def variant_label(name: str, hosts: tuple[str, ...], workload, options: dict | None) -> str:
    own = _planner_hook(name, "variant_label")
    return own(tuple(hosts), workload, options) if own else option_kind(name, hosts)


def plan_variants(name: str, case, hosts: tuple[str, ...], **choices):
    """(workload changes, predict options) for each way the planner should try `name` on `hosts`; of the
    planner's `choices` (intra_stages, exhaustive, ...) each technique gets those its plan_variants takes."""
    own = _planner_hook(name, "plan_variants")
    if not own:
        yield {}, None
        return
    accepted = inspect.signature(own).parameters
    yield from own(case, tuple(hosts), **{k: v for k, v in choices.items() if k in accepted and v is not None})


def plan_floor_s(name: str, case, hosts: tuple[str, ...], workload, options: dict | None) -> float:
    own = _planner_hook(name, "plan_floor_s")
    return own(case, tuple(hosts), workload, options) if own else 0.0


def add_plan_arguments(parser) -> None:
    """`geosim plan`'s flags that belong to one technique, from each one's PLAN_FLAGS: data (flag, choices,
    help) this renders, so a technique declares its flag without writing argparse."""
    for name in technique_names():
        for spec in _planner_hook(name, "PLAN_FLAGS") or ():
            parser.add_argument(spec["flag"], choices=spec.get("choices"), help=spec["help"])


def plan_choices(args) -> dict:
    """The planner's choices those flags ask for (keyword arguments of the techniques' plan_variants)."""
    choices: dict = {}
    for name in technique_names():
        own = _planner_hook(name, "plan_choices")
        if own:
            choices.update(own(args))
    return choices


def layout_keys(name: str) -> tuple[str, ...]:
    """The layout keywords a technique takes (its module's layout_options' keywords: Pipeshard's tensor,
    pipeline, data, virtual, layer_split; the low-communication ones' replica_per); () for none."""
    module = get_technique(name)
    if not hasattr(module, "layout_options"):
        return ()
    return tuple(p for p in inspect.signature(module.layout_options).parameters if p not in ("case", "hosts"))


def takes_layout(name: str, key: str | None = None) -> bool:
    """Whether a technique takes a layout (any key, or `key`) the field's way."""
    keys = layout_keys(name)
    return bool(keys) if key is None else key in keys


def layout_options(name: str, case, hosts: tuple[str, ...], **layout) -> dict | None:
    """The technique's per-run options for a layout (its module's layout_options, given the keys it
    takes of those set), checked against the hosts asked; None where none of them applies to it."""
    mine = {k: v for k, v in layout.items() if v is not None and k in layout_keys(name)}
    return get_technique(name).layout_options(case, tuple(hosts), **mine) if mine else None


def build_schedule(name: str, case, options: dict | None = None):
    """The technique's schedule for the case, with its parameter-file settings and the caller's options."""
    module = get_technique(name)
    settings = with_options(case.params.settings(name), options, name)
    return module.build(case, settings)


def memory_first(name: str, case, options: dict | None = None):
    """The technique's schedule without programs, its memory and description only (its module's
    memory_first), refusing what build_schedule refuses; None where the technique's memory is known
    only from its programs (or it has no such function)."""
    module = get_technique(name)
    if not hasattr(module, "memory_first"):
        return None
    return module.memory_first(case, with_options(case.params.settings(name), options, name))


def reference_table() -> str:
    """The parameters reference's table of every technique's tunables (docs/reference/params.md), from
    each module's Settings: a new technique's row appears with its file."""

    rows = ["| key | unit | default | range | fit range | meaning | source |", "|---|---|---|---|---|---|---|"]
    for name in technique_names():
        cls = settings_class(name)
        parent = settings_parent(name)
        inherited = set(tunables(settings_class(parent))) if parent else set()
        defaults = cls()
        for leaf, t in tunables(cls).items():
            if leaf in inherited:
                continue
            default = getattr(defaults, leaf)
            if isinstance(default, str):
                shown = f'`"{default}"`'
            elif isinstance(default, (int, float, bool)):
                shown = number_text(default)
            else:
                shown = "by the run"
            if not t.in_file:
                allowed = "*per run*"
            elif t.choices:
                allowed = ", ".join(f"`{c}`" for c in t.choices)
            elif t.kind is bool:
                allowed = ""
            else:
                allowed = f"{'-inf' if t.low is None else number_text(t.low)} to {'inf' if t.high is None else number_text(t.high)}"
            fit = "" if t.fit is None else f"{number_text(t.fit[0])} to {number_text(t.fit[1])}"
            rows.append(f"| `{name}.{leaf}` | {t.unit} | {shown} | {allowed} | {fit} | {t.help} | {t.source} |")
    return "\n".join(rows) + "\n"
