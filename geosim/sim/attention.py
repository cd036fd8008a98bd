"""How fast a fused (flash) attention kernel runs on a GPU generation: its fraction of the tensor peak.

Flash attention does not reach a GEMM's fraction of the tensor peak: its softmax runs on the
non-tensor units between the two products, and at short sequences or a small head dimension its
tiles are few and thin (FlashAttention-2 on an A100 reaches 50-73% forward, 63% backward at best;
PyTorch SDPA's FlashAttention-2 kernel on an H100 about 30%). The curve per generation, its numbers
and their sources are data (geosim/data/attention-kernels.toml); the device check's records refit
it (python -m geosim.live.experiments.attention_kernels).

    fraction(S, d) = at[d] * S / (S + seq_half)

FLOPs are counted as the kernels' benchmarks count them: 4 S^2 d a sequence and head forward,
halved under the causal mask, and 2.5x that backward (the recomputed scores).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from geosim.base.errors import GeosimError

TABLE_FILE = "attention-kernels.toml"
KINDS = ("published", "measured", "estimated")


@dataclass(frozen=True)
class FlashCurve:
    generation: str
    kernel: str
    forward: tuple[tuple[int, float], ...]  # (head dim, long-sequence fraction of the tensor peak), ascending
    backward: tuple[tuple[int, float], ...]
    seq_half: float  # tokens at which the kernel reaches half its long-sequence fraction
    kind: str
    source: str

    def fraction(self, head_dim: float, seq_len: float, backward: bool) -> float:
        return interpolate(self.backward if backward else self.forward, head_dim) * seq_len / (seq_len + self.seq_half)


def interpolate(points: tuple[tuple[int, float], ...], head_dim: float) -> float:
    """Linear in log2 of the head dimension between the listed ones; flat outside them."""
    if head_dim <= points[0][0]:
        return points[0][1]
    for (d0, f0), (d1, f1) in zip(points, points[1:]):
        if head_dim <= d1:
            w = (math.log2(head_dim) - math.log2(d0)) / (math.log2(d1) - math.log2(d0))
            return f0 + w * (f1 - f0)
    return points[-1][1]


def curve_from_table(generation: str, table: dict, where: str = TABLE_FILE) -> FlashCurve:
    """One generation's table, checked: fractions in (0, 1], head dims whole and positive, seq_half >= 0."""

    def points(key):
        value = table.get(key)
        if not isinstance(value, dict) or not value:
            raise GeosimError("must be a table of head dimension = fraction", source=where, key=f"{generation}.{key}")
        out = []
        for d, f in value.items():
            if not str(d).isdigit() or int(d) < 1 or not isinstance(f, (int, float)) or not 0 < f <= 1:
                raise GeosimError(f"head dimension {d!r} = {f!r}: need a whole head dimension and a fraction in (0, 1]",
                                  source=where, key=f"{generation}.{key}")
            out.append((int(d), float(f)))
        return tuple(sorted(out))

    seq_half = table.get("seq_half")
    if not isinstance(seq_half, (int, float)) or not 0 <= seq_half < 1e7:
        raise GeosimError(f"must be a number of tokens in [0, 1e7), got {seq_half!r}", source=where,
                          key=f"{generation}.seq_half")
    kind = table.get("kind", "")
    if kind not in KINDS:
        raise GeosimError(f"must be one of {', '.join(KINDS)}, got {kind!r}", source=where, key=f"{generation}.kind")
    return FlashCurve(generation, str(table.get("kernel", "")), points("forward"), points("backward"),
                      float(seq_half), kind, str(table.get("source", "")))


def parse_table(text: str, where: str = TABLE_FILE) -> dict[str, FlashCurve]:
    tables = tomllib.loads(text)
    return {name: curve_from_table(name, table, where) for name, table in tables.items()}


@lru_cache(maxsize=1)
def flash_curves() -> dict[str, FlashCurve]:
    """The shipped table, by generation ('default' for a generation it does not hold)."""
    return parse_table(resources.files("geosim.data").joinpath(TABLE_FILE).read_text())


def flash_curve(generation: str) -> FlashCurve:
    curves = flash_curves()
    return curves.get(generation) or curves["default"]


def flash_fraction(generation: str, head_dim: float, seq_len: float, backward: bool) -> float:
    """The fused attention kernel's fraction of the tensor peak on this generation."""
    return flash_curve(generation).fraction(head_dim, seq_len, backward)
