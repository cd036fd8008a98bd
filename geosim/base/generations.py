"""GPU generations: every fact geosim holds about a generation, read from one file
(geosim/data/generations.toml). Code asks these facts; no generation's name is written in code.

A generation's efficiency under a runtime is the runtime's (geosim/data/runtimes.toml,
[RUNTIME.efficiency.GENERATION], read by geosim/inputs/runtime.py); what is here is the hardware's.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

from geosim.base.errors import GeosimError
from geosim.base.input_limits import loads_toml

SOURCE = "geosim/data/generations.toml"
DATA = resources.files("geosim.data").joinpath("generations.toml")  # the file generations() reads
KEYS = {"tf32_tensor_cores", "bf16", "jax_score_16bit_values", "source"}


@dataclass(frozen=True)
class Generation:
    name: str
    tf32_tensor_cores: bool  # fp32 matmuls may run on TF32 tensor cores (XLA's default does where they exist)
    bf16: bool  # the tensor cores take bfloat16; false: fp16 only
    # live's 16-bit step keeps this many 16-bit values per attention score (XLA's fusions for the generation);
    # None: the fp32 softmax and its 16-bit cast
    jax_score_16bit_values: float | None = None
    source: str = ""


def generation_from_table(name: str, table, source: str = SOURCE, prefix: str = "") -> Generation:
    """One generation's table, every key checked (one line naming the key otherwise)."""
    where = prefix + name
    if not isinstance(table, dict):
        raise GeosimError("must be a table", source=source, key=where)
    for key in table:
        if key not in KEYS:
            raise GeosimError(f"unknown key (expected one of: {', '.join(sorted(KEYS))})", source=source,
                              key=f"{where}.{key}")
    for key in ("tf32_tensor_cores", "bf16"):
        if not isinstance(table.get(key), bool):
            raise GeosimError(f"must be true or false, got {table.get(key)!r}", source=source, key=f"{where}.{key}")
    values = table.get("jax_score_16bit_values")
    if values is not None and (isinstance(values, bool) or not isinstance(values, (int, float))
                               or not 0.0 < values <= 16.0):
        raise GeosimError(f"must be a number in (0, 16], got {values!r}", source=source,
                          key=f"{where}.jax_score_16bit_values")
    return Generation(name, table["tf32_tensor_cores"], table["bf16"],
                      None if values is None else float(values), str(table.get("source", "")))


@cache
def generations() -> dict[str, Generation]:
    """Every generation geosim knows, by its lower-case name."""
    text = DATA.read_text()
    return {name: generation_from_table(name, table) for name, table in loads_toml(text, SOURCE).items()}


def generation(name: str) -> Generation | None:
    """A generation's facts, or None for a device that is not a GPU of a known generation (a CPU share)."""
    return generations().get(name)


def check_generation(name, source: str, key: str) -> str:
    """A GPU's generation as a scenario names it: one of generations.toml's, lower case."""
    if not isinstance(name, str) or name.lower() not in generations():
        raise GeosimError(f"unknown GPU generation {name!r} (known: {', '.join(generations())}; add one to {SOURCE})",
                          source=source, key=key)
    return name.lower()
