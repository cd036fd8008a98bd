"""Published nccl-tests bus bandwidth against the fabric network backend's prediction.

Each row of geosim/data/nccl-tests-published.toml (a source, the hosts and GPUs, the NICs, the
collective, its size, NCCL_ALGO where the run forced one, the published busbw) becomes a cluster of
datacenter hosts (NVLink inside, RDMA between, a NIC per GPU) and a schedule of that one collective
over every GPU; the engine runs it on the fabric model (geosim/sim/network/fabric.py) and the busbw
follows from the simulated time as nccl-tests computes it. `tests/test_nccl_tests.py` holds the
median and worst error to the issue's bounds; docs/results/2026-11-28-fabrics-nccl.md lists the rows.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import partial
from importlib import resources

from geosim.inputs.params import default_params
from geosim.inputs.scenario import gpu_catalog, parse_toml
from geosim.sim.engine import run_schedule
from geosim.sim.network import _nccl
from geosim.sim.network.fabric import FabricNetwork
from geosim.sim.schedule import Collective, Device, Schedule
from geosim.inputs.specs import Cluster, Host, Params, Workload
from geosim.base.units import gbps_to_bps

DATA = "nccl-tests-published.toml"
OPS = {"allreduce": "allreduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter"}


@dataclass(frozen=True)
class Row:
    id: str
    source: str
    gpu: str
    hosts: int
    gpus_per_host: int
    op: str
    size_bytes: int
    published_busbw_gbs: float
    nic_gbps: float | None = None
    algorithm: str | None = None


@dataclass(frozen=True)
class Checked:
    row: Row
    predicted_busbw_gbs: float
    seconds: float
    algorithm: str
    protocol: str

    @property
    def error(self) -> float:
        """(predicted - published) / published."""
        return self.predicted_busbw_gbs / self.row.published_busbw_gbs - 1.0


def published_rows() -> list[Row]:
    text = resources.files("geosim.data").joinpath(DATA).read_text()
    return [Row(**table) for table in parse_toml(text, f"geosim/data/{DATA}")["rows"]]


def cluster_of(row: Row) -> Cluster:
    """The row's hosts: NVLink inside, RDMA between, one NIC per GPU at the row's rate."""
    gpu = gpu_catalog()[row.gpu]
    hosts = tuple(Host(f"node{i}", "dc", (gpu,) * row.gpus_per_host, "nvlink", "per-gpu", "rdma",
                       gbps_to_bps(row.nic_gbps) if row.nic_gbps else None) for i in range(row.hosts))
    return Cluster(name=row.id, hosts=hosts, links=())


def check_row(row: Row, params: Params | None = None) -> Checked:
    """Simulate the row's collective on the fabric model; its busbw as nccl-tests reports it."""
    params = params or default_params()
    cluster = cluster_of(row)
    devices = [Device(rank=h * row.gpus_per_host + i, host=host.name, local_index=i, gpu=gpu)
               for h, host in enumerate(cluster.hosts) for i, gpu in enumerate(host.gpus)]
    group = tuple(d.rank for d in devices)
    op = OPS[row.op]
    coll = Collective(op, group, float(row.size_bytes), "ring", ("nccl-tests",), label=row.op)
    schedule = Schedule("nccl-tests", devices, {d.rank: [coll] for d in devices}, {})
    factory = partial(FabricNetwork, algorithm=row.algorithm)
    run = run_schedule(schedule, cluster, params, Workload(), iterations=1, network=factory)
    seconds = run.iteration_end[0]
    choice = factory(_Still(), cluster, params, devices).nccl_choice(coll)
    busbw = _nccl.bus_bandwidth(op, row.size_bytes, len(group), seconds) / 1e9
    return Checked(row, busbw, seconds, choice.algorithm, choice.protocol)


class _Still:
    now = 0.0


def check_all(params: Params | None = None) -> list[Checked]:
    return [check_row(row, params) for row in published_rows()]


def summary(checked: list[Checked]) -> tuple[float, float]:
    """(median, worst) |error| over the rows."""
    errors = [abs(c.error) for c in checked]
    return statistics.median(errors), max(errors)


def main() -> None:
    """Print every row: source, published and predicted busbw, error, what NCCL's model ran."""
    checked = check_all()
    print(f"{'row':<26} {'op':<15} {'GPUs':>5} {'size':>9} {'published':>9} {'predicted':>9} {'error':>7}  NCCL")
    for c in checked:
        r = c.row
        print(f"{r.id:<26} {r.op:<15} {r.hosts * r.gpus_per_host:>5} {r.size_bytes / 2**20:>7.0f}Mi "
              f"{r.published_busbw_gbs:>9.1f} {c.predicted_busbw_gbs:>9.1f} {c.error:>+7.1%}  "
              f"{c.algorithm}/{c.protocol}{' (forced)' if r.algorithm else ''}")
    median, worst = summary(checked)
    print(f"{len(checked)} rows: median |error| {median:.1%}, worst {worst:.1%}")


if __name__ == "__main__":
    main()
