"""FABRIC's sites (geosim/data/fabric-sites.toml) and RTTs estimated from geography.

An estimate is the great-circle distance between two sites, inflated by a route factor
(fibre never runs straight, and FABRIC's L2 paths go through its backbone), at the speed
of light in fibre. The factor is fitted on the study's Table I: the only site-to-site RTTs
measured on FABRIC that geosim ships. Measured RTTs always win over the estimate; every
output that uses an estimate says so.

Standard library only: the scenario loader imports this when a link leaves out rtt_ms.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from geosim.base.errors import GeosimError

DATA_FILE = "fabric-sites.toml"
EARTH_RADIUS_KM = 6371.0088  # mean radius (IUGG)
FIBRE_KM_PER_MS = 299_792.458 / 1.468 / 1e3  # light in silica fibre (group index ~1.468): ~204 km per ms
SAME_SITE_RTT_MS = 0.1  # two VMs at one site over L2Bridge: Table I's TACC-TACC

# fablib's GPU component names and the GPU catalog's (geosim/data/gpus.toml) names for them
COMPONENT_GPU = {"GPU_RTX6000": "RTX6000", "GPU_TeslaT4": "T4", "GPU_A30": "A30", "GPU_A40": "A40"}
GPU_COMPONENT = {gpu: component for component, gpu in COMPONENT_GPU.items()}


@dataclass(frozen=True)
class Site:
    name: str
    city: str
    country: str
    lat: float
    lon: float
    gpus: tuple[str, ...]  # fablib component names, e.g. GPU_RTX6000; empty where not public
    aliases: tuple[str, ...]
    coords_source: str
    gpus_source: str

    @property
    def gpu_models(self) -> tuple[str, ...]:
        """The GPU catalog's names (RTX6000, T4, A30, A40) for the components offered here."""
        return tuple(COMPONENT_GPU[c] for c in self.gpus)

    def to_dict(self, sources: dict[str, dict]) -> dict:
        return {"name": self.name, "city": self.city, "country": self.country, "lat": self.lat, "lon": self.lon,
                "gpus": list(self.gpus), "gpu_models": list(self.gpu_models), "aliases": list(self.aliases),
                "coords_source": {"key": self.coords_source, **sources.get(self.coords_source, {})},
                "gpus_source": {"key": self.gpus_source, **sources.get(self.gpus_source, {})}}


def _check(condition: bool, problem: str, key: str) -> None:
    if not condition:
        raise GeosimError(problem, source=f"geosim/data/{DATA_FILE}", key=key)


@cache
def catalog_doc() -> dict:
    return tomllib.loads(resources.files("geosim.data").joinpath(DATA_FILE).read_text())


@cache
def site_catalog() -> dict[str, Site]:
    doc = catalog_doc()
    sources = doc.get("sources", {})
    sites = {}
    for name, t in doc["sites"].items():
        key = f"sites.{name}"
        for field in ("city", "country", "lat", "lon", "gpus", "coords_source", "gpus_source"):
            _check(field in t, "missing", f"{key}.{field}")
        _check(-90 <= t["lat"] <= 90 and -180 <= t["lon"] <= 180, "latitude/longitude out of range", key)
        for c in t["gpus"]:
            _check(c in COMPONENT_GPU, f"unknown GPU component {c!r} (known: {', '.join(COMPONENT_GPU)})", f"{key}.gpus")
        for src in (t["coords_source"], t["gpus_source"]):
            _check(src == "not-public" or src in sources, f"source {src!r} is not in [sources]", key)
        sites[name] = Site(name, t["city"], t["country"], float(t["lat"]), float(t["lon"]), tuple(t["gpus"]),
                           tuple(t.get("aliases", ())), t["coords_source"], t["gpus_source"])
    return sites


def sources() -> dict[str, dict]:
    return dict(catalog_doc().get("sources", {}))


def find_site(name: str) -> Site | None:
    """A site by its FABRIC name or an alias (the study writes BRIS for BRIST), any case."""
    wanted = name.strip().upper()
    for site in site_catalog().values():
        if wanted == site.name or wanted in site.aliases:
            return site
    return None


def get_site(name: str, source: str | None = "--sites", key: str | None = None) -> Site:
    site = find_site(name)
    if site is None:
        raise GeosimError(f"unknown FABRIC site {name!r} (known: {', '.join(site_catalog())}; `geosim sites` lists them)",
                          source=source, key=key)
    return site


