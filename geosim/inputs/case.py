"""One case to simulate: the slice, the model, the workload and the parameters, as one value.

Everything that predicts takes a Case rather than the four apart, so a study, a fit and a
sweep point all hand the simulator the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from geosim.inputs.specs import Cluster, Model, Params, Workload


# the network backend a case runs unless it names another (geosim.sim.network: fabric, tcp, alpha-beta,
# ideal). fabric prices each link by its transport (NVLink, RDMA, TCP sockets); on a cluster without
# NVLink or RDMA (the study's slices) it is the tcp model, to the bit
DEFAULT_NETWORK = "fabric"


@dataclass(frozen=True)
class Case:
    cluster: Cluster
    model: Model
    workload: Workload
    params: Params
    network: str = DEFAULT_NETWORK  # by name: the backend is found in geosim.sim.network

    def on(self, hosts: tuple[str, ...] | None) -> "Case":
        """The same case on a subset of the slice's VMs (all of them for None)."""
        return self if not hosts else replace(self, cluster=self.cluster.subset(tuple(hosts)))

    def with_(self, **changes) -> "Case":
        return replace(self, **changes)
