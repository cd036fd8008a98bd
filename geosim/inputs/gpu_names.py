"""GPU device names (as jax or nvidia-smi report them) -> the GPU catalog's keys.

Live records name their GPU by its catalog key; a record written before the catalog knew its GPU
carries a table of placeholder figures with the device's name, which `with_catalog_gpus` replaces
by the catalog's entry once the catalog has it (the H200 records of 2026-11-26).
"""

from __future__ import annotations

from geosim.inputs.catalog_match import match_catalog
from geosim.inputs.scenario import gpu_catalog

# the speed figures live writes for a device the catalog lacks (to fill in by hand): never a datasheet
PLACEHOLDER_FIGURES = {"memory_bandwidth_gbs": 500, "fp32_tflops": 10, "fp16_tensor_tflops": 60, "pcie_gen": 3}


def catalog_gpu(device_name: str, memory_gib: float | None = None) -> str | None:
    """A device's name as jax or nvidia-smi says it -> its name in the GPU catalog (geosim/data/gpus.toml),
    or None (geosim.inputs.catalog_match.match_catalog says how)."""
    return match_catalog(device_name, gpu_catalog(), memory_gib)

def with_catalog_gpus(cluster: dict) -> dict:
    """A record's inline cluster with every placeholder GPU table whose device the catalog now knows
    replaced by the catalog's key (its hosts then name that key); anything else unchanged."""
    gpus = cluster.get("gpus")
    if not isinstance(gpus, dict):
        return cluster
    renamed = {}
    for key, table in gpus.items():
        if (isinstance(table, dict) and isinstance(table.get("name"), str)
                and all(table.get(k) == v for k, v in PLACEHOLDER_FIGURES.items())
                and set(table) <= {"name", "memory_gib", *PLACEHOLDER_FIGURES}):
            found = catalog_gpu(table["name"], table.get("memory_gib"))
            if found is not None:
                renamed[key] = found
    if not renamed:
        return cluster
    out = dict(cluster, gpus={k: v for k, v in gpus.items() if k not in renamed})
    if not out["gpus"]:
        del out["gpus"]
    hosts = cluster.get("hosts")
    if isinstance(hosts, list):
        out["hosts"] = [dict(h, gpus=[renamed.get(g, g) for g in h["gpus"]])
                        if isinstance(h, dict) and isinstance(h.get("gpus"), list) else h for h in hosts]
    return out