def gpu_component(gpu: str, source: str = "--gpu") -> str:
    """'A30', 'GPU_A30' or 'a30' -> 'GPU_A30'."""
    text = gpu.strip()
    for component, model in COMPONENT_GPU.items():
        if text.upper() in (component.upper(), model.upper(), component.upper().removeprefix("GPU_")):
            return component
    raise GeosimError(f"unknown FABRIC GPU {gpu!r} (known: {', '.join(COMPONENT_GPU.values())})", source=source)


def great_circle_km(a: Site, b: Site) -> float:
    """Haversine distance on a spherical Earth (within ~0.5% of the ellipsoid: far below the route's detour)."""
    phi1, phi2 = math.radians(a.lat), math.radians(b.lat)
    dphi, dlmb = phi2 - phi1, math.radians(b.lon - a.lon)
    h = math.sin(dphi / 2) ** 2 + math.cos(phi1) * math.cos(phi2) * math.sin(dlmb / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(h)))


# -- the route-inflation fit on Table I ------------------------------------------------------------


@dataclass(frozen=True)
class PairFit:
    sites: tuple[str, str]
    distance_km: float
    measured_ms: float
    estimated_ms: float

    @property
    def error(self) -> float:
        """(estimate - measured) / measured."""
        return (self.estimated_ms - self.measured_ms) / self.measured_ms

    def to_dict(self) -> dict:
        return {"sites": list(self.sites), "distance_km": round(self.distance_km, 1), "measured_ms": self.measured_ms,
                "estimated_ms": round(self.estimated_ms, 2), "error": round(self.error, 4)}


@dataclass(frozen=True)
class RttModel:
    """rtt_ms = SAME_SITE_RTT_MS at one site, else 2 x distance x inflation / speed in fibre."""

    inflation: float
    pairs: tuple[PairFit, ...]  # the measured pairs it was fitted on, with its error on each

    def estimate_ms(self, a: Site, b: Site) -> float:
        if a.name == b.name:
            return SAME_SITE_RTT_MS
        return 2 * great_circle_km(a, b) * self.inflation / FIBRE_KM_PER_MS

    def describe(self) -> str:
        return (f"estimated: great-circle distance x route inflation {self.inflation:.3f} (fitted on the study's "
                f"{len(self.pairs)} WAN pairs, Table I; errors "
                + ", ".join(f"{'-'.join(p.sites)} {100 * p.error:+.1f}%" for p in self.pairs) + ")")

    def to_dict(self) -> dict:
        return {"inflation": round(self.inflation, 4), "fibre_km_per_ms": round(FIBRE_KM_PER_MS, 3),
                "same_site_rtt_ms": SAME_SITE_RTT_MS, "fitted_on": [p.to_dict() for p in self.pairs]}


def study_wan_pairs() -> list[tuple[Site, Site, float]]:
    """Table I's slices between two sites, with their measured RTT (from the study's reference file)."""
    doc = tomllib.loads(resources.files("geosim.data").joinpath("fabric-slm-2026.toml").read_text())
    pairs = []
    for s in doc["slices"]:
        a, b = get_site(s["vm1"]["site"], "fabric-slm-2026.toml"), get_site(s["vm2"]["site"], "fabric-slm-2026.toml")
        if a.name != b.name:
            pairs.append((a, b, float(s["rtt_ms"])))
    return pairs


@cache
def rtt_model() -> RttModel:
    """Least squares on log(RTT): the inflation is the geometric mean of measured / straight-line RTT, so
    a pair 10% over and one 10% under weigh the same (relative error is what a user cares about)."""
    pairs = study_wan_pairs()
    straight = [(a, b, 2 * great_circle_km(a, b) / FIBRE_KM_PER_MS, rtt) for a, b, rtt in pairs]
    inflation = math.exp(sum(math.log(rtt / s) for _, _, s, rtt in straight) / len(straight))
    fits = tuple(PairFit((a.name, b.name), great_circle_km(a, b), rtt, s * inflation) for a, b, s, rtt in straight)
    return RttModel(inflation, fits)


def estimate_rtt_ms(a: str | Site, b: str | Site) -> float:
    a = a if isinstance(a, Site) else get_site(a)
    b = b if isinstance(b, Site) else get_site(b)
    return rtt_model().estimate_ms(a, b)


def network_service(a: str, b: str, sites_in_slice: int) -> str:
    """FABRIC's L2 service the study used: L2Bridge within a site, L2STS between two; beyond two
    sites an L2 network cannot span them, so FABNetv4 (routed IPv4 across FABRIC)."""
    if sites_in_slice <= 1 or a == b:
        return "L2Bridge"
    return "L2STS" if sites_in_slice == 2 else "FABNetv4"
