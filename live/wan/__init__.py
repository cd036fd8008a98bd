"""An emulated geo-distributed slice on one machine (issue 7).

N network namespaces, each with a TAP device `wan0`, joined by a user-space forwarder
that holds every frame for a one-way delay of RTT/2 (plus optional jitter and loss);
an optional bandwidth cap is a tbf qdisc on each host's egress. See README: the WAN emulator.

Kept light on purpose: `geosim` imports the CLI modules at startup, so nothing here
imports more than the standard library, and the heavy parts load on first use.
"""

from __future__ import annotations

__all__ = ["WanSlice", "up", "down", "current", "measure_rtt", "measure_throughput"]


def __getattr__(name):  # lazy re-exports: `from geosim.live.wan import WanSlice` costs nothing until used
    if name in ("WanSlice", "up", "down", "current"):
        from geosim.live.wan import emulator

        return getattr(emulator, name)
    if name in ("measure_rtt", "measure_throughput"):
        from geosim.live.wan import measure

        return getattr(measure, name)
    raise AttributeError(f"module 'live.wan' has no attribute {name!r}")
