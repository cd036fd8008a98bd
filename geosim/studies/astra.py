"""The configuration ASTRA-sim 2.x was run with beside geosim, as geosim specs.

One 1 GiB (2^30 B) all-reduce, one chunk, ring per dimension. Links inside a host:
12 GB/s (12e9 B/s) and 10 us; between hosts: 1.25 GB/s and 20 ms one way, one NIC per
GPU. Hierarchical cases reduce-scatter inside the host, all-reduce across hosts (GPUs of
the same local index), all-gather inside the host; flat cases are one ring over hosts of
one GPU each. In geosim terms: every host at one site whose LAN is 10 Gbit/s with a
40 ms RTT (20 ms one way, host to host), NVLink at 96 Gbit/s with host.latency_us = 10,
per-GPU NICs, and the alpha-beta network backend.

Reference figures: ASTRA-sim 2.x, commit 518bd51, analytical congestion-unaware backend,
run with that configuration (simulated time of the all-reduce, ms).
"""

from __future__ import annotations

from dataclasses import dataclass

from geosim.inputs.params import default_params
from geosim.sim.schedule import Collective, Schedule
from geosim.inputs.specs import Cluster, Host, Params
from geosim.inputs.scenario import gpu_catalog
from geosim.techniques._base import devices_of

BUFFER_BYTES = 2**30
INTRA_HOST = dict(bytes_per_s=12e9, one_way_s=10e-6)
INTER_HOST = dict(bytes_per_s=1.25e9, one_way_s=20e-3)


@dataclass(frozen=True)
class AstraCase:
    name: str
    hosts: int
    gpus_per_host: int
    algorithm: str  # hierarchical | ring
    reference_ms: float  # ASTRA-sim's simulated time

    @property
    def gpus(self) -> int:
        return self.hosts * self.gpus_per_host


CASES = (
    AstraCase("2x2 hierarchical", 2, 2, "hierarchical", 558.995),
    AstraCase("64x16 hierarchical", 64, 16, "hierarchical", 2793.769),
    AstraCase("16x64 hierarchical", 16, 64, "hierarchical", 802.587),
    AstraCase("64x64 hierarchical", 64, 64, "hierarchical", 2723.845),
    AstraCase("flat 64 ring", 64, 1, "ring", 4211.143),
    AstraCase("flat 256 ring", 256, 1, "ring", 11911.276),
    AstraCase("flat 1024 ring", 1024, 1, "ring", 42636.310),
)
QUICK = ("2x2 hierarchical", "64x16 hierarchical", "flat 64 ring")


def case_named(name: str) -> AstraCase:
    return next(c for c in CASES if c.name == name)


def astra_params() -> Params:
    return default_params().with_values(
        nvlink_bps=INTRA_HOST["bytes_per_s"] * 8, intra_host_latency_s=INTRA_HOST["one_way_s"],
        # host -> site switch -> host is two LAN edges of a quarter RTT each
        lan_rtt_s=2 * INTER_HOST["one_way_s"], lan_bandwidth_bps=INTER_HOST["bytes_per_s"] * 8)


def astra_cluster(hosts: int, gpus_per_host: int) -> Cluster:
    gpu = gpu_catalog()["A100-80GB"]
    return Cluster(f"astra {hosts}x{gpus_per_host}", tuple(
        Host(f"h{i}", "dc", (gpu,) * gpus_per_host, intra_host="nvlink", nic="per-gpu") for i in range(hosts)), ())


def allreduce_schedule(cluster: Cluster, algorithm: str, nbytes: float = BUFFER_BYTES) -> Schedule:
    devices = devices_of(cluster)
    group = tuple(d.rank for d in devices)
    op = Collective("allreduce", group, nbytes, algorithm, ("allreduce",), "1 GiB all-reduce")
    return Schedule("allreduce", devices, {r: [op] for r in group}, dict.fromkeys(group, 0.0),
                    description=f"one {nbytes / 2**30:g} GiB {algorithm} all-reduce over {len(group)} GPUs")
