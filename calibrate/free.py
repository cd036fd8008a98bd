"""What a fit may move, and how far: the free parameters (FreeParam), their physical ranges and
written priors, the default set for a list of records (default_free), and how a set of values
becomes the simulator's parameters and a case's links and workload (apply_params, apply_case).

Every free parameter is fitted as x = log(value / initial): values stay positive and the
bounds are multiplicative (calibrate/fit.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from geosim.calibrate import OVERHEAD_KINDS
from geosim.calibrate.cases import RunCase
from geosim.base.errors import GeosimError
from geosim.base.parameters import RUNTIME_BY_KEY, TABLE_BY_KEY
from geosim.inputs.params import NETWORK_KEYS, SCALARS, fittable, priors, scalar_si, with_scalar
from geosim.inputs.runtime import runtime_of, shipped_runtimes, with_runtime
from geosim.inputs.specs import Cluster, Params
from geosim.techniques import is_pipelined, builds_on, settings_class, technique_names
from geosim.studies.whatif import wan_links
from geosim.techniques._settings import tunables
from geosim.base.units import MIB

SCALAR_FIELDS = {key: (name, scale) for key, name, scale in SCALARS}
# A per-link value is a slice's deviation from the global transport (window) or from the scenario's
# nominal capacity (bandwidth). A weak prior, log(value / reference) ~ N(0, LINK_PRIOR_SIGMA), keeps a
# link the data cannot see (a LAN link's window, a WAN link's idle line rate) at its reference, and
# makes the global window the typical slice's: what a slice never measured is predicted with.
LINK_PRIOR_SIGMA = 2.0
# scalars only some techniques' schedules use: a p2p send's rendezvous is paid by pipeline stages only
P2P_SCALARS = ("transport.p2p_handshake_rtts",)
# (lowest, highest) a global scalar may be fitted to, in its file unit: declared with the parameter
# (geosim/base/parameters.py, `fit`, e.g. a message's fixed cost within [1 us, 20 ms]: without a ceiling a
# fit explained runs 40 s slower than their compute by 0.87 s per message, a per-iteration cost in
# disguise); a technique's own fittable settings come with their ranges from its Settings
# (tunable(..., fit=(low, high)))
SCALAR_RANGES = {key: p.fit for key, p in fittable().items()}
MAX_PER_MESSAGE_US = SCALAR_RANGES["transport.per_message_overhead_us"][1]
# the round trips a collective step waits for NCCL's flow control (fitted unless step_rtts=None)
STEP_SCALARS = ("transport.collective_step_rtts",)
# Priors, (centre, 1-sigma of log(value)), are declared with each parameter (geosim/base/parameters.py,
# sources in docs/reference/params.md). A prior is one pseudo-observation log(value / centre) ~ N(0, sigma),
# weighed against the records as if each record's log error had a 1-sigma of DATA_NOISE.
SCALAR_PRIORS = priors()
# the kernel timer's global constants: every GPU's speed from its datasheet and these (always freed)
COMPUTE_PRIORS = {k: v for k, v in SCALAR_PRIORS.items() if k.startswith("compute.")}
# A message's fixed cost over NCCL's socket transport is tens to hundreds of microseconds. Without its
# prior, a fold without Shard moved the other techniques' misfit into ~8 ms per message, and Shard's
# thousands of small all-reduces came out twice too slow on a LAN.
PER_MESSAGE_PRIOR = {k: v for k, v in SCALAR_PRIORS.items() if k == "transport.per_message_overhead_us"}
# A per-iteration overhead is launch, host sync and the driver's bookkeeping: a tenth of a second,
# not the seconds a fit would otherwise move into it to stand in for slow compute (declared with
# overhead.iteration_s: its prior and its physical bounds, s).
OVERHEAD_PRIOR = TABLE_BY_KEY["overhead.iteration_s"].prior
OVERHEAD_RANGE = TABLE_BY_KEY["overhead.iteration_s"].fit
DATA_NOISE = 0.2  # the 1-sigma of a record's log error a prior is weighed against
SHARED = "shared"  # the target of an overhead every technique has (fitted once, predicts a technique never seen)
LINK_KINDS = ("link_bandwidth", "link_window", "link_step_rtts")
# the key a per-link value has in a scenario's [[links]] table and in [fitted].links
LINK_KEYS = {"link_bandwidth": "bandwidth_gbps", "link_window": "window_mib", "link_step_rtts": "step_rtts"}
# the global a per-link value deviates from (its prior's centre when that global is fitted too)
LINK_GLOBALS = {"link_window": "transport.window_mib", "link_step_rtts": "transport.collective_step_rtts"}


def fittable_settings() -> dict[str, tuple[float, float]]:
    """TECHNIQUE.SETTING -> the range the fitter may move it in, for every technique's fittable tunables."""

    return {f"{name}.{leaf}": t.fit for name in technique_names()
            for leaf, t in tunables(settings_class(name)).items() if t.fit is not None}


