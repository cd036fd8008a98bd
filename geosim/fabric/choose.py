"""Which FABRIC sites to ask for: every slice the sites allow, ranked by the planner's best option on it.

A candidate slice is `vms` VMs, each at a site with `gpus_per_vm` GPUs of one model the site
offers. Its links carry the study's measured RTT where Table I has the pair, else the RTT
estimated from distance (geosim.base.sites). Each candidate is ranked by the planner's
own search and rank_key (geosim.studies.plan): the same rule as `geosim plan`.

Two things keep `--sites all` fast, both exact rather than heuristic:
- slices with the same GPUs and the same RTTs are one plan (all same-site pairs, say);
- with two VMs and the same GPUs, the best time can only grow with the RTT. So once the
  best option of a slice uses one VM alone (which no RTT touches), every slice of that
  group with a larger RTT has that same best: it is listed as derived, not simulated.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from geosim.inputs.case import Case
from geosim.base.errors import GeosimError
from geosim.base.sites import (GPU_COMPONENT, SAME_SITE_RTT_MS, Site, estimate_rtt_ms, get_site, gpu_component,
                                 network_service, rtt_model, site_catalog, study_wan_pairs)
from geosim.inputs.scenario import gpu_catalog
from geosim.inputs.specs import Cluster, Host, Link, Model, Params, Workload
from geosim.studies.plan import Option, rank_key, search
from geosim.studies.ranking import rank

DEFAULT_BANDWIDTH_GBPS = 10.0  # as the study's scenarios: not reported, a conservative share of FABRIC's 25G NIC
MAX_CANDIDATES = 2000


@dataclass
class Candidate:
    sites: tuple[str, ...]  # one per VM
    gpus: tuple[str, ...]  # the GPU model of each VM (catalog names)
    cluster: Cluster
    rtts: dict[tuple[str, str], tuple[float, bool]]  # (host a, host b) -> (RTT ms, estimated?)
    best: Option | None = None
    derived_from: str | None = None  # set when the best was derived, not simulated (see module doc)
    simulated: int = 0
    services: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return "+".join(f"{s}:{g}" for s, g in zip(self.sites, self.gpus))

    @property
    def max_rtt_ms(self) -> float:
        return max((r for r, _ in self.rtts.values()), default=0.0)

    @property
    def estimated(self) -> bool:
        return any(e for _, e in self.rtts.values())

    def signature(self) -> tuple:
        return tuple(sorted(self.gpus))

    def to_dict(self) -> dict:
        return {"sites": list(self.sites), "gpus": list(self.gpus), "label": self.label,
                "links": [{"between": list(k), "rtt_ms": round(r, 3), "rtt_estimated": e,
                           "service": self.services.get(k)} for k, (r, e) in self.rtts.items()],
                "rtt_estimated": self.estimated, "best": self.best.to_dict() if self.best else None,
                "derived_from": self.derived_from, "simulated_options": self.simulated}


def measured_rtts() -> dict[frozenset, float]:
    return {frozenset((a.name, b.name)): rtt for a, b, rtt in study_wan_pairs()}


def pair_rtt(a: Site, b: Site, measured: dict[frozenset, float]) -> tuple[float, bool]:
    """(RTT ms, estimated?): Table I's measurement wins; one site is L2Bridge at Table I's 0.1 ms."""
    if a.name == b.name:
        return SAME_SITE_RTT_MS, False
    key = frozenset((a.name, b.name))
    if key in measured:
        return measured[key], False
    return estimate_rtt_ms(a, b), True


def resolve_sites(text: str, gpu: str | None) -> tuple[list[Site], list[str]]:
    """--sites UTAH,MASS or 'all'; with --gpu, the sites known to offer it. Returns (sites, notes)."""
    component = gpu_component(gpu) if gpu else None
    notes = []
    if text.strip().lower() == "all":
        sites = [s for s in site_catalog().values() if s.gpus]
        unknown = [s.name for s in site_catalog().values() if not s.gpus]
        if unknown:
            notes.append(f"{len(unknown)} site(s) left out: their GPUs are not public ({', '.join(unknown)})")
    else:
        names = [n for n in (p.strip() for p in text.split(",")) if n]
        if not names:
            raise GeosimError("name at least one site, or 'all'", source="--sites")
        sites = list({s.name: s for s in (get_site(n) for n in names)}.values())
    if component:
        without = [s.name for s in sites if component not in s.gpus]
        sites = [s for s in sites if component in s.gpus]
        if without and text.strip().lower() != "all":
            notes.append(f"left out, not known to offer {gpu}: {', '.join(without)}")
    if not sites:
        raise GeosimError(f"no site {'known to offer ' + gpu if gpu else 'with known GPUs'} among them "
                          "(`geosim sites` lists sites and their GPUs)", source="--sites")
    return sites, notes


def candidates(sites: list[Site], vms: int, gpus_per_vm: int, gpu: str | None,
               bandwidth_gbps: float = DEFAULT_BANDWIDTH_GBPS) -> list[Candidate]:
    catalog = gpu_catalog()
    measured = measured_rtts()
    wanted = gpu_component(gpu) if gpu else None
    out, seen = [], set()
    for combo in itertools.combinations_with_replacement(sites, vms):
        # a component the GPU catalog does not describe (A40 today) cannot be predicted: left out
        choices = [[c for c in s.gpus if wanted in (None, c) and GPU_COMPONENT_TO_MODEL[c] in catalog] for s in combo]
        for comps in itertools.product(*choices):
            models = tuple(GPU_COMPONENT_TO_MODEL[c] for c in comps)
            same_slice = tuple(sorted(zip((s.name for s in combo), models)))  # VMs at one site, GPUs swapped: one slice
            if same_slice in seen:
                continue
            seen.add(same_slice)
            names = _host_names(combo)
            hosts = tuple(Host(n, s.name, (catalog[m],) * gpus_per_vm) for n, s, m in zip(names, combo, models))
            rtts, links, services = {}, [], {}
            distinct = len({s.name for s in combo})
            for (i, a), (j, b) in itertools.combinations(enumerate(combo), 2):
                rtt, estimated = pair_rtt(a, b, measured)
                key = (names[i], names[j])
                rtts[key] = (rtt, estimated)
                # one data-plane network spans the slice, as in the request (geosim.fabric.request)
                services[key] = network_service(combo[0].name, combo[-1].name, distinct)
                links.append(Link(names[i], names[j], rtt / 1e3, bandwidth_gbps * 1e9, rtt_estimated=estimated))
            cluster = Cluster("+".join(names), hosts, tuple(links), source="--sites")
            out.append(Candidate(tuple(s.name for s in combo), models, cluster, rtts, services=services))
            if len(out) > MAX_CANDIDATES:
                raise GeosimError(f"more than {MAX_CANDIDATES} candidate slices: name fewer sites or a --gpu",
                                  source="--sites")
    return out


GPU_COMPONENT_TO_MODEL = {c: m for m, c in GPU_COMPONENT.items()}


def _host_names(combo: tuple[Site, ...]) -> list[str]:
    """UTAH, MASS; or UTAH-1, UTAH-2 when two VMs share a site."""
    counts = {}
    for s in combo:
        counts[s.name] = counts.get(s.name, 0) + 1
    seen, names = {}, []
    for s in combo:
        seen[s.name] = seen.get(s.name, 0) + 1
        names.append(s.name if counts[s.name] == 1 else f"{s.name}-{seen[s.name]}")
    return names


@dataclass
class SiteRanking:
    ranked: list[Candidate]  # best first (those with no feasible option last)
    planned: int  # planner searches run
    derived: int  # slices whose best was derived (module doc), not searched
    notes: list[str]
    deadline_s: float | None

    def to_dict(self) -> dict:
        return {"ranked": [c.to_dict() for c in self.ranked], "planned": self.planned, "derived": self.derived,
                "notes": self.notes, "deadline_s": self.deadline_s, "rtt_model": rtt_model().to_dict()}


def rank_sites(sites: list[Site], model: Model, workload: Workload, params: Params, *, vms: int = 2,
               gpus_per_vm: int = 2, gpu: str | None = None, deadline_s: float | None = None,
               techniques: tuple[str, ...] | None = None, notes: list[str] | None = None,
               bandwidth_gbps: float = DEFAULT_BANDWIDTH_GBPS) -> SiteRanking:
    if vms < 1 or gpus_per_vm < 1:
        raise GeosimError("must be >= 1", source="--host-count" if vms < 1 else "--gpus-per-host")
    key = rank_key(deadline_s)
    cands = candidates(sites, vms, gpus_per_vm, gpu, bandwidth_gbps)
    groups: dict[tuple, list[Candidate]] = {}
    for c in cands:
        groups.setdefault(c.signature(), []).append(c)
    cache: dict[tuple, Candidate] = {}
    planned = derived = 0
    for group in groups.values():
        group.sort(key=lambda c: (c.max_rtt_ms, c.label))
        one_vm_best: Candidate | None = None
        for c in group:
            if one_vm_best is not None and vms == 2:
                c.best, c.derived_from = _renamed(one_vm_best.best, one_vm_best, c), one_vm_best.label
                derived += 1
                continue
            same = (c.signature(), tuple(sorted(round(r, 3) for r, _ in c.rtts.values())), c.gpus)
            if same in cache:  # e.g. every same-site pair: one plan
                c.best, c.simulated = _renamed(cache[same].best, cache[same], c), 0
                continue
            case = Case(c.cluster, model, workload, params)
            found = search(case, keep=1, deadline_s=deadline_s, techniques=techniques)
            planned += 1
            c.simulated = len(found.simulated)
            ok = [o for o in found.simulated if o.ok]
            c.best = rank(ok, deadline_s)[0] if ok else None  # the ranking rule, its tie-breaks included
            cache[same] = c
            if c.best is not None and len(c.best.hosts) == 1 and deadline_s is None and len(set(c.gpus)) == 1:
                one_vm_best = c  # identical VMs: one of them alone is best, and stays so at any larger RTT
    ranked = sorted(cands, key=lambda c: ((0, *key(c.best.ranked_time_s, c.best.gpus)) if c.best else (1,),
                                          c.max_rtt_ms, c.label))
    return SiteRanking(ranked, planned, derived, list(notes or []), deadline_s)


def _renamed(option: Option | None, source: Candidate, target: Candidate) -> Option | None:
    """The source slice's best option, told in the target slice's host names (same GPUs, same shape)."""
    if option is None:
        return None
    mapping = dict(zip((h.name for h in source.cluster.hosts), (h.name for h in target.cluster.hosts)))
    hosts = tuple(mapping[h] for h in option.hosts)
    options = option.options
    if options and "meshes" in options:
        options = {**options, "meshes": [[mapping[h] for h in mesh] for mesh in options["meshes"]]}
    return replace(option, hosts=hosts, options=options)
