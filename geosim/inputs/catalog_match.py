"""A GPU's name as a device, a record or a person writes it -> the GPU catalog's key: the one rule, used by
live's records (geosim/inputs/gpu_names.py) and by scenario files (a hand-written GPU the catalog knows takes the
catalog's generation, geosim/inputs/scenario.py). Takes the catalog as an argument, so either can call it."""

from __future__ import annotations

import re


def _squash(text: str) -> str:
    return re.sub(r"[^A-Z0-9]", "", text.upper())


def match_catalog(device_name: str, catalog: dict, memory_gib: float | None = None) -> str | None:
    """A device's name as jax or nvidia-smi says it ('NVIDIA A100-SXM4-40GB', 'Tesla T4',
    'Quadro RTX 6000', 'NVIDIA H200') -> its name in the GPU catalog (geosim/data/gpus.toml), or None.

    A catalog name's model (the part before '-', e.g. A100 in A100-40GB) must appear in the
    device name not followed by a digit (so A10 is not A100, L4 not L40S). Its variant words (PCIe,
    NVL, Ada: what follows the model, sizes aside) must appear too, and the key naming the most of
    the device's variant words wins ('NVIDIA H100 PCIe' is H100-PCIe, 'NVIDIA H100 80GB HBM3' the
    SXM H100). Several sizes of one model: the one the device name states (40GB), else the
    smallest that holds memory_gib."""
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