def _uses(technique: str, owner: str) -> bool:
    """Whether `technique`'s schedules are built with `owner`'s (so its settings affect them)."""

    return technique == owner or any(_uses(t, owner) for t in builds_on(technique))


@dataclass(frozen=True)
class FreeParam:
    """One fitted quantity. kind: scalar | setting (a technique's) | efficiency | iteration_overhead | startup |
    link_bandwidth | link_window | link_step_rtts | tokens_per_epoch; target: the TOML key, GPU, technique or slice it applies to."""

    kind: str
    target: str
    initial: float  # in the unit below
    lower: float
    upper: float
    unit: str

    @property
    def name(self) -> str:
        return {
            "scalar": self.target,
            "setting": self.target,
            "flat_fraction": f"compute.flat_fraction.{self.target}",
            "iteration_overhead": f"overhead.iteration_s.{self.target}",
            "startup": f"overhead.startup_s.{self.target}",
            "link_bandwidth": f"link.{self.target}.bandwidth_gbps",
            "link_window": f"link.{self.target}.window_mib",
            "link_step_rtts": f"link.{self.target}.step_rtts",
            "tokens_per_epoch": "workload.tokens_per_epoch",
            "runtime": f"runtime.{self.target}",
        }[self.kind]

    def affects(self, case: RunCase) -> bool:
        if self.kind == "flat_fraction":
            return self.target in case.gpus
        if self.kind in ("iteration_overhead", "startup"):
            return self.target in (case.technique, SHARED)
        if self.kind in LINK_KINDS:
            return case.networked and self.target == case.slice_key
        if self.kind == "tokens_per_epoch":
            return "tokens_per_epoch" in case.assumed_workload
        if self.kind == "runtime":  # "jax.iteration_s": the cases that run on that runtime
            return case.workload.runtime == self.target.partition(".")[0]
        if self.kind == "setting":
            return _uses(case.technique, self.target.partition(".")[0])
        if self.target in P2P_SCALARS and not is_pipelined(case.technique):
            return False
        if self.target in NETWORK_KEYS or self.target.startswith("host.lan"):  # a network backend's own, a LAN's
            return case.networked
        return True


def apply_params(base: Params, free: list[FreeParam], values) -> Params:
    """The global parameters (not per-link, not workload) set to values."""
    flat, iteration, startup = dict(base.flat_fraction), dict(base.iteration_overhead_s), dict(base.startup_s)
    scalars: dict = {}
    for p, v in zip(free, values):
        if p.kind == "flat_fraction":
            flat[p.target] = float(v)
        elif p.kind == "iteration_overhead":
            for technique in (iteration if p.target == SHARED else (p.target,)):
                iteration[technique] = float(v)
        elif p.kind == "startup":
            startup[p.target] = float(v)
        elif p.kind == "scalar":
            name, scale = SCALAR_FIELDS[p.target]
            scalars[p.target] = max(1, round(v)) if scale is int else float(v) * scale
        elif p.kind == "setting":
            technique, _, leaf = p.target.partition(".")
            kind = type(getattr(base.settings(technique), leaf))
            base = base.with_settings(technique, **{leaf: max(1, round(v)) if kind is int else float(v)})
        elif p.kind == "runtime":  # one of a runtime's fixed costs (geosim/inputs/runtime.py), seconds
            name, _, leaf = p.target.partition(".")
            runtime = (base.runtimes or {}).get(name) or shipped_runtimes()[name]
            base = with_runtime(base, replace(runtime, **{leaf: float(v)}))
    base = replace(base, flat_fraction=flat, iteration_overhead_s=iteration, startup_s=startup)
    for key, value in scalars.items():
        base = with_scalar(base, key, value)
    return base


