"""A runtime's efficiency on a GPU generation (geosim/data/runtimes.toml, [RUNTIME.efficiency.GENERATION]):
reading and writing the entries, the estimate for a generation a runtime has none for, and how far an
estimate may be off. The entries belong to their runtimes (geosim/inputs/runtime.py reads them with the rest of a
runtime's table); this module holds what is done with them.
"""

from __future__ import annotations

from statistics import median

from geosim.base.errors import GeosimError
from geosim.base.generations import check_generation
from geosim.base.parameters import DEVICE_COMPUTE
from geosim.inputs.specs import EFFICIENCY_KINDS, Efficiency

DEVICE_COMPUTE_BY_KEY = {p.key: p for p in DEVICE_COMPUTE}
EFFICIENCY_NUMBERS = {"gemm_fraction": "gemm_fraction", "memory_fraction": "memory_fraction",
                      "gemm_half_us": "gemm_half_s"}
EFFICIENCY_KEYS = {*EFFICIENCY_NUMBERS, "fitted", "kind", "source", "refit"}


def efficiency_tables(value, source: str, where: str) -> tuple[tuple[str, Efficiency], ...]:
    """{ GENERATION = { gemm_fraction, memory_fraction, gemm_half_us | fitted = true, kind, source, refit } }
    -> ((generation, Efficiency), ...), every value checked (one line naming the key otherwise)."""
    if not isinstance(value, dict) or not value:
        raise GeosimError("must be a table of GENERATION = { gemm_fraction, memory_fraction, gemm_half_us, kind, "
                          "source }", source=source, key=where)
    out = []
    for generation, table in sorted(value.items()):
        at = f"{where}.{generation}"
        name = check_generation(generation, source, at)
        if not isinstance(table, dict):
            raise GeosimError("must be a table", source=source, key=at)
        for key in table:
            if key not in EFFICIENCY_KEYS:
                raise GeosimError(f"unknown key (expected one of: {', '.join(sorted(EFFICIENCY_KEYS))})",
                                  source=source, key=f"{at}.{key}")
        kind = table.get("kind")
        if kind not in EFFICIENCY_KINDS:
            raise GeosimError(f"must be one of {', '.join(EFFICIENCY_KINDS)}, got {kind!r}", source=source,
                              key=f"{at}.kind")
        text = table.get("source")
        if not isinstance(text, str) or not text.strip():
            raise GeosimError("must say where the entry comes from (a non-empty string)", source=source,
                              key=f"{at}.source")
        refit = table.get("refit", "")
        if not isinstance(refit, str) or (kind == "measured" and not refit.strip()):
            raise GeosimError("a measured entry must name the command that refits it", source=source,
                              key=f"{at}.refit")
        fitted = table.get("fitted", False)
        if not isinstance(fitted, bool):
            raise GeosimError(f"must be true or false, got {fitted!r}", source=source, key=f"{at}.fitted")
        numbers = {}
        if fitted:
            if any(k in table for k in EFFICIENCY_NUMBERS):
                raise GeosimError("fitted = true takes the parameters file's [compute] constants: give no numbers",
                                  source=source, key=f"{at}.fitted")
        else:
            for key, field in EFFICIENCY_NUMBERS.items():
                declared = DEVICE_COMPUTE_BY_KEY[key]
                v = table.get(key)
                lo, hi = declared.range if key == "gemm_half_us" else (1e-4, 1.0)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
                    raise GeosimError(f"must be a number in [{lo:g}, {hi:g}], got {v!r}", source=source,
                                      key=f"{at}.{key}")
                numbers[field] = declared.to_si(v)
        out.append((name, Efficiency(name, kind, text, refit=refit, **numbers)))
    return tuple(out)


def efficiency_table(entries) -> dict:
    """efficiency_tables' inverse: the TOML table a parameters file writes."""
    out = {}
    for generation, e in entries:
        row: dict = {"kind": e.kind, "source": e.source}
        if e.fractions is None:
            row["fitted"] = True
        else:
            row.update({key: DEVICE_COMPUTE_BY_KEY[key].from_si(getattr(e, field))
                        for key, field in EFFICIENCY_NUMBERS.items()})
        if e.refit:
            row["refit"] = e.refit
        out[generation] = row
    return out


def estimate(runtime: str, entries, shipped: list[Efficiency]) -> Efficiency:
    """The median of the measured and published entries (of this runtime, else of every shipped runtime's,
    `shipped`): what a runtime is assumed to reach on a generation nobody measured it on, labelled so."""
    own = [e for _, e in entries if e.kind != "estimated"]
    basis, whose = own, runtime
    if not own:
        basis = [e for e in shipped if e.kind != "estimated" and e.fractions is not None]
        whose = "every shipped runtime"
    numeric = [e for e in basis if e.fractions is not None]
    names = ", ".join(sorted({e.generation for e in basis})) or "none"
    if not numeric:  # only the parameters file's fit (alpa's): the fit is the estimate
        return Efficiency("", "estimated", f"{whose}'s fit on {names} (the parameters file's [compute])")
    middle = [median(getattr(e, f) for e in numeric) for f in ("gemm_fraction", "memory_fraction", "gemm_half_s")]
    return Efficiency("", "estimated", f"the median of {whose}'s measured and published entries ({names})", *middle)


def spread(entries: list[Efficiency]) -> float:
    """The ratio of the largest to the smallest large-GEMM fraction among these entries' measured and
    published ones (the global fit excluded): how far an estimated entry may be off, either way."""
    fractions = [e.gemm_fraction for e in entries if e.kind != "estimated" and e.fractions is not None]
    return max(fractions) / min(fractions) if len(fractions) > 1 else 1.0
