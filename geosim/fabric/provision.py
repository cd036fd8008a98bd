"""Slices on FABRIC (create, configure, measure, delete) and the slice file that names their nodes.

`create` is resumable: an existing slice of the same name is reused, addresses already on an
interface are left alone, and the files are rewritten atomically at the end. Everything here
that talks to FABRIC (submit, get_slice, execute, delete) needs the testbed and an account:
none of it has run from this repository's CI (docs/guide/fabric.md says what has).

The slice file (JSON, written beside the realised scenario) says how to reach each node:
kind "fablib" (a FABRIC slice, by name) or "netns" (the WAN emulator's namespaces, which
stand in for VMs when rehearsing `geosim fabric calibrate` on one machine).
"""

from __future__ import annotations

import ipaddress
import json
import re
import time
from pathlib import Path
from typing import Callable

from geosim.base.errors import GeosimError
from geosim.base.fileio import write_atomic
from geosim.base.input_limits import read_json_file  # the one atomic writer (mkstemp: never a planted <file>.tmp)
from geosim.base.validate import inside, regular_input
from geosim.fabric.nodes import FablibNode, NetnsNode, Node
from geosim.fabric.request import DATAPLANE, L2_SUBNET, SliceRequest, build_slice
from geosim.inputs.scenario import load_scenario

SLICE_SUFFIX = ".slice.json"
UNMEASURED_BANDWIDTH_GBPS = 10.0


# -- the slice file -------------------------------------------------------------------------------


def slice_file_for(path: str | Path) -> Path:
    """A slice file, or the realised scenario beside which one was written."""
    path = Path(path)
    if path.name.endswith(SLICE_SUFFIX):
        return path
    candidate = path.with_name(path.stem + SLICE_SUFFIX)
    if candidate.is_file():
        return candidate
    raise GeosimError(f"not a slice file, and no {candidate.name} beside it (`geosim fabric slice create` writes one)",
                      source=str(path))


def read_slice_file(path: str | Path) -> dict:
    path = slice_file_for(path)
    try:
        doc = read_json_file(regular_input(path))
    except json.JSONDecodeError as exc:
        raise GeosimError(f"not valid JSON ({exc})", source=str(path)) from None
    if doc.get("kind") not in ("fablib", "netns"):
        raise GeosimError(f"must be 'fablib' or 'netns', got {doc.get('kind')!r}", source=str(path), key="kind")
    for i, n in enumerate(doc.get("nodes") or []):
        for key in ("name", "site", "address", "interface"):
            if not n.get(key):
                raise GeosimError("missing", source=str(path), key=f"nodes[{i}].{key}")
    if not doc.get("nodes"):
        raise GeosimError("no nodes", source=str(path), key="nodes")
    doc["_path"] = str(path)
    return doc


def nodes_from_slice_file(doc: dict, fablib=None) -> list[Node]:
    """The slice's nodes behind the execute/upload/download seam. fablib: a FablibManager for a
    FABRIC slice (None in a dry run: nothing is executed then)."""
    if doc["kind"] == "netns":
        return [NetnsNode(n["namespace"], n["name"], n["site"], n["address"], n["interface"], Path(n["home"]),
                          n["python"], gpus=n.get("gpus", 0)) for n in doc["nodes"]]
    fslice = fablib.get_slice(name=doc["slice"]) if fablib is not None else None
    return [FablibNode(fslice.get_node(name=n["name"]) if fslice else None, n["name"], n["site"], n["address"],
                       n["interface"], n.get("gpus", 0)) for n in doc["nodes"]]


def scenario_text(name: str, hosts: list[dict], links: list[dict], note: str) -> str:
    """A scenario file (scenarios/*.toml's format) for a realised slice: measured RTTs, and a
    bandwidth that `geosim fabric calibrate`'s probe replaces with a measurement."""
    q = json.dumps  # TOML basic strings are JSON strings
    lines = [f"# {note}", f"name = {q(name)}", ""]
    for h in hosts:
        lines += ["[[hosts]]", f"name = {q(h['name'])}", f"site = {q(h['site'])}",
                  "gpus = [" + ", ".join(q(g) for g in h["gpus"]) + "]", f"# data-plane address {h['address']}", ""]
    for link in links:
        lines += ["[[links]]", f"between = [{q(link['a'])}, {q(link['b'])}]", f"service = {q(link['service'])}"]
        lines.append(f"rtt_ms = {link['rtt_ms']:.4g}   # {link.get('how', 'measured')}"
                     if link.get("rtt_ms") is not None else "# rtt_ms left out: estimated from the sites' distance")
        lines += [f"bandwidth_gbps = {UNMEASURED_BANDWIDTH_GBPS:g}   # not measured yet: `geosim fabric calibrate` "
                  "probes it (probed.toml)", ""]
    return "\n".join(lines)


# -- FABRIC -------------------------------------------------------------------------------------


def parse_ping_rtt_ms(output: str) -> float | None:
    """The average of `ping -q`'s summary line (rtt min/avg/max/mdev = a/b/c/d ms)."""
    match = re.search(r"= [0-9.]+/([0-9.]+)/[0-9.]+/[0-9.]+ ms", output)
    return float(match.group(1)) if match else None


