"""GPU device names (as jax or nvidia-smi report them) -> the GPU catalog's keys.

Live records name their GPU by its catalog key; a record written before the catalog knew its GPU
carries a table of placeholder figures with the device's name, which `with_catalog_gpus` replaces
by the catalog's entry once the catalog has it (the H200 records of 2026-11-26).
"""

from __future__ import annotations

import re

from geosim.scenario import gpu_catalog

# the speed figures live writes for a device the catalog lacks (to fill in by hand): never a datasheet
PLACEHOLDER_FIGURES = {"memory_bandwidth_gbs": 500, "fp32_tflops": 10, "fp16_tensor_tflops": 60, "pcie_gen": 3}


def _squash(text: str) -> str:
    return re.sub(r"[^A-Z0-9]", "", text.upper())


def catalog_gpu(device_name: str, memory_gib: float | None = None) -> str | None:
    """A device's name as jax or nvidia-smi says it ('NVIDIA A100-SXM4-40GB', 'Tesla T4',
    'Quadro RTX 6000', 'NVIDIA H200') -> its name in the GPU catalog (geosim/data/gpus.toml), or None.

    A catalog name's model (the part before '-', e.g. A100 in A100-40GB) must appear in the
    device name not followed by a digit (so A10 is not A100, L4 not L40S). Its variant words (PCIe,
    NVL, Ada: what follows the model, sizes aside) must appear too, and the key naming the most of
    the device's variant words wins ('NVIDIA H100 PCIe' is H100-PCIe, 'NVIDIA H100 80GB HBM3' the
    SXM H100). Several sizes of one model: the one the device name states (40GB), else the
    smallest that holds memory_gib."""
    catalog = gpu_catalog()
    name = _squash(device_name)
    spaced = re.sub(r"[^A-Z0-9]+", " ", device_name.upper())  # separators kept: "H100 80GB" is no H10080

    def model_pattern(key: str) -> str:  # RTX6000 also matches "RTX 6000"
        return " ?".join(re.escape(ch) for ch in _squash(key.split("-")[0])) + r"(?![0-9])"

    def variants(key: str) -> list[str]:
        return [_squash(word) for word in key.split("-")[1:] if not re.fullmatch(r"\d+GB", word.upper())]

    matches = [key for key in catalog if re.search(model_pattern(key), spaced)
               and all(word in name for word in variants(key))]
    if matches:
        most = max(len(variants(key)) for key in matches)
        matches = [key for key in matches if len(variants(key)) == most]
    if len(matches) <= 1:
        return matches[0] if matches else None
    stated = [key for key in matches if f"{catalog[key].memory_gib:g}GB" in name]
    if len(stated) == 1:
        return stated[0]
    if memory_gib is None:
        return None  # ambiguous: better a table with the device's own name than a wrong size
    # the smallest size that holds what the device reports (an allocator's limit is below the
    # physical size: XLA reserves 75% by default)
    fitting = sorted((key for key in matches if catalog[key].memory_gib >= 0.95 * memory_gib),
                     key=lambda key: catalog[key].memory_gib)
    return fitting[0] if fitting else max(matches, key=lambda key: catalog[key].memory_gib)



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
