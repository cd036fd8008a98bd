"""A Result -> a geosim run record (geosim/inputs/records.py), with the cluster it ran on."""

from __future__ import annotations

import os
import socket
from importlib import metadata

from geosim.inputs.records import RunRecord
from geosim.inputs.gpu_names import PLACEHOLDER_FIGURES, catalog_gpu  # noqa: F401 (catalog_gpu: where live looked it up)
from geosim.inputs.scenario import model_catalog


def unknown_gpu_table(device_name: str, memory_gib: float | None) -> dict:
    """A [gpus] table for a device the catalog does not have: its name and, when the device
    reports it, its memory; the speed figures are placeholders to fill in by hand (the
    record's note says so), as calibration cannot infer a datasheet."""
    return {"name": device_name, "memory_gib": round(memory_gib, 2) if memory_gib else 16.0, **PLACEHOLDER_FIGURES}


def software() -> dict:
    import platform

    versions = {"python": platform.python_version()}
    for name in ("jax", "jaxlib", "flax", "optax", "ray", "alpa", "geosim"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def cpu_gpu_table(devices_per_host: int) -> dict:
    """The GPU catalog has no CPU: describe one virtual CPU device as a [gpus.CPU] table.
    Nominal figures (a share of this host's cores at ~2.5 GHz x 32 fp32 FLOP/cycle, and of
    its memory), for the record to load as a scenario; calibration fits the real speed."""
    cores = os.cpu_count() or 1
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gib = 8.0
    share = max(devices_per_host, 1)
    fp32 = round(cores * 2.5e9 * 32 / 1e12 / share, 4)
    return {"CPU": {"name": f"CPU share ({cores} cores / {share} devices)", "architecture": "cpu",
                    "memory_gib": round(mem_gib / share, 2),
                    "memory_bandwidth_gbs": round(20.0 / share, 2), "fp32_tflops": fp32, "fp16_tensor_tflops": fp32,
                    "pcie_gen": 3}}


def inline_cluster(devices: dict, host_names: list[str] | None = None) -> dict:
    """This run's hosts in scenario-file form. Hosts share a site unless a scenario says
    otherwise (a probe's scenario file is the way to record the network between them)."""
    per_host = devices.get("per_host") or [devices["count"]]
    names = host_names or ([socket.gethostname()] if len(per_host) == 1 else [f"host{i}" for i in range(len(per_host))])
    cluster = {"name": "live", "hosts": []}
    if devices["platform"] == "gpu":
        kind = catalog_gpu(devices["kind"], devices.get("memory_gib"))
        if kind is None:
            kind = "GPU"  # not in the catalog: a table with the device's name, to fill in by hand
            cluster["gpus"] = {"GPU": unknown_gpu_table(devices["kind"], devices.get("memory_gib"))}
    else:
        kind = "CPU"
        cluster["gpus"] = cpu_gpu_table(max(per_host))
    for name, count in zip(names, per_host):
        cluster["hosts"].append({"name": name, "site": "local", "gpus": [kind] * count})
    return cluster


def build_record(result, opts, *, backend="jax", collective_impl="xla-cpu", scenario=None, host_names=None,
                 extra_note=None) -> RunRecord:
    measured = {"steps": len(result.step_times)}
    for key in ("total_time_s", "time_per_iteration_s", "tflops_per_gpu", "tokens_per_s", "peak_memory_gib", "compile_time_s",
                "fastest_iteration_s", "cpu_per_iteration_s", "load_before", "load_after"):
        value = getattr(result, key, None)
        if value is not None:
            measured[key] = round(float(value), 6)
    if getattr(result, "cores", None):
        measured["cores"] = int(result.cores)
    catalog = model_catalog().get(opts.model)
    dims = result.model_dims or None
    if catalog and dims and (dims["vocab"], dims["n_ctx"]) == (catalog.vocab, catalog.n_ctx):
        dims = None  # the catalog already says it
    notes = [f"data: {result.data}"] if result.data else []
    if result.losses:
        notes.append(f"loss {result.losses[0]:.4f} -> {result.losses[-1]:.4f}")
    if result.devices:
        d = result.devices
        notes.append(f"devices: {d['count']} x {d['platform']} ({d['kind']}) in {d['processes']} process(es)"
                     + (f", {d['stages']} stages" if d.get("stages") else ""))
        if d["platform"] == "cpu":
            notes.append("peak_memory_gib is the process's peak RSS")
        elif d.get("tf32_matmul") is not None:
            notes.append(f"fp32 matmuls on TF32 tensor cores: {'yes' if d['tf32_matmul'] else 'no'}")
    if extra_note:
        notes.append(extra_note)
    return RunRecord(
        technique=opts.technique, model=opts.model, status=result.status,
        scenario=scenario, cluster=None if scenario else inline_cluster(result.devices, host_names),
        model_dims=dims, workload=result.workload, measured=measured, source="live", backend=backend,
        collective_impl=collective_impl, error=result.error, note="; ".join(notes) or None,
        software={**software(), **({"tf32_matmul": result.devices["tf32_matmul"]}
                                   if (result.devices or {}).get("tf32_matmul") is not None else {})},
    )