def apply_case(case: RunCase, cluster: Cluster, free: list[FreeParam], values):
    """(cluster, workload) of a case with the per-link and workload values that apply to it."""
    workload = case.workload
    for p, v in zip(free, values):
        if not p.affects(case):
            continue
        if p.kind in LINK_KINDS:
            cluster = with_link(cluster, bandwidth_bps=v * 1e9 if p.kind == "link_bandwidth" else None,
                                window_bytes=v * MIB if p.kind == "link_window" else None,
                                step_rtts=v if p.kind == "link_step_rtts" else None)
        elif p.kind == "tokens_per_epoch":
            workload = replace(workload, tokens_per_epoch=max(1, round(v)))
    return cluster, workload


def with_link(cluster: Cluster, bandwidth_bps: float | None = None, window_bytes: float | None = None,
              step_rtts: float | None = None) -> Cluster:
    """The slice with its links between sites given a fitted bandwidth, window or collective step round trips."""

    change = set(map(id, wan_links(cluster)))
    links = []
    for link in cluster.links:
        if id(link) in change:
            if bandwidth_bps is not None:
                link = replace(link, bandwidth_bps=bandwidth_bps)
            if window_bytes is not None:
                link = replace(link, window_bytes=window_bytes)
            if step_rtts is not None:
                link = replace(link, step_rtts=step_rtts)
        links.append(link)
    return replace(cluster, links=tuple(links))


