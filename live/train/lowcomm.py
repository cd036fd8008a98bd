"""The options of a live low-communication run (diloco, sparseloco): the technique's own Settings
(geosim/techniques/<name>.py: the same names, the same defaults, and LIVE_DEFAULTS where a live run
needs another, with the reason there), checks, and the line a record's note carries. Plain Python:
the CLI validates them before JAX loads.

They travel as arguments: `geosim live run --inner-steps ...` -> Options.lowcomm -> the
technique's constructor (and, for multi-host runs, the same flags on every child's command
line or the same Options in every Ray worker).
"""

from __future__ import annotations

import dataclasses

from geosim.base.errors import GeosimError
from geosim.techniques import is_low_communication, settings_class, technique_names

# the options a live run takes, as its Settings name them (replicas: a per-run option there too)
KEYS = ("replicas", "inner_steps", "outer_lr", "outer_momentum", "topk_fraction", "bits")
FLAGS = {"replicas": "--replicas", "inner_steps": "--inner-steps", "outer_lr": "--outer-lr",
         "outer_momentum": "--outer-momentum", "topk_fraction": "--topk", "bits": "--bits"}
RENAMED = {"topk": "topk_fraction"}  # the name records and callers before 2026-11-27 used
BITS = (1, 2, 4, 8, 32)  # what live's quantizer packs (32: no quantization)


def takes_options(technique: str) -> bool:
    """A low-communication technique (its Settings hold the options); a name no technique has (an old record's): no."""
    return technique in technique_names() and is_low_communication(technique)


def defaults(technique: str) -> dict:
    """The technique's Settings defaults for the live options, live's own where the Settings give one; a
    sparse sync's chunk is the one its index bits address (2 ** index_bits values)."""
    cls = settings_class(technique)
    fields = {f.name: f.default for f in dataclasses.fields(cls)}
    values = {k: fields[k] for k in KEYS if k in fields}
    values.update(getattr(cls, "LIVE_DEFAULTS", {}))
    if "index_bits" in fields:
        values["chunk"] = int(round(2 ** fields["index_bits"]))
    return values


def given(options: dict | None) -> dict:
    """The options actually given (None = not given), checked; raises GeosimError naming the flag."""
    options = {RENAMED.get(k, k): v for k, v in (options or {}).items() if v is not None}
    unknown = set(options) - set(KEYS) - {"chunk"}
    if unknown:
        raise GeosimError(f"unknown low-communication option(s): {', '.join(sorted(unknown))}")
    for key in ("replicas", "inner_steps"):
        if key in options and options[key] <= 0:
            raise GeosimError(f"must be > 0, got {options[key]}", key=FLAGS[key])
    if "outer_lr" in options and not options["outer_lr"] > 0:
        raise GeosimError(f"must be > 0, got {options['outer_lr']:g}", key="--outer-lr")
    if "outer_momentum" in options and not 0 <= options["outer_momentum"] < 1:
        raise GeosimError(f"must be in [0, 1), got {options['outer_momentum']:g}", key="--outer-momentum")
    if "topk_fraction" in options and not 0 < options["topk_fraction"] <= 1:
        raise GeosimError(f"must be in (0, 1], got {options['topk_fraction']:g}", key="--topk")
    if "bits" in options and options["bits"] not in BITS:
        raise GeosimError(f"must be one of {', '.join(map(str, BITS))} (32: no quantization), got {options['bits']}",
                          key="--bits")
    return options


def effective(technique: str, options: dict | None = None) -> dict:
    """The technique's defaults (its Settings, live's own where they differ) < the options given."""
    return {**defaults(technique), **given(options)}


def note(technique: str, options: dict | None = None) -> str | None:
    """The settings a diloco / sparseloco run used (for the record's note)."""
    if not takes_options(technique):
        return None
    o = effective(technique, options)
    text = (f"{technique}: H={o['inner_steps']}, replicas {o['replicas'] or 'one per host (2 on one host)'}, "
            f"outer sgd lr {o['outer_lr']:g}" + (f" nesterov {o['outer_momentum']:g}" if o["outer_momentum"] else ""))
    if "topk_fraction" in o:  # a sparse sync: top-k quantized values
        text += (f", top-k {o['topk_fraction']:g} of {o['chunk']}, " + ("fp32" if o["bits"] == 32 else f"{o['bits']}-bit")
                 + ", error feedback")
    return text