def create(request: SliceRequest, fablib, out: Path, log: Callable[[str], None], wait_timeout_s: int = 1800) -> dict:
    """Submit (or find) the slice, configure its data plane, measure RTTs, write the files."""
    fslice = _existing(fablib, request.name)
    if fslice is None:
        log(f"submitting slice {request.name} ({len(request.nodes)} VMs, {request.service}); this can take 10-30 min")
        fslice = build_slice(request, fablib)
        fslice.submit(wait=True, wait_timeout=wait_timeout_s, progress=False)
        fslice = fablib.get_slice(name=request.name)
    else:
        log(f"slice {request.name} exists (state {fslice.get_state()}): reusing it")
        if str(fslice.get_state()) not in ("StableOK", "ModifyOK"):
            fslice.wait_ssh(timeout=wait_timeout_s)
    nodes = []
    network = fslice.get_network(name=DATAPLANE) if request.service != "FABNetv4" else None
    for i, n in enumerate(request.nodes):
        node = fslice.get_node(name=n.name)
        if request.service == "FABNetv4":
            # add_fabnet made one FABNetv4 network per site; post-boot configuration addressed it
            iface = next(x for x in node.get_interfaces()
                         if x.get_network() is not None and str(x.get_network().get_type()) == "FABNetv4")
            address = str(iface.get_ip_addr())
        else:
            iface = node.get_interface(network_name=network.get_name())
            address = n.address
            present, _ = node.execute(f"ip -br addr show {iface.get_os_interface()}", quiet=True)
            if address not in present:  # re-running: the address is already there
                iface.ip_addr_add(addr=ipaddress.ip_address(address), subnet=L2_SUBNET)
            iface.ip_link_up()
        nodes.append({"name": n.name, "site": n.site, "address": address, "interface": iface.get_os_interface(),
                      "gpus": len(n.gpu_components), "management_ip": str(node.get_management_ip())})
    links = []
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            out_ping, _ = fslice.get_node(name=a["name"]).execute(f"ping -c 20 -i 0.2 -q {b['address']}", quiet=True)
            rtt = parse_ping_rtt_ms(out_ping)
            if rtt is None:
                raise GeosimError(f"{a['name']} cannot reach {b['name']} at {b['address']} over the data plane",
                                  source=request.name)
            links.append({"a": a["name"], "b": b["name"], "rtt_ms": rtt, "service": request.service,
                          "how": "ping between the VMs' data-plane addresses"})
            log(f"{a['name']} ({a['site']}) <-> {b['name']} ({b['site']}): {rtt:.2f} ms")
    return write_slice(request, nodes, links, out, kind="fablib")


def write_slice(request: SliceRequest, nodes: list[dict], links: list[dict], out: Path, kind: str,
                extra: dict | None = None) -> dict:
    """The realised scenario (out.toml) and the slice file (out.slice.json) beside it."""
    out = Path(out)
    scenario_path = out.with_suffix(".toml")
    gpus = {n.name: [g.removeprefix("GPU_").replace("TeslaT4", "T4") for g in n.gpu_components] for n in request.nodes}
    hosts = [{**n, "gpus": gpus[n["name"]]} for n in nodes]  # the GPUs asked for (an emulated node has none)
    write_atomic(scenario_path, scenario_text(request.name, hosts, links,
                                              f"Realised FABRIC slice {request.name} ({kind}), from {request.scenario}, "
                                              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."))
    load_scenario(scenario_path)  # what geosim predict will read must load
    doc = {"kind": kind, "slice": request.name, "scenario": scenario_path.name, "service": request.service,
           "request": request.to_dict(), "nodes": nodes, "links": links,
           "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(extra or {})}
    slice_path = out.with_name(out.stem + SLICE_SUFFIX) if out.suffix else Path(str(out) + SLICE_SUFFIX)
    write_atomic(slice_path, json.dumps(doc, indent=2, allow_nan=False))
    return {**doc, "_path": str(slice_path), "_scenario": str(scenario_path)}


def write_emulated_slice(request: SliceRequest, wan: dict, out: Path, python: str, homes: Path) -> dict:
    """A slice file whose nodes are the WAN emulator's hosts (wan: its state file, `geosim live wan up`),
    one per VM of the request, in order, each with a home directory of its own under `homes`."""
    hosts = wan.get("hosts") or []
    if len(hosts) != len(request.nodes):
        raise GeosimError(f"the emulated WAN has {len(hosts)} hosts, the slice {len(request.nodes)} VMs: bring it up "
                          f"with --host-count {len(request.nodes)}", source="--wan-state")
    nodes, links = [], []
    for h, n in zip(hosts, request.nodes):
        nodes.append({"name": n.name, "site": n.site, "address": h["address"], "interface": h["interface"], "gpus": 0,
                      "namespace": h["namespace"], "home": str(inside(homes, n.name, "the VM name")),
                      "python": python})
    for i, a in enumerate(nodes):
        for j in range(i + 1, len(nodes)):
            links.append({"a": a["name"], "b": nodes[j]["name"], "rtt_ms": float(wan["rtt_ms"][i][j]),
                          "service": request.service, "how": "the WAN emulator's configured RTT"})
    return write_slice(request, nodes, links, out, kind="netns", extra={"wan_id": wan.get("id")})


def delete(fablib, name: str, log: Callable[[str], None]) -> bool:
    fslice = _existing(fablib, name)
    if fslice is None:
        log(f"slice {name}: not found (already deleted?)")
        return False
    fslice.delete()
    log(f"slice {name}: deleted")
    return True


def _existing(fablib, name: str):
    try:
        return fablib.get_slice(name=name)
    except Exception as exc:  # fablib raises a plain Exception when no slice has the name
        if "not found" in str(exc).lower() or "no slice" in str(exc).lower():
            return None
        raise
