"""One rule for "which is best", used by predict, select, plan, sweep and report.

The rule: every option is ranked on one measure, the time to the same training progress
(time_to_progress_s below: as far as Data gets in the workload's tokens, or in a target token
count). A technique's tokens count at its token efficiency (convergence.py): 1 for the study's
four, which compute the same synchronous update, so their measure is their predicted time; below
1 for DiLoCo, SparseLoCo and the hybrid, which need more tokens for the same loss. The least time
is best; equal times go to the one with fewer GPU-hours, then to the one with more memory to
spare, then to the simpler technique. An option that may not fit (its peak within the memory model's
error of the GPU's memory) comes after all that fit. With a deadline, the options that meet it
come first, cheapest (GPU-hours) first.

The verdict is the one line every predict/select/plan output starts each slice with: what to use,
where, how long, and the runner-up with its margin. verdict() takes ranked options, so a caller
can add to the line (an uncertainty range) without re-ranking.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from geosim.predict import Prediction
from geosim.inputs.specs import Params
from geosim.studies.convergence import TokenEfficiency, time_to_target_s, token_efficiency, uses_compressed_pipeline
from geosim.techniques import get_technique, option_kind, variant_label
from geosim.base.units import bisect

SAME_TIME = 1e-9  # relative: closer than this, two times are equal and the cheaper option wins


def rank_key(deadline_s: float | None = None):
    """Sort key of a (time, GPUs) pair: fastest first; with a deadline, the cheapest that meets it first."""
    def key(seconds: float, gpus: int) -> tuple:
        if deadline_s is None:
            return (0, seconds, seconds * gpus)
        if seconds <= deadline_s:
            return (0, seconds * gpus, seconds)
        return (1, seconds, seconds * gpus)
    return key


SYNCHRONOUS = TokenEfficiency(1.0, "synchronous: the same update as Data")


@dataclass(frozen=True)
class SameProgress:
    """What "the same training progress" means for one ranking: as far as Data gets in
    `target_tokens` (None: the workload's own tokens), each technique's tokens counted at its token
    efficiency (convergence.token_efficiency: --token-efficiency overrides, measured loss curves,
    then the parameters file)."""

    params: Params | None = None
    overrides: dict | None = None
    measured: dict | None = None
    target_tokens: float | None = None

    def efficiency(self, prediction: Prediction) -> TokenEfficiency:
        if self.params is None:
            return SYNCHRONOUS
        return token_efficiency(prediction.technique, self.params, overrides=self.overrides, measured=self.measured,
                                compressed_pipeline=uses_compressed_pipeline(prediction, self.params))

    def best_efficiency(self, technique: str) -> float:
        """The most a technique's efficiency can be on any run (a floor under its ranked time needs it)."""
        if self.params is None:
            return 1.0
        return token_efficiency(technique, self.params, overrides=self.overrides, measured=self.measured).value


def time_to_progress_s(prediction: Prediction, efficiency: float, target_tokens: float | None = None) -> float | None:
    """THE ranking measure: the time a run takes to the same training progress (None if it does not run).

    Without a target it is the run of the workload with its training (not its start-up) stretched by
    1 / efficiency, so a technique of efficiency 1 keeps its predicted time exactly; with one it is
    convergence.time_to_target_s. predict's verdict, its time-to-target table, select's verdict and
    plan's ranks all come from here."""
    if not prediction.ok:
        return None
    startup = prediction.startup_s or 0.0
    if target_tokens is None:
        if efficiency == 1.0:
            return prediction.total_time_s
        return (prediction.total_time_s - startup) / efficiency + startup
    return time_to_target_s(target_tokens, efficiency, prediction.tokens_per_s, startup)


def is_assumed(efficiency: TokenEfficiency) -> bool:
    """An efficiency below or above 1 that no measurement or user gave: an assumption to say so of."""
    return efficiency.value != 1.0 and not efficiency.source.startswith(("measured", "given"))


@dataclass
class Option:
    """One way to train: a technique on some VMs, a variant of it, and what the simulator predicted."""

    technique: str
    hosts: tuple[str, ...]  # for a pipeline, in stage order
    changes: dict  # workload changes of this variant (Pipeshard: microbatches)
    options: dict | None  # passed to predict() (Pipeshard: meshes, layer_split, intra_stage)
    prediction: Prediction
    workload: object = field(repr=False, default=None)  # the workload it was predicted for
    efficiency: TokenEfficiency = SYNCHRONOUS  # its token efficiency (SameProgress.efficiency)
    target_tokens: float | None = None  # SameProgress.target_tokens

    @property
    def ranked_time_s(self) -> float | None:
        """What it is ranked on: time to the same training progress (time_to_progress_s)."""
        return time_to_progress_s(self.prediction, self.efficiency.value, self.target_tokens)

    @property
    def ok(self) -> bool:
        return self.prediction.ok

    @property
    def microbatches(self) -> int | None:
        return self.changes.get("microbatches")

    @property
    def gpus(self) -> int:
        return len(self.prediction.gpus)

    @property
    def total_time_s(self) -> float:
        return self.prediction.total_time_s

    @property
    def gpu_hours(self) -> float:
        return self.ranked_time_s * self.gpus / 3600

    @property
    def kind(self) -> str:
        """Technique and VMs only: what a change of latency flips between (not a variant's details)."""
        return option_kind(self.technique, self.hosts, self.options)

    @property
    def label(self) -> str:
        if self.options is None and not self.changes:
            return self.kind
        return variant_label(self.technique, self.hosts, self.workload, self.options)

    def to_dict(self) -> dict:
        p = self.prediction
        return {"label": self.label, "kind": self.kind, "technique": self.technique, "hosts": list(self.hosts),
                "microbatches": self.microbatches, "options": self.options, "status": p.status, "reason": p.reason,
                "gpus": self.gpus, "total_time_s": p.total_time_s, "time_per_epoch_s": p.time_per_epoch_s,
                "tflops_per_gpu": p.tflops_per_gpu, "peak_memory_gib": p.peak_memory_gib,
                "token_efficiency": self.efficiency.value, "token_efficiency_source": self.efficiency.source,
                "memory": p.memory_verdict, "time_to_progress_s": self.ranked_time_s, "gpu_hours": self.gpu_hours if self.ok else None,
                "estimated": p.estimated, "iteration_time_interval_s": p.iteration_time_interval_s}


@dataclass
class MeasuredOption:
    """A measured run ranked by the same rule: what verdict() needs of an option."""

    label: str
    kind: str
    gpus: int
    total_time_s: float
    ok: bool = True
    efficiency: TokenEfficiency = SYNCHRONOUS

    @property
    def ranked_time_s(self) -> float:
        return self.total_time_s


def rank(options: list[Option], deadline_s: float | None = None) -> list[Option]:
    """The feasible options, best first (the module's rule: time to the same training progress)."""
    key = rank_key(deadline_s)
    # an option that may not fit (within the memory model's error of the GPU's memory) after those that fit
    return sorted((o for o in options if o.ok),
                  key=lambda o: (o.prediction.memory_verdict == "may not fit", key(o.ranked_time_s, o.gpus), o.prediction.peak_memory_gib or 0.0,
                                 len(getattr(get_technique(o.technique), "BUILDS_ON", ()))))


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def margin(slower_s: float, faster_s: float) -> str:
    """'+0.4%', '1.93x': how much longer the slower takes; '-48.9%' when the one named slower is in fact
    faster (a sign of its own, never '+-48.9%')."""
    ratio = slower_s / faster_s
    return f"{ratio:.2f}x" if ratio >= 1.5 else f"{100 * (ratio - 1):+.1f}%"


def verdict(where: str, ranked: list[Option], *, estimate: str = "predicted", algorithm: str | None = None,
            algorithm_option: Option | None = None) -> str:
    """One line: use what, where, how long; the runner-up and its margin; Algorithm 1 where it differs.

    `estimate` says what the time is ("predicted": a simulator estimate; "measured")."""
    if not ranked:
        line = f"{where}: none of the ranked options runs (each is out of memory or infeasible)"
        return line + (f"; Algorithm 1 picks {algorithm}" if algorithm else "")
    best = ranked[0]
    line = f"{where}: use {best.label} ({best.gpus} GPUs): {fmt_time(best.ranked_time_s)} {estimate}"
    line += _efficiency_note(best, " to Data's progress")
    second = next((o for o in ranked[1:] if not same_run(o, best)), None)
    if second is not None:
        line += (f"; runner-up {second.label}, {fmt_time(second.ranked_time_s)}{_efficiency_note(second)} "
                 f"({margin(second.ranked_time_s, best.ranked_time_s)})")
    else:
        line += "; no runner-up runs"
    if algorithm is not None:
        line += "; " + algorithm_agreement(best, algorithm, algorithm_option)
    return line


STARTUP_BOUND = 0.5  # a verdict whose start-up is more than this share of its time says so


def startup_note(best) -> str | None:
    """Where the verdict's option spends most of its time starting up, the workload is too short to tell
    the techniques apart by training: say so (None otherwise)."""
    p = getattr(best, "prediction", None)
    if p is None or not p.ok or not p.startup_s or best.ranked_time_s is None:
        return None
    share = p.startup_s / best.ranked_time_s
    if share <= STARTUP_BOUND:
        return None
    return (f"start-up is {share:.0%} of the verdict's {fmt_time(best.ranked_time_s)}: the workload is too short for "
            f"training to decide (give --epochs, --tokens-per-epoch or --target-tokens)")


def _efficiency_note(option, what: str = "") -> str:
    """' (token efficiency 0.92, assumed)' where the time is not the run's own but time to Data's progress."""
    eff = option.efficiency
    if eff.value == 1.0:
        return ""
    how = "assumed" if is_assumed(eff) else eff.source.split(" (")[0]
    return f"{what} (token efficiency {eff.value:.3g}, {how})"


def same_run(option, best) -> bool:
    """Another technique whose run is the best's own (the hybrid is SparseLoCo where every VM holds a
    replica): not a runner-up worth naming."""
    p, q = getattr(option, "prediction", None), getattr(best, "prediction", None)
    return (p is not None and q is not None and option.hosts == best.hosts and option.gpus == best.gpus
            and abs(option.ranked_time_s - best.ranked_time_s) <= SAME_TIME * best.ranked_time_s
            and p.peak_memory_gib == q.peak_memory_gib)


def algorithm_agreement(best: Option, algorithm: str, chosen: Option | None) -> str:
    """Algorithm 1's pick beside the ranking's best, and by how much it trails."""
    if chosen is None or not chosen.ok:
        return f"Algorithm 1 picks {algorithm} (does not run for this workload)"
    if chosen.kind == best.kind and chosen.ranked_time_s <= best.ranked_time_s * (1 + SAME_TIME):
        return f"Algorithm 1 agrees ({algorithm})"
    if chosen.kind == best.kind:
        return (f"Algorithm 1 picks {algorithm} too, at its default settings "
                f"({margin(chosen.ranked_time_s, best.ranked_time_s)})")
    return f"Algorithm 1 picks {algorithm} ({margin(chosen.ranked_time_s, best.ranked_time_s)})"


def why_algorithm1_differs(best: Option, selection, chosen: Option | None, probed_kinds: set[str]) -> str | None:
    """Why Algorithm 1 (the study's rule on TFLOP/s probes) lands elsewhere than the ranking, or None."""
    if selection is None or chosen is None or not chosen.ok:
        return None
    if chosen.kind == best.kind and chosen.ranked_time_s <= best.ranked_time_s * (1 + SAME_TIME):
        return None
    reasons = []
    if best.kind not in probed_kinds:
        reasons.append(f"it never probes {best.kind} (it tries Pipeshard on {_all(selection)}, Data and Shard on each "
                       f"VM alone, then ZeRO2 on {_all(selection).removesuffix(' VMs') if _all(selection) == 'both VMs' else _all(selection)})")
    elif best.label != best.kind:
        reasons.append(f"it probes {best.kind} only at the default layer split and microbatches, where the ranking "
                       f"also tries {best.label.removeprefix(best.kind).lstrip(', ')}")
    if chosen.kind != best.kind:
        reasons.append(f"it decides on TFLOP/s per GPU against delta {selection.delta:g}, not on time to train "
                       f"({selection.branch} branch: {selection.reason})")
    return "; ".join(reasons) or None


def _all(selection) -> str:
    """'both VMs' (the study's two) or 'all N VMs': what Algorithm 1 probes together."""
    n = sum(1 for name in selection.probes if name.startswith("Td"))
    return "both VMs" if n == 2 else f"all {n} VMs"


# -- how the choice moves with latency -------------------------------------------------------


def choice_vs_rtt(rtts_ms: list[float], choose: Callable[[float], tuple[str, object]],
                  rel_tol: float = 1e-2, locate: bool = True) -> tuple[list, list]:
    """choose(rtt_ms) -> (label, row) at each RTT; where the label changes between two neighbouring
    RTTs, bisect (geosim.base.units.bisect) to locate the flip to rel_tol (locate=False: leave it bracketed
    by the two RTTs). Returns (rows, flips) with rows as (rtt_ms, label, row) and flips as
    (low_ms, high_ms, label_below, label_above)."""
    rows = [(r, *choose(r)) for r in rtts_ms]
    flips = []
    for (lo, below, _), (hi, above, _) in zip(rows, rows[1:]):
        if below == above:
            continue
        if not locate:
            flips.append((lo, hi, below, above))
            continue
        seen = {}

        def same_as_low(x: float, below=below) -> bool:
            seen[x] = choose(x)[0]
            return seen[x] == below

        lo, hi, _ = bisect(same_as_low, lo, hi, rel_tol=rel_tol)
        # keep what is chosen just above the flip (a third choice may lie between)
        flips.append((lo, hi, below, seen.get(hi, above)))
    return rows, flips