def default_free(cases: list[RunCase], base: Params, *, fit_links: set[str] | None = None, link_kind: str = "auto",
                 fit_workload: bool = False, techniques: set[str] | None = None, step_rtts: str | None = "link",
                 extra: tuple[str, ...] = (), overhead: str = "technique") -> list[FreeParam]:
    """The modest default set: the kernel timer's GEMM and memory-bandwidth fractions (one each for
    every GPU, with priors), the transport's window and per-message
    overhead, a fixed per-iteration overhead per technique, a link value for each slice in fit_links
    (those whose capacity is unknown) and, if asked, the epoch's length in tokens.

    overhead: "technique" (one per-iteration overhead per technique), "shared" (one for all techniques:
    what predicts a technique the records never ran) or "none" (the parameters' values stand).

    step_rtts: also the round trips a collective step waits for NCCL's flow control: "global"
    (transport.collective_step_rtts), "link" (that and one per window-bound link in fit_links: what
    differs between slices, each slice's hosts and path) or None (neither). extra: more global scalars to fit (keys of SCALAR_RANGES,
    e.g. transport.p2p_handshake_rtts, zero2.gather_bytes_per_param); one no record uses is left out."""

    timed = [c for c in cases if c.metric is not None]
    free: list[FreeParam] = []
    settings_ranges = fittable_settings()

    def scalar(key: str) -> FreeParam:
        if key in settings_ranges:
            technique, _, leaf = key.partition(".")
            lower, upper = settings_ranges[key]
            value = float(getattr(base.settings(technique), leaf))
            return FreeParam("setting", key, min(max(value, lower), upper), lower, upper,
                             "B/param" if key.endswith("per_param") else "")
        name, scale = SCALAR_FIELDS[key]
        value = scalar_si(base, key) / scale
        lower, upper = SCALAR_RANGES[key]
        unit = fittable()[key].unit
        return FreeParam("scalar", key, max(value, lower), lower, upper, "" if unit == "fraction" else unit)

    if timed:  # every GPU's speed from the datasheet and these two, with priors (COMPUTE_PRIORS)
        free.extend(scalar(k) for k in COMPUTE_PRIORS)
    networked = any(c.networked for c in timed)
    if networked:
        free.append(scalar("transport.window_mib"))
        free.append(scalar("transport.per_message_overhead_us"))
        if step_rtts:
            free.extend(scalar(k) for k in STEP_SCALARS)
    for key in extra:
        if key not in SCALAR_RANGES and key not in settings_ranges:
            raise GeosimError(f"cannot fit {key!r} (can: {', '.join([*SCALAR_RANGES, *settings_ranges])})",
                              key="extra")
        p = scalar(key)
        if p not in free and any(p.affects(c) for c in timed):
            free.append(p)
    if overhead not in OVERHEAD_KINDS:
        raise GeosimError(f"overhead must be one of {', '.join(OVERHEAD_KINDS)}, got {overhead!r}", key="overhead")
    if overhead == "shared" and timed:
        first = min(base.iteration_overhead_s.values(), default=0.05)
        free.append(FreeParam("iteration_overhead", SHARED, min(max(first, 1e-3), OVERHEAD_RANGE[1]), *OVERHEAD_RANGE, "s"))
    elif overhead == "technique":
        for technique in sorted({c.technique for c in timed} & (techniques or {c.technique for c in timed})):
            free.append(FreeParam("iteration_overhead", technique,
                                  min(max(base.for_technique("iteration_overhead_s", technique), 1e-3), OVERHEAD_RANGE[1]),
                                  *OVERHEAD_RANGE, "s"))
    if overhead != "none" and timed:
        # records of a runtime with its own per-step cost (jax, pytorch: geosim/inputs/runtime.py) do not use the
        # parameters file's overhead table: their runtime's cost is what the fit can move
        for name in sorted({c.workload.runtime for c in timed}):
            runtime = runtime_of(next(c.workload for c in timed if c.workload.runtime == name), base)
            if runtime.iteration_s is not None:
                low, high = RUNTIME_BY_KEY["iteration_s"].fit
                free.append(FreeParam("runtime", f"{name}.iteration_s", min(max(runtime.iteration_s, low), high),
                                      low, high, "s"))
    seen = set()
    for c in timed:
        if not c.networked or c.slice_key in seen or (fit_links is not None and c.slice_key not in fit_links):
            continue
        seen.add(c.slice_key)
        link = wan_links(c.cluster)[0]
        tcp = base.network("tcp")  # the windows of the TCP model's links are what a fit can move
        window = (link.window_bytes or tcp.window_bytes) * (link.streams or tcp.streams)
        # fit what limits the link's rate: the line on a LAN, the TCP window over a WAN (rate = window / RTT)
        window_bound = link.rtt_s > 0 and window / link.rtt_s < link.bandwidth_bps / 8
        kind = link_kind if link_kind != "auto" else ("window" if window_bound else "bandwidth")
        if kind == "bandwidth":
            free.append(FreeParam("link_bandwidth", c.slice_key, link.bandwidth_bps / 1e9, 0.005, 400.0, "Gbit/s"))
        else:
            free.append(FreeParam("link_window", c.slice_key, (link.window_bytes or tcp.window_bytes) / MIB,
                                  1 / 64, 512.0, "MiB"))
        if step_rtts == "link" and window_bound:  # on a LAN a step's round trip is lost in its transfer time
            initial = link.step_rtts if link.step_rtts is not None else tcp.collective_step_rtts
            free.append(FreeParam("link_step_rtts", c.slice_key, max(initial, 0.02), 0.02, 20.0, "RTT"))
    if fit_workload and any("tokens_per_epoch" in c.assumed_workload for c in timed):
        initial = next(c.workload.tokens_per_epoch for c in timed if "tokens_per_epoch" in c.assumed_workload)
        free.append(FreeParam("tokens_per_epoch", "workload", float(initial), 1e3, 1e9, "tokens"))
    return free
