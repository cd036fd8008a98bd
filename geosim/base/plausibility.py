"""Values that are valid but implausible: a warning, once, naming the file (or flag) and the key.

geosim.inputs.scenario refuses what cannot be (a negative RTT, NaN); this module warns about what no real
system has (a 10 Tbit/s WAN link, a 1 us round trip between two sites), because such a value is
usually a typo in units (Mbit/s for Gbit/s, s for ms) and it silently changes the answer. The ranges
and where they come from are in docs/guide/scenarios-params.md ("Plausible values"); a value outside
them still runs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from geosim.base.sites import FIBRE_KM_PER_MS, find_site, great_circle_km


@dataclass(frozen=True)
class Plausible:
    low: float
    high: float
    unit: str
    what: str  # what the range is of, as the warning says it
    why: str  # the source of the range (the guide's table repeats it)


# key (as scenario files and flags name it) -> the range real systems have
RANGES: dict[str, Plausible] = {
    "bandwidth_gbps": Plausible(0.01, 400.0, "Gbit/s", "a network link's bandwidth",
                                "FABRIC's NICs are 25-100 Gbit/s; the fastest production WAN waves are 400 Gbit/s "
                                "(ESnet6); below 10 Mbit/s nothing trains"),
    "rtt_ms": Plausible(0.01, 1000.0, "ms", "a round trip between VMs",
                        "a LAN round trip through NICs and a switch takes >= ~10 us; light in fibre needs ~200 ms "
                        "to the antipodes and a geostationary satellite hop ~600 ms"),
    "window_mib": Plausible(1 / 64, 1024.0, "MiB", "a TCP window",
                            "TCP's window scaling allows at most 1 GiB (RFC 7323); a socket buffer capped at 128 KiB "
                            "gave a measured 61.5 KiB, and under ~16 KiB a window is a few segments"),
    "memory_gib": Plausible(1.0, 300.0, "GiB", "a GPU's memory", "the largest GPUs of 2026 hold 288 GB (B300)"),
    "fp16_tensor_tflops": Plausible(1.0, 5000.0, "TFLOP/s", "a GPU's dense fp16 tensor rate",
                                    "B200: ~2,250 dense fp16 TFLOP/s; a T4: 65"),
    "bf16_tensor_tflops": Plausible(1.0, 5000.0, "TFLOP/s", "a GPU's dense bf16 tensor rate",
                                    "B200: ~2,250 dense bf16 TFLOP/s"),
    "tf32_tensor_tflops": Plausible(1.0, 2500.0, "TFLOP/s", "a GPU's dense TF32 tensor rate",
                                    "B200: ~1,125 dense TF32 TFLOP/s; an A10: 62.5"),
    "memory_bandwidth_gbs": Plausible(50.0, 16000.0, "GB/s", "a GPU's memory bandwidth",
                                      "a T4: 320 GB/s; B200: 8,000 GB/s"),
}

GUIDE = "docs/guide/scenarios-params.md, 'Plausible values'"
_warned: set[tuple[str, str]] = set()


def warn(source: str | None, key: str, problem: str) -> None:
    """One line on stderr, once per (source, key) in this process."""
    if (source or "", key) in _warned:
        return
    _warned.add((source or "", key))
    where = f"{source}: {key}" if source and not source.startswith("--") else (source or key)
    print(f"geosim: warning: {where}: {problem} ({GUIDE})", file=sys.stderr)


def check(value: float, source: str | None, key: str, name: str | None = None) -> None:
    """Warn if `value` of RANGES[name or the key's last part] is outside what real systems have."""
    name = name or key.rsplit(".", 1)[-1]
    r = RANGES.get(name)
    if r is None or r.low <= value <= r.high:
        return
    side = "below" if value < r.low else "above"
    warn(source, key, f"{value:g} {r.unit} for {r.what} is {side} anything real ({r.low:g}..{r.high:g} {r.unit}: "
                      f"{r.why}); check the units (it runs, and the answer follows this value)")


def check_light_speed(rtt_ms: float, site_a: str, site_b: str, source: str | None, key: str) -> None:
    """Warn if a round trip between two known FABRIC sites is faster than light in fibre between them."""
    a, b = find_site(site_a), find_site(site_b)
    if a is None or b is None or a.name == b.name:
        return
    km = great_circle_km(a, b)
    floor_ms = 2 * km / FIBRE_KM_PER_MS
    if rtt_ms < 0.9 * floor_ms:
        warn(source, key, f"{rtt_ms:g} ms between {a.name} and {b.name} ({km:,.0f} km apart) is faster than light "
                          f"in fibre, which needs at least {floor_ms:.3g} ms there; check the units")
