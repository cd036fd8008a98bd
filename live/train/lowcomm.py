"""The options of the low-communication techniques (diloco, sparseloco): defaults, checks
and the line a record's note carries. Plain Python: the CLI validates them before JAX loads.

They travel as arguments: `geosim live run --inner-steps ...` -> Options.lowcomm -> the
technique's constructor (and, for multi-host runs, the same flags on every child's command
line or the same Options in every Ray worker).
"""

from __future__ import annotations

from geosim.errors import GeosimError

KEYS = ("replicas", "inner_steps", "outer_lr", "outer_momentum", "topk", "bits")
BITS = (1, 2, 4, 8, 32)
DEFAULTS = {"replicas": None, "inner_steps": 10, "outer_lr": 0.7, "outer_momentum": 0.9,
            "topk": 0.01, "bits": 2, "chunk": 4096}
# DiLoCo's paper: outer lr 0.7, Nesterov 0.9. SparseLoCo's: outer lr 1, no momentum.
OWN_DEFAULTS = {"diloco": {}, "sparseloco": {"outer_lr": 1.0, "outer_momentum": 0.0}}
SPARSE_SYNC = {"diloco": False, "sparseloco": True}  # whose sync sends top-k quantized values (topk, bits, chunk)


def given(options: dict | None) -> dict:
    """The options actually given (None = not given), checked; raises GeosimError naming the flag."""
    options = {k: v for k, v in (options or {}).items() if v is not None}
    unknown = set(options) - set(KEYS) - {"chunk"}
    if unknown:
        raise GeosimError(f"unknown low-communication option(s): {', '.join(sorted(unknown))}")
    for key in ("replicas", "inner_steps"):
        if key in options and options[key] <= 0:
            raise GeosimError(f"must be > 0, got {options[key]}", key="--" + key.replace("_", "-"))
    if "outer_lr" in options and not options["outer_lr"] > 0:
        raise GeosimError(f"must be > 0, got {options['outer_lr']:g}", key="--outer-lr")
    if "outer_momentum" in options and not 0 <= options["outer_momentum"] < 1:
        raise GeosimError(f"must be in [0, 1), got {options['outer_momentum']:g}", key="--outer-momentum")
    if "topk" in options and not 0 < options["topk"] <= 1:
        raise GeosimError(f"must be in (0, 1], got {options['topk']:g}", key="--topk")
    if "bits" in options and options["bits"] not in BITS:
        raise GeosimError(f"must be one of {', '.join(map(str, BITS))} (32: no quantization), got {options['bits']}",
                          key="--bits")
    return options


def effective(technique: str, options: dict | None = None) -> dict:
    """Defaults < the technique's own defaults < the options given."""
    return {**DEFAULTS, **OWN_DEFAULTS.get(technique, {}), **given(options)}


def note(technique: str, options: dict | None = None) -> str | None:
    """The settings a diloco / sparseloco run used (for the record's note)."""
    if technique not in OWN_DEFAULTS:
        return None
    o = effective(technique, options)
    text = (f"{technique}: H={o['inner_steps']}, replicas {o['replicas'] or 'one per host (2 on one host)'}, "
            f"outer sgd lr {o['outer_lr']:g}" + (f" nesterov {o['outer_momentum']:g}" if o["outer_momentum"] else ""))
    if SPARSE_SYNC[technique]:
        text += (f", top-k {o['topk']:g} of {o['chunk']}, " + ("fp32" if o["bits"] == 32 else f"{o['bits']}-bit")
                 + ", error feedback")
    return text
