"""A scenario as a FABRIC slice request, built with fablib's own classes (the `fabric` extra).

One VM per scenario host at its site, sized for the model, with its GPUs as fablib
components, and one data-plane network of the service the study used: L2Bridge within a
site, L2STS between two sites, FABNetv4 (routed IPv4, one network per site) beyond two.

Building the request works offline (no token, no network): fablib's FablibManager in
offline mode, HOME pointed at an empty directory so no user config is read. Submitting it,
and everything after, needs the testbed and a FABRIC account (docs/guide/fabric.md).
"""

from __future__ import annotations

import ipaddress
import math
import os
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field

from geosim.base.errors import GeosimError, require
from geosim.base.sites import GPU_COMPONENT, get_site, network_service
from geosim.inputs.scenario import get_model, load_scenario
from geosim.inputs.specs import Model

DEFAULT_IMAGE = "default_ubuntu_24"  # Python 3.12: geosim needs >= 3.11 (Ubuntu 22.04 has 3.10)
DATAPLANE = "dataplane"
L2_SUBNET = ipaddress.ip_network("192.168.50.0/24")  # addresses we assign on L2Bridge/L2STS (no gateway)
NIC_MODEL = "NIC_Basic"  # a shared ConnectX-6 virtual function: what a 2-VM slice needs for 10-25 Gbit/s


@dataclass
class NodeRequest:
    name: str
    site: str
    cores: int
    ram_gb: int
    disk_gb: int
    image: str
    gpu_components: list[str]
    address: str | None  # planned data-plane address (L2 services); FABNetv4 assigns its own

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class SliceRequest:
    name: str
    nodes: list[NodeRequest]
    service: str  # L2Bridge | L2STS | FABNetv4
    scenario: str  # the scenario file it came from
    model: str
    sizing: str  # how cores/RAM/disk were chosen, for people
    subnet: str | None = field(default=None)

    def to_dict(self) -> dict:
        return {"name": self.name, "scenario": self.scenario, "model": self.model, "service": self.service,
                "subnet": self.subnet, "sizing": self.sizing, "nodes": [n.to_dict() for n in self.nodes]}


def size_vm(model: Model, gpus: int) -> tuple[int, int, int, str]:
    """(cores, RAM GB, disk GB, why). The study's VMs had 12 cores and 32 GB for gpt2m on 2 GPUs;
    larger models get host RAM for 16 bytes per parameter (fp32 weights, gradients and Adam's two
    moments, as a checkpoint or an offload needs them) twice over, and disk for the Python
    environment (CUDA jaxlib ~5 GB), the data set and a few checkpoints."""
    state_gb = 16 * model.num_params / 1e9
    cores = max(12, 6 * gpus)
    ram = max(32, 8 * math.ceil(2 * state_gb / 8))
    disk = max(100, 10 * math.ceil((60 + 4 * state_gb) / 10))
    why = (f"{model.name} ({model.num_params / 1e6:.0f} M parameters): max(12, 6/GPU) cores, RAM max(32 GB, 2 x 16 B/param), "
           f"disk max(100 GB, 60 GB + 4 checkpoints)")
    return cores, ram, disk, why


def request_from_scenario(path: str, model_name: str = "gpt2m", slice_name: str | None = None,
                          image: str = DEFAULT_IMAGE) -> SliceRequest:
    scenario = load_scenario(path)
    cluster = scenario.cluster
    model = get_model(model_name, scenario.models)
    sites = []
    for i, h in enumerate(cluster.hosts):
        sites.append(get_site(h.site, source=cluster.source, key=f"hosts[{i}].site").name)
    distinct = list(dict.fromkeys(sites))
    service = network_service(distinct[0], distinct[-1], len(distinct))
    nodes, why = [], ""
    for i, (h, site) in enumerate(zip(cluster.hosts, sites)):
        components = []
        for g in h.gpus:
            if g.name not in GPU_COMPONENT:
                raise GeosimError(f"FABRIC has no {g.name!r} GPU (it offers {', '.join(GPU_COMPONENT)})",
                                  source=cluster.source, key=f"hosts[{i}].gpus")
            components.append(GPU_COMPONENT[g.name])
        cores, ram, disk, why = size_vm(model, len(h.gpus))
        address = str(L2_SUBNET[i + 1]) if service != "FABNetv4" else None
        nodes.append(NodeRequest(h.name, site, cores, ram, disk, image, components, address))
    name = slice_name or f"geosim-{cluster.name.lower()}"
    return SliceRequest(name, nodes, service, str(path), model.name, why,
                        str(L2_SUBNET) if service != "FABNetv4" else None)


@contextmanager
def offline_fablib():
    """fablib's manager without FABRIC: no token, no network, no SSH; nothing of the user's is read."""
    require("fabrictestbed_extensions", extra="fabric", command="geosim fabric")
    from fabrictestbed_extensions.fablib.fablib import FablibManager

    saved = os.environ.get("HOME")
    with tempfile.TemporaryDirectory(prefix="geosim-fablib-") as home:
        os.environ["HOME"] = home
        try:
            yield FablibManager(offline=True, validate_config=False, no_ssh=True, project_id=str(uuid.uuid4()),
                                bastion_username="offline", log_file=os.path.join(home, "fablib.log"),
                                data_dir=os.path.join(home, "fablib"))
        finally:
            if saved is None:
                os.environ.pop("HOME", None)
            else:
                os.environ["HOME"] = saved


def online_fablib():
    """fablib's manager as the user configured it (~/.fabric/fabric_rc, the token): the real testbed."""
    require("fabrictestbed_extensions", extra="fabric", command="geosim fabric")
    from fabrictestbed_extensions.fablib.fablib import FablibManager

    return FablibManager()


def build_slice(request: SliceRequest, fablib):
    """The request as a fablib Slice (not submitted)."""
    fslice = fablib.new_slice(name=request.name)
    interfaces = []
    for n in request.nodes:
        node = fslice.add_node(name=n.name, site=n.site, cores=n.cores, ram=n.ram_gb, disk=n.disk_gb, image=n.image)
        for k, component in enumerate(n.gpu_components, start=1):
            node.add_component(model=component, name=f"gpu{k}")
        if request.service == "FABNetv4":
            node.add_fabnet(name=DATAPLANE, net_type="IPv4", nic_type=NIC_MODEL)
        else:
            interfaces.append(node.add_component(model=NIC_MODEL, name="nic").get_interfaces()[0])
    if request.service != "FABNetv4":
        fslice.add_l2network(name=DATAPLANE, interfaces=interfaces, type=request.service)
    return fslice


def read_back(fslice) -> dict:
    """What fablib holds for the slice: nodes, their components, the networks and their members.
    This (not the SliceRequest) is what --dry-run prints: exactly what would be submitted."""
    nodes = []
    for node in fslice.get_nodes():
        nodes.append({"name": node.get_name(), "site": node.get_site(), "cores": node.get_requested_cores(),
                      "ram_gb": node.get_requested_ram(), "disk_gb": node.get_requested_disk(),
                      "image": node.get_image(),
                      "components": [{"name": c.get_name(), "model": c.get_model()} for c in node.get_components()]})
    networks = []
    for net in fslice.get_networks():
        networks.append({"name": net.get_name(), "type": str(net.get_type()),
                         "interfaces": sorted(f"{i.get_node().get_name()}:{i.get_name()}" for i in net.get_interfaces())})
    return {"slice": fslice.get_name(), "nodes": nodes, "networks": networks}


def request_graphml(fslice) -> str:
    """The request as FABRIC's information model serializes it (GraphML): what submit() sends."""
    return fslice.get_fim_topology().serialize()
