"""What-if edits of a cluster: the same slice at another RTT, bandwidth or GPU type.

Shared by `predict --rtt-ms`, sweeps, crossover search and the planner, so "the
slice at 80 ms" means the same thing everywhere.
"""

from __future__ import annotations

import math
from dataclasses import replace

from geosim.base.errors import GeosimError
from geosim.inputs.scenario import gpu_catalog
from geosim.inputs.specs import Cluster
from geosim.base.units import bps_to_gbps, s_to_ms


def wan_links(cluster: Cluster) -> list:
    """The links a what-if changes: those crossing sites, else (one-site slices) every explicit link."""
    site_of = {h.name: h.site for h in cluster.hosts}
    crossing = [link for link in cluster.links if site_of.get(link.a, link.a) != site_of.get(link.b, link.b)]
    return crossing or list(cluster.links)


def _edit_wan_links(cluster: Cluster, what: str, **changes) -> Cluster:
    change = set(map(id, wan_links(cluster)))
    if not change:
        raise GeosimError(f"the scenario has no link between hosts whose {what} could change",
                          source=cluster.source, key="links")
    links = tuple(replace(link, **changes) if id(link) in change else link for link in cluster.links)
    return replace(cluster, links=links)


def with_rtt(cluster: Cluster, rtt_s: float) -> Cluster:
    if not math.isfinite(rtt_s) or rtt_s < 0 or rtt_s > 100.0:
        raise GeosimError(f"RTT must be in [0, 100000] ms, got {s_to_ms(rtt_s):g} ms", key="rtt_ms")
    return _edit_wan_links(cluster, "RTT", rtt_s=rtt_s, rtt_estimated=False)


def with_bandwidth(cluster: Cluster, bandwidth_bps: float) -> Cluster:
    if not math.isfinite(bandwidth_bps) or not 1e3 <= bandwidth_bps <= 1e14:
        raise GeosimError(f"bandwidth must be in [1e-06, 100000] Gbit/s, got {bps_to_gbps(bandwidth_bps):g} Gbit/s",
                          key="bandwidth_gbps")
    return _edit_wan_links(cluster, "bandwidth", bandwidth_bps=bandwidth_bps)


def with_gpu(cluster: Cluster, gpu_name: str) -> Cluster:
    """Every GPU of the cluster replaced by one type from the catalog."""
    catalog = gpu_catalog()
    if gpu_name not in catalog:
        raise GeosimError(f"unknown GPU {gpu_name!r} (known: {', '.join(catalog)})", key="gpu")
    gpu = catalog[gpu_name]
    hosts = tuple(replace(h, gpus=tuple(gpu for _ in h.gpus)) for h in cluster.hosts)
    return replace(cluster, hosts=hosts)
