"""Parameter draws from a fit's covariance: a prediction's range, a choice's robustness.

`geosim calibrate fit` writes [fitted.covariance] (the covariance of the logs of the global
parameters the records determine) into the parameters file. A draw is the fitted Params with
those parameters moved by one sample of that multivariate normal (log space, so values stay
positive); parameters on a physical bound (a fraction of peak <= 1) are clipped to it.
Re-running a prediction, a selection or a plan on each draw shows how much the answer
depends on what the fit could not pin down.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from geosim.base.errors import GeosimError
from geosim.inputs.params import BOUNDS, SCALARS, scalar_si, with_scalar
from geosim.inputs.specs import Cluster, Params

DEFAULT_DRAWS = 32
SCALAR_FIELDS = {key: (name, scale) for key, name, scale in SCALARS}


def has_covariance(params: Params) -> bool:
    return bool(params.fitted_covariance)


def _set(params: Params, name: str, factor: float) -> Params:
    """params with the parameter `name` (a file key) multiplied by factor, within its bounds."""
    if name in SCALAR_FIELDS:
        field_name, scale = SCALAR_FIELDS[name]
        value = scalar_si(params, name) * factor
        low, high = BOUNDS.get(name, (0.0, None))
        if high is not None and scale not in (None, int):
            value = min(value, high * scale)
        if scale is int:
            value = max(1, round(value))
        return with_scalar(params, name, value)
    if name.startswith("overhead.iteration_s."):
        which = name.rsplit(".", 1)[1]
        table = dict(params.iteration_overhead_s)
        for technique in (table if which == "shared" else (which,)):
            table[technique] = table.get(technique, 0.0) * factor
        return replace(params, iteration_overhead_s=table)
    technique, _, leaf = name.partition(".")
    current = getattr(params.settings(technique), leaf, None)
    if isinstance(current, (int, float)) and not isinstance(current, bool):
        value = current * factor
        return params.with_settings(technique, **{leaf: max(1, round(value)) if isinstance(current, int) else value})
    raise GeosimError(f"cannot draw parameter {name!r}", source=params.source, key="fitted.covariance")


def parameter_draws(params: Params, n: int = DEFAULT_DRAWS, seed: int = 0) -> list[Params]:
    """n Params drawn around `params` from its fit's covariance; GeosimError when it has none."""
    import numpy as np

    if not params.fitted_covariance:
        raise GeosimError("these parameters carry no fitted covariance ([fitted.covariance]): draws need a file "
                          "written by `geosim calibrate fit`", source=params.source, key="fitted.covariance")
    if n < 1:
        raise GeosimError(f"the number of draws must be >= 1, got {n}", source="--draws")
    names, matrix = params.fitted_covariance
    cov = np.array(matrix, dtype=float)
    # a covariance from a near-singular fit may have tiny negative eigenvalues: sample its PSD part
    w, v = np.linalg.eigh((cov + cov.T) / 2)
    root = v * np.sqrt(np.clip(w, 0.0, None))
    rng = np.random.default_rng(seed)
    out = []
    for z in rng.standard_normal((n, len(names))) @ root.T:
        drawn = params
        for name, dz in zip(names, z):
            drawn = _set(drawn, name, math.exp(float(dz)))
        out.append(drawn)
    return out


def varies(cluster: Cluster) -> bool:
    """Whether any link of the cluster declares bandwidth samples (a path that varies)."""
    return any(link.bandwidth_samples for link in cluster.links)


def link_draws(cluster: Cluster, n: int = DEFAULT_DRAWS, seed: int = 0) -> list[Cluster]:
    """n clusters, each link with samples set to one of them, drawn independently per link: a collective
    over many such links waits for the slowest of its draws, so stragglers come out of the simulation.
    A link without samples keeps its bandwidth (a constant link costs what it always did)."""
    import numpy as np

    if n < 1:
        raise GeosimError(f"the number of draws must be >= 1, got {n}", source="--draws")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        links = tuple(replace(link, bandwidth_bps=float(link.bandwidth_samples[rng.integers(len(link.bandwidth_samples))]))
                      if link.bandwidth_samples else link for link in cluster.links)
        out.append(replace(cluster, links=links))
    return out


@dataclass
class Range:
    """Percentiles of a figure over the draws."""

    low: float  # 5th percentile
    median: float
    high: float  # 95th percentile
    draws: int

    def describe(self, unit: str = "", scale: float = 1.0) -> str:
        return (f"{self.low / scale:.3g}..{self.high / scale:.3g}{unit} (90% of {self.draws} parameter draws, "
                f"median {self.median / scale:.3g}{unit})")


def spread(values: list[float]) -> Range:
    import numpy as np

    a = np.array(values, dtype=float)
    return Range(float(np.percentile(a, 5)), float(np.median(a)), float(np.percentile(a, 95)), len(values))


def robustness(choices: list[str], chosen: str) -> float:
    """The share of draws whose choice is `chosen`."""
    return sum(1 for c in choices if c == chosen) / len(choices) if choices else 0.0
