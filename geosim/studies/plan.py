"""The planner: every feasible way to run the workload on a slice, ranked by predicted time.

Where Algorithm 1 probes five fixed configurations, the planner enumerates
technique x subset of VMs x (for Pipeshard) stage order x microbatches x
intra-stage parallelism x layer split, uneven splits included, so a slow VM can
take fewer layers. Out-of-memory options cost almost nothing: predict() builds the
schedule and checks memory before it simulates anything.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, replace
from typing import Callable

from geosim.case import Case
from geosim.errors import GeosimError
from geosim.sim.predict import Prediction, predict
from geosim.studies.select import TECHNIQUE_LABEL, MeasuredProbes, PredictedProbes, Selection, algorithm1
from geosim.specs import Cluster, Model, Params, Workload
from geosim.techniques import technique_names
from geosim.sim.compute import compute_model
from geosim.techniques._base import backward_multiplier, forward_flops, work

MAX_SPLITS = 400  # per pipeline shape; beyond it (3+ stages of a deep model) only near-even splits
from geosim.techniques.pipeshard import INTRA_STAGES  # how a Pipeshard stage uses its mesh's GPUs


@dataclass
class Option:
    """One way to train: what the simulator was asked, and what it predicted."""

    technique: str
    hosts: tuple[str, ...]  # for Pipeshard, in stage order
    microbatches: int | None  # Pipeshard only; the others take the whole batch at once
    options: dict | None  # passed to predict() (Pipeshard: meshes, layer_split, intra_stage)
    prediction: Prediction

    @property
    def ok(self) -> bool:
        return self.prediction.ok

    @property
    def gpus(self) -> int:
        return len(self.prediction.gpus)

    @property
    def total_time_s(self) -> float:
        return self.prediction.total_time_s

    @property
    def gpu_hours(self) -> float:
        return self.total_time_s * self.gpus / 3600

    @property
    def label(self) -> str:
        if self.technique != "pipeshard":
            return self.kind
        split = "/".join(map(str, self.options["layer_split"]))
        stages = f" layers {split}" if len(self.options["layer_split"]) > 1 else ""
        return f"{self.kind}{stages}, {self.microbatches} microbatches, intra-stage {self.options['intra_stage']}"

    @property
    def kind(self) -> str:
        """Technique and VMs only: what a change of latency flips between (not the split's details)."""
        name = TECHNIQUE_LABEL.get(self.technique, self.technique)
        if self.technique == "pipeshard" and len(self.hosts) > 1:
            return f"{name} {'>'.join(self.hosts)}"
        one_stage = self.technique == "pipeshard" and self.options and "meshes" in self.options
        return f"{name} on {'+'.join(self.hosts)}" + (" (1 stage)" if one_stage else
                                                       " (a stage per GPU)" if self.technique == "pipeshard" else "")

    def to_dict(self) -> dict:
        p = self.prediction
        return {"label": self.label, "kind": self.kind, "technique": self.technique, "hosts": list(self.hosts),
                "microbatches": self.microbatches, "options": self.options, "status": p.status, "reason": p.reason,
                "gpus": self.gpus, "total_time_s": p.total_time_s, "time_per_epoch_s": p.time_per_epoch_s,
                "tflops_per_gpu": p.tflops_per_gpu, "peak_memory_gib": p.peak_memory_gib,
                "gpu_hours": self.gpu_hours if self.ok else None}


def layer_splits(n_layer: int, stages: int) -> list[list[int]]:
    """Every way to give each stage >= 1 layer, or near-even ones only when there are too many."""
    if stages == 1:
        return [[n_layer]]
    if math.comb(n_layer - 1, stages - 1) <= MAX_SPLITS:
        cuts = itertools.combinations(range(1, n_layer), stages - 1)
    else:
        even = n_layer / stages
        cuts = (c for c in itertools.combinations(range(1, n_layer), stages - 1)
                if all(abs(c[i] - even * (i + 1)) <= 2 for i in range(len(c))))
    return [[b - a for a, b in zip((0, *c), (*c, n_layer))] for c in cuts]


def shapes(case: Case, max_gpus: int | None = None, intra_stages: tuple[str, ...] | None = None,
           techniques: tuple[str, ...] | None = None):
    """(technique, hosts, microbatches, predict options) for each option, the layer split left out."""
    hosts = [h.name for h in case.cluster.hosts]
    gpus = {h.name: len(h.gpus) for h in case.cluster.hosts}
    signature = _signature(case.cluster)
    batch = case.workload.global_batch
    intra_stages = intra_stages or (case.params.settings("pipeshard").intra_stage,)
    seen = set()
    for size in range(1, len(hosts) + 1):
        for subset in itertools.combinations(hosts, size):
            if max_gpus is not None and sum(gpus[h] for h in subset) > max_gpus:
                continue
            # VMs with the same GPUs are interchangeable when nothing or one link joins them:
            # plan on the first and say it stands for its twins (twins() below)
            if size <= 2 and tuple(sorted(map(signature, subset))) in seen:
                continue
            seen.add(tuple(sorted(map(signature, subset))))
            for technique in techniques or technique_names():
                if technique != "pipeshard":
                    yield technique, subset, None, None
                    continue
                # stage order matters: the first stage holds the embeddings, the last the LM head
                orders = itertools.permutations(subset)
                if size == 2 and signature(subset[0]) == signature(subset[1]):
                    orders = [subset]
                for order in orders:
                    for m in (m for m in range(1, batch + 1) if batch % m == 0):
                        for intra in intra_stages:
                            # intra-stage data parallelism splits each microbatch over a mesh's GPUs
                            if intra == "data" and any((batch // m) % gpus[h] for h in order):
                                continue
                            if size == 1 and gpus[order[0]] > 1:  # one VM: one GPU per stage, as Alpa runs it
                                yield technique, order, m, {"intra_stage": intra}
                            else:
                                yield technique, order, m, {"meshes": [[h] for h in order], "intra_stage": intra}


def candidates(case: Case, max_gpus: int | None = None, intra_stages: tuple[str, ...] | None = None,
               techniques: tuple[str, ...] | None = None):
    """Every option: (technique, hosts, microbatches, predict options), each layer split of each shape."""
    for technique, hosts, m, options in shapes(case, max_gpus, intra_stages, techniques):
        if technique != "pipeshard":
            yield technique, hosts, m, options
            continue
        for split in layer_splits(case.model.n_layer, len(stage_gpus(case, hosts, options))):
            yield technique, hosts, m, {**options, "layer_split": split}


def stage_gpus(case: Case, hosts: tuple[str, ...], options: dict) -> list[tuple]:
    """The GPUs of each pipeline stage of an option: a VM's per stage, or one each on a lone VM."""
    by_name = {h.name: h for h in case.cluster.hosts}
    if "meshes" not in options:
        return [(g,) for g in by_name[hosts[0]].gpus]
    return [tuple(g for h in mesh for g in by_name[h].gpus) for mesh in options["meshes"]]


def _signature(cluster: Cluster):
    by_name = {h.name: (tuple(g.name for g in h.gpus), h.intra_host) for h in cluster.hosts}
    return by_name.__getitem__


def twins(cluster: Cluster) -> list[list[str]]:
    """Groups of VMs with the same GPUs: the planner lists options on the first of each group only."""
    signature, groups = _signature(cluster), {}
    for h in cluster.hosts:
        groups.setdefault(signature(h.name), []).append(h.name)
    return [g for g in groups.values() if len(g) > 1]


def evaluate(case: Case, technique: str, hosts: tuple[str, ...], microbatches: int | None,
             options: dict | None) -> Option:
    workload = case.workload if microbatches is None else replace(case.workload, microbatches=microbatches)
    prediction = predict(case.with_(workload=workload), technique, hosts=hosts, options=options)
    return Option(technique, tuple(hosts), microbatches, options, prediction)


def robustness(plan: "Plan", draws: list, contenders: int = 8) -> dict:
    """Re-rank the plan's best `contenders` options under each parameter draw: how often its best
    option (by technique and VMs) still wins, and what wins otherwise."""
    from collections import Counter

    if plan.best is None:
        return {"draws": 0, "share": 0.0, "others": {}}
    key = rank_key(plan.deadline_s)
    top = plan.options[:contenders]
    winners = []
    for params in draws:
        case = plan.case.with_(params=params)
        tried = [evaluate(case, o.technique, o.hosts, o.microbatches, o.options) for o in top]
        ok = [o for o in tried if o.ok]
        winners.append(min(ok, key=lambda o: key(o.total_time_s, o.gpus)).kind if ok else "none fits")
    counts = Counter(winners)
    best = plan.best.kind
    return {"draws": len(winners), "contenders": len(top), "share": counts.get(best, 0) / len(winners),
            "others": {k: v / len(winners) for k, v in counts.most_common() if k != best}}


def floor_s(case: Case, technique: str, hosts: tuple[str, ...], microbatches: int | None,
            options: dict | None) -> float:
    """A floor under a Pipeshard option's predicted total time, from compute alone (0 for the others).

    Each GPU runs its ops one after another, so an iteration takes at least the busiest
    stage's M microbatches plus the stages before it filling and draining the pipeline
    (network and intra-stage collectives only add to that). Cheap: no schedule is built.
    tests/test_plan.py checks the floor stays under the prediction.
    """
    if technique != "pipeshard":
        return 0.0
    w, params = case.workload, case.params
    layers = options["layer_split"]
    stages = stage_gpus(case, hosts, options)
    model = compute_model(params)
    per_microbatch = []
    for s, gpus in enumerate(stages):
        sequences = w.global_batch / microbatches / len(gpus)
        first, last = s == 0, s == len(stages) - 1
        times = []
        for g in gpus:  # engine.compute_timer: a flat-rate device, else the op-level model
            if g.name in params.efficiency:
                flops = forward_flops(case.model, w, sequences, layers[s], last) * (1 + backward_multiplier(w))
                times.append(flops / (g.peak_tflops(w.precision) * 1e12 * params.efficiency[g.name]))
            else:
                times.append(sum(model.seconds(work(phase, case.model, w, sequences, layers[s], last, first), g,
                                               w.precision) for phase in ("forward", "backward")))
        per_microbatch.append(max(times))
    busiest = max(range(len(stages)), key=per_microbatch.__getitem__)
    iteration = microbatches * per_microbatch[busiest] + sum(per_microbatch[:busiest])
    iteration += case.params.iteration_overhead_s.get(technique, 0.0)
    iterations = w.iterations_per_epoch * w.epochs
    return case.params.startup_s.get(technique, 0.0) + iterations * iteration


def rank_key(deadline_s: float | None):
    """Sort key of a (time, GPUs) pair: fastest first; with a deadline, the cheapest that meets it first."""
    def key(seconds: float, gpus: int) -> tuple:
        if deadline_s is None:
            return (0, seconds, seconds * gpus)
        if seconds <= deadline_s:
            return (0, seconds * gpus, seconds)
        return (1, seconds, seconds * gpus)
    return key


@dataclass
class Search:
    simulated: list[Option]
    considered: int  # every candidate, simulated or not
    pruned: int  # never simulated: their floor ranks below the top `keep` already found


def search(case: Case, max_gpus: int | None = None, keep: int | None = 10, deadline_s: float | None = None,
           intra_stages: tuple[str, ...] | None = None, techniques: tuple[str, ...] | None = None,
           progress: Callable[[int, int], None] | None = None) -> Search:
    """Simulate candidates in order of their floor; stop once no floor can reach the top `keep`.
    The floor only ever underestimates, so nothing that belongs in the top `keep` is skipped;
    keep=None simulates everything."""
    key = rank_key(deadline_s)
    todo = [(floor_s(case, *args), args) for args in candidates(case, max_gpus, intra_stages, techniques)]
    todo.sort(key=lambda fa: key(fa[0], _gpus_of(case, fa[1][1])))
    best: list[tuple] = []  # keys of the best feasible options so far, sorted, at most `keep`
    simulated = []
    for i, (floor, args) in enumerate(todo):
        if keep is not None and len(best) >= keep and key(floor, _gpus_of(case, args[1])) > best[-1]:
            return Search(simulated, len(todo), len(todo) - i)
        option = evaluate(case, *args)
        simulated.append(option)
        if option.ok:
            best = sorted(best + [key(option.total_time_s, option.gpus)])[:keep]
        if progress:
            progress(len(simulated), len(todo))
    return Search(simulated, len(todo), 0)


def _gpus_of(case: Case, hosts: tuple[str, ...]) -> int:
    return sum(len(case.cluster.host(h).gpus) for h in hosts)


def parse_duration(text: str) -> float:
    """'36h', '90min', '5400s', '1.5d'; a bare number is hours. Returns seconds."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(s|sec|m|min|h|d)?\s*", text)
    if not match:
        raise GeosimError(f"not a duration (try 36h, 90min, 5400s), got {text!r}", source="--deadline")
    scale = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, None: 3600, "d": 86400}[match.group(2)]
    return float(match.group(1)) * scale


@dataclass
class Plan:
    case: Case
    options: list[Option]  # feasible ones, best first
    failed: dict[str, int]  # status -> how many options predicted it
    deadline_s: float | None
    max_gpus: int | None
    algorithm: Selection | None  # Algorithm 1 on predicted probes (None: the slice has not 2 VMs)
    algorithm_option: Option | None  # its choice, predicted for the same workload
    considered: int  # candidate options, simulated or pruned
    pruned: int  # never simulated: even their compute-only floor ranks below the options kept

    @property
    def best(self) -> Option | None:
        return self.options[0] if self.options else None

    @property
    def meets_deadline(self) -> list[Option]:
        if self.deadline_s is None:
            return self.options
        return [o for o in self.options if o.total_time_s <= self.deadline_s]

    def comparison(self) -> str:
        """One sentence: how Algorithm 1's choice compares with the planner's best."""
        best, algo, chosen = self.best, self.algorithm, self.algorithm_option
        if algo is None:
            return "Algorithm 1 needs exactly two VMs; not applicable to this slice."
        if best is None:
            return f"Algorithm 1 picks {algo.label}; the planner finds no feasible option either."
        if chosen is None or not chosen.ok:
            return f"Algorithm 1 picks {algo.label}; the planner's best is {best.label} ({_hours(best.total_time_s)})."
        ratio = chosen.total_time_s / best.total_time_s
        if ratio <= 1.0 + 1e-9:
            return f"Algorithm 1 picks {algo.label} ({_hours(chosen.total_time_s)}), as fast as the planner's best."
        return (f"Algorithm 1 picks {algo.label}: {_hours(chosen.total_time_s)}, {ratio:.2f}x the planner's best "
                f"({_hours(best.total_time_s)}, {_hours(chosen.total_time_s - best.total_time_s)} more).")

    def to_dict(self) -> dict:
        return {"scenario": self.case.cluster.name, "model": self.case.model.name, "considered": self.considered,
                "pruned": self.pruned, "failed": self.failed, "deadline_s": self.deadline_s, "max_gpus": self.max_gpus,
                "best": self.best.to_dict() if self.best else None,
                "algorithm1": self.algorithm.to_dict() if self.algorithm else None,
                "algorithm1_option": self.algorithm_option.to_dict() if self.algorithm_option else None,
                "comparison": self.comparison(), "options": [o.to_dict() for o in self.options]}


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def algorithm_choice(case: Case, delta: float) -> tuple[Selection | None, Option | None]:
    """Algorithm 1 on predicted probes, and its choice predicted for the full workload."""
    hosts = [h.name for h in case.cluster.hosts]
    if len(hosts) != 2:
        return None, None
    selection = algorithm1(PredictedProbes(case.cluster, case.model, case.workload, case.params), *hosts, delta=delta)
    if selection.technique is None:
        return selection, None
    return selection, evaluate(case, selection.technique, selection.hosts, None, None)


def make_plan(case: Case, deadline_s: float | None = None, max_gpus: int | None = None, delta: float = 0.1,
              keep: int | None = 10, intra_stages: tuple[str, ...] | None = None,
              techniques: tuple[str, ...] | None = None, progress: Callable[[int, int], None] | None = None) -> Plan:
    found = search(case, max_gpus, keep, deadline_s, intra_stages, techniques, progress)
    failed: dict[str, int] = {}
    for o in found.simulated:
        if not o.ok:
            failed[o.prediction.status] = failed.get(o.prediction.status, 0) + 1
    key = rank_key(deadline_s)
    # equal times (e.g. microbatches that only change memory): the one with more memory to spare first
    ok = sorted((o for o in found.simulated if o.ok),
                key=lambda o: (key(o.total_time_s, o.gpus), o.prediction.peak_memory_gib))
    selection, chosen = algorithm_choice(case, delta)
    return Plan(case, ok, failed, deadline_s, max_gpus, selection, chosen,
                considered=found.considered, pruned=found.pruned)


# -- the same question on measured runs ----------------------------------------------------------


def measured_plan(records, scenario: str, cluster: Cluster, model: Model, workload: Workload, delta: float,
                  path: str) -> dict:
    """Rank the measured runs of this slice and model (the latest per technique and VMs) by their
    time scaled to the workload's epochs, and run Algorithm 1 on them if they hold its probes."""
    source = MeasuredProbes(records, cluster, scenario, model, replace(workload, epochs=1), path,
                            record_hint="runs.jsonl" if path == "study" else None)
    latest = {}
    for r in source.records:
        hosts = tuple(r.hosts or [h.name for h in cluster.hosts])
        if (r.technique, hosts) not in latest or r.when > latest[(r.technique, hosts)].when:
            latest[(r.technique, hosts)] = r
    rows = []
    for (technique, hosts), r in latest.items():
        seconds = _measured_total(r, workload)
        gpus = cluster.subset(hosts).num_gpus
        rows.append({"label": f"{TECHNIQUE_LABEL.get(technique, technique)} on {'+'.join(hosts)}", "status": r.status,
                     "technique": technique, "hosts": list(hosts), "gpus": gpus, "total_time_s": seconds,
                     "gpu_hours": seconds * gpus / 3600 if seconds else None, "record": r.run_id})
    rows.sort(key=lambda d: (d["total_time_s"] is None, d["total_time_s"] or 0))
    try:
        algorithm, missing = algorithm1(source, *[h.name for h in cluster.hosts], delta=delta).to_dict(), None
    except GeosimError as exc:
        algorithm, missing = None, exc.problem
    return {"scenario": cluster.name, "model": model.name, "measured": path, "options": rows,
            "best": rows[0] if rows and rows[0]["total_time_s"] else None,
            "algorithm1": algorithm, "algorithm1_missing": missing}


def _measured_total(record, workload: Workload) -> float | None:
    """A measured run's time for the workload's epochs (a run's start-up is counted once)."""
    if record.status != "ok":
        return None
    m, epochs = record.measured, record.workload.get("epochs")
    if "total_time_s" in m and epochs:
        return m["total_time_s"] * workload.epochs / epochs
    if "time_per_iteration_s" in m:
        return m["time_per_iteration_s"] * workload.iterations_per_epoch * workload.epochs
    return None
