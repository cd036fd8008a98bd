"""Generated clusters far beyond the study's: N sites x M VMs per site x G GPUs per VM.

A generated scenario is named by a string, "scale:SITESxVMSxGPUS[:GPU[:nvlink]]"
(e.g. "scale:16x8x8:A30" = 1,024 A30s), so a sweep point stays a small picklable
dict and every worker rebuilds the same cluster from its name.

Topology: every pair of sites is joined by one WAN link (a full mesh, as FABRIC's
L2STS services give; TCP sockets). VMs of a site share the site's LAN (params.lan_*), over TCP;
NVLink hosts (":nvlink") are datacenter hosts: they reach each other inside a site over RDMA, a
NIC per GPU at DEFAULT_RDMA_NIC_GBPS. One site has no WAN link: its VMs share its LAN, as the same
cluster written as a scenario file does (a what-if on the WAN's RTT or bandwidth says there is none).
"""

from __future__ import annotations

import re

from geosim.base.errors import GeosimError
from geosim.inputs.scenario import MAX_GPUS_PER_HOST, Scenario, gpu_catalog, load_scenario, opens_kernel_window
from geosim.base.units import gbps_to_bps, ms_to_s
from geosim.inputs.specs import Cluster, Host, Link, Workload

PREFIX = "scale:"
DEFAULT_GPU = "A30"
DEFAULT_RTT_MS = 20.0
DEFAULT_BANDWIDTH_GBPS = 10.0
# a datacenter host's rail: a 200 Gbit/s InfiniBand NIC per GPU (HDR, NVIDIA's DGX A100 reference design:
# 8 ConnectX-6 for 8 GPUs; Azure's ND A100 v4 gives each GPU "its own dedicated 200 GB/s [sic: Gbit/s] HDR
# InfiniBand connection", learn.microsoft.com nda100-v4-series)
DEFAULT_RDMA_NIC_GBPS = 200.0
MAX_GPUS = 65_536  # a sanity bound: the engine simulates every rank
_NAME = re.compile(r"^scale:(\d{1,9})x(\d{1,9})x(\d{1,9})(?::([A-Za-z0-9_.-]{1,40}))?(?::(pcie|nvlink))?$")


def is_scale_name(name: str) -> bool:
    return name.startswith(PREFIX)


def scale_name(sites: int, vms_per_site: int, gpus_per_vm: int, gpu: str = DEFAULT_GPU, intra_host: str = "pcie") -> str:
    name = f"{PREFIX}{sites}x{vms_per_site}x{gpus_per_vm}:{gpu}"
    return name + (":nvlink" if intra_host == "nvlink" else "")


def make_cluster(sites: int, vms_per_site: int, gpus_per_vm: int, gpu: str = DEFAULT_GPU, *,
                 rtt_ms: float = DEFAULT_RTT_MS, bandwidth_gbps: float = DEFAULT_BANDWIDTH_GBPS,
                 intra_host: str = "pcie", name: str | None = None) -> Cluster:
    for what, value in (("sites", sites), ("vms_per_site", vms_per_site), ("gpus_per_vm", gpus_per_vm)):
        if value < 1:
            raise GeosimError(f"must be >= 1, got {value}", key=what)
    if sites * vms_per_site < 2:
        raise GeosimError("a generated cluster needs at least 2 VMs (one VM has no network to sweep)", key="vms_per_site")
    if gpus_per_vm > MAX_GPUS_PER_HOST:  # the bound a scenario file's host has: the same on both roads
        raise GeosimError(f"at most {MAX_GPUS_PER_HOST} GPUs per host (VM), as in a scenario file; got {gpus_per_vm}",
                          key="gpus_per_vm")
    total = sites * vms_per_site * gpus_per_vm
    if total > MAX_GPUS:
        raise GeosimError(f"{total} GPUs is more than {MAX_GPUS}", key="gpus_per_vm")
    catalog = gpu_catalog()
    if gpu not in catalog:
        raise GeosimError(f"unknown GPU {gpu!r} (known: {', '.join(catalog)})", key="gpu")
    card = catalog[gpu]
    datacenter = intra_host == "nvlink"  # NVLink hosts talk RDMA inside their site, a NIC per GPU
    hosts = tuple(Host(f"s{s}v{v}", f"site{s}", (card,) * gpus_per_vm, intra_host,
                       "per-gpu" if datacenter else "shared", "rdma" if datacenter else "tcp",
                       gbps_to_bps(DEFAULT_RDMA_NIC_GBPS) if datacenter else None,
                       kernel_window=opens_kernel_window(f"site{s}", None))
                  for s in range(sites) for v in range(vms_per_site))
    links = tuple(Link(f"site{a}", f"site{b}", ms_to_s(rtt_ms), gbps_to_bps(bandwidth_gbps))
                  for a in range(sites) for b in range(a + 1, sites))
    return Cluster(name=name or scale_name(sites, vms_per_site, gpus_per_vm, gpu, intra_host), hosts=hosts, links=links,
                   source=name or "<generated>")


def default_workload(sites: int, vms_per_site: int, gpus_per_vm: int,
                     microbatches: int = Workload.microbatches) -> dict:
    """One sequence per GPU per microbatch: the smallest batch that every technique can
    split (data parallelism needs each microbatch divisible over all GPUs)."""
    return {"global_batch": sites * vms_per_site * gpus_per_vm * microbatches, "microbatches": microbatches}


def scale_scenario(name: str) -> Scenario:
    match = _NAME.match(name)
    if not match:
        shown = name if len(name) <= 60 else f"{name[:40]}... ({len(name):,} characters)"
        raise GeosimError("a generated scenario is named scale:SITESxVMSxGPUS[:GPU[:nvlink]] with numbers of at most "
                          "9 digits, e.g. scale:16x8x8:A30", source=shown)
    sites, vms, gpus = (int(g) for g in match.group(1, 2, 3))
    gpu = match.group(4) or DEFAULT_GPU
    intra = match.group(5) or "pcie"
    try:
        cluster = make_cluster(sites, vms, gpus, gpu, intra_host=intra, name=name)
    except GeosimError as exc:
        raise GeosimError(exc.problem, source=name, key=exc.key) from None
    return Scenario(cluster, default_workload(sites, vms, gpus), {})


def load_any_scenario(name_or_path: str) -> Scenario:
    """What every command's --scenario reads: a generated cluster's name (scale:3x4x8:H100), a
    built-in scenario's name or a scenario file."""
    return scale_scenario(name_or_path) if is_scale_name(str(name_or_path)) else load_scenario(name_or_path)
