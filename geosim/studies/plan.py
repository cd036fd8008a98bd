"""The planner: every feasible way to run the workload on a slice, ranked by predicted time.

Where Algorithm 1 probes five fixed configurations, the planner enumerates
technique x subset of VMs x (for Pipeshard) stage order x microbatches x
intra-stage parallelism x layer split, uneven splits included, so a slow VM can
take fewer layers. Out-of-memory options cost almost nothing: predict() builds the
schedule and checks memory before it simulates anything.

Over 400 lines: the search, its budget, the pruning by floors and the ranking of the rows asked with
the planner's options (issue 46), and those rows' retries at other microbatch counts under the same floors
(issue 47), are one algorithm.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from geosim.inputs.case import Case
from geosim.cost import LONG_PREDICTION_S
from geosim.base.errors import GeosimError
from geosim.predict import LongPrediction, deferring_long, predict, shared_floor, simulating_deferred
from geosim.studies.ranking import (SAME_TIME, MeasuredOption, Option, SameProgress, choice_vs_rtt, rank, rank_key, verdict,
                                   why_algorithm1_differs)
from geosim.studies.whatif import with_rtt
from geosim.base import units
from geosim.base.units import ms_to_s
from geosim.studies.select import MeasuredProbes, PredictedProbes, Selection, algorithm1, algorithm1_kinds
from geosim.inputs.structure import structured_subsets
from geosim.inputs.specs import Cluster, Model, Workload
from geosim.techniques import (default_techniques, is_low_communication, label, plan_floor_s, plan_variants,
                               technique_names)


EXHAUSTIVE_HOSTS = 2  # up to this many VMs (the study's slices) every subset and stage order is tried


def is_exhaustive(case: Case, exhaustive: bool | None = None) -> bool:
    """Whether the planner tries every subset of VMs and every order (None: where that is cheap)."""
    return len(case.cluster.hosts) <= EXHAUSTIVE_HOSTS if exhaustive is None else exhaustive


def shapes(case: Case, max_gpus: int | None = None, techniques: tuple[str, ...] | None = None,
           exhaustive: bool | None = None):
    """(technique, hosts) for each technique on each set of VMs worth planning on: every subset
    (twins planned once) where that is cheap, else geosim.inputs.structure.structured_subsets (by site and
    host group: how many hosts of each, never every combination)."""
    gpus = {h.name: len(h.gpus) for h in case.cluster.hosts}
    if is_exhaustive(case, exhaustive):
        subsets = _every_subset(case)
    else:
        subsets = structured_subsets(case.cluster, case.workload.precision)
    for subset in subsets:
        if max_gpus is not None and sum(gpus[h] for h in subset) > max_gpus:
            continue
        for technique in techniques or default_techniques():  # predict's, select's and plan's set
            yield technique, subset


def _every_subset(case: Case):
    hosts = [h.name for h in case.cluster.hosts]
    signature = _signature(case.cluster)
    seen = set()
    for size in range(1, len(hosts) + 1):
        for subset in itertools.combinations(hosts, size):
            # VMs with the same GPUs are interchangeable when nothing or one link joins them:
            # plan on the first and say it stands for its twins (twins() below)
            if size <= 2 and tuple(sorted(map(signature, subset))) in seen:
                continue
            seen.add(tuple(sorted(map(signature, subset))))
            yield subset


def synchronous_techniques() -> list[str]:
    """The techniques that compute Data's synchronous update (token efficiency 1)."""
    return [t for t in technique_names() if not is_low_communication(t)]


def candidates(case: Case, max_gpus: int | None = None, choices: dict | None = None,
               techniques: tuple[str, ...] | None = None, exhaustive: bool | None = None):
    """Every option: (technique, hosts, workload changes, predict options). A technique's variants
    (Pipeshard: stage order x microbatches x intra-stage x layer split) come from its module's
    plan_variants(); `choices` go to it as keyword arguments (e.g. intra_stages), and so does
    `exhaustive` (every variant, or the structured few) where it takes one."""
    every = is_exhaustive(case, exhaustive)
    # a layout asked with its microbatch count (--microbatches given): that configuration, on each set of hosts
    fixed = (choices or {}).get("fixed_microbatches")
    for technique, hosts in shapes(case, max_gpus, techniques, every):
        for changes, options in plan_variants(technique, case, hosts, **{**(choices or {}), "exhaustive": every}):
            if fixed and changes.get("microbatches", case.workload.microbatches) != case.workload.microbatches:
                continue
            yield technique, hosts, changes, options


def _signature(cluster: Cluster):
    """A host's interchangeability key; sortable across hosts (a value a host leaves unset, None, sorts
    before every number, so hosts that state a window and hosts that do not can be compared)."""
    def stated(value):
        return (value is not None, value if value is not None else 0)

    by_name = {h.name: (tuple(g.name for g in h.gpus), str(h.intra_host), str(h.transport), stated(h.nic_bps),
                        stated(h.tcp_window_bytes), stated(h.kernel_window))
               for h in cluster.hosts}
    return by_name.__getitem__


def twins(cluster: Cluster) -> list[list[str]]:
    """Groups of VMs with the same GPUs: the planner lists options on the first of each group only."""
    signature, groups = _signature(cluster), {}
    for h in cluster.hosts:
        groups.setdefault(signature(h.name), []).append(h.name)
    return [g for g in groups.values() if len(g) > 1]


def evaluate(case: Case, technique: str, hosts: tuple[str, ...], changes: dict, options: dict | None,
             progress: SameProgress | None = None) -> Option:
    """One option predicted, with the token efficiency it is ranked at (ranking.SameProgress)."""
    workload = replace(case.workload, **changes) if changes else case.workload
    return _option(case.with_(workload=workload), technique, hosts, changes, options, progress)


def _option(asked: Case, technique: str, hosts: tuple[str, ...], changes: dict, options: dict | None,
            progress: SameProgress | None) -> Option:
    """evaluate() on the case with the changes already made (`asked`: the same object for a question asked
    twice inside deferring_long, whose schedule predict keeps by the case's identity)."""
    prediction = predict(asked, technique, hosts=hosts, options=options)
    progress = progress or SameProgress(asked.params)
    return Option(technique, tuple(hosts), dict(changes), options, prediction, asked.workload,
                  progress.efficiency(prediction), progress.target_tokens)


def floor_s(case: Case, technique: str, hosts: tuple[str, ...], changes: dict, options: dict | None,
            progress: SameProgress | None = None) -> float:
    """A floor under an option's ranked time (its module's plan_floor_s; 0 if it has none). The
    ranked time stretches the run by 1 / efficiency, so the floor holds divided by the most the
    technique's efficiency can be, when that is above 1."""
    workload = replace(case.workload, **changes) if changes else case.workload
    floor = shared_floor(case.with_(workload=workload) if changes else case, technique, hosts, options,
                         lambda: plan_floor_s(technique, case, hosts, workload, options))
    best = (progress or SameProgress(case.params)).best_efficiency(technique)
    # the floor F = start-up s + X bounds the workload's run, X <= its training time T - s; a run's time to
    # r x the workload's tokens at efficiency e <= best is s + r (T - s) / e >= min(1, r / best) x F
    # (r = 1 without a target: F / max(1, best))
    r = 1.0
    if progress is not None and progress.target_tokens is not None:
        r = progress.target_tokens / (workload.iterations_per_epoch * workload.epochs * workload.tokens_per_iteration)
    return floor * min(1.0, r / best)


def robustness(plan: "Plan", draws: list, contenders: int = 8, on_draw=None) -> dict:
    """Re-rank the plan's best `contenders` options under each parameter draw (the ranking's rule):
    how often its best option (by technique and VMs) still wins, and what wins otherwise.
    on_draw(done, total), if given, after each draw (progress, a cost estimate)."""
    from collections import Counter

    if plan.best is None:
        return {"draws": 0, "share": 0.0, "others": {}}
    top = plan.options[:contenders]
    winners = []
    for params in draws:
        case = plan.case.with_(params=params)
        progress = SameProgress(params, plan.progress.overrides, plan.progress.measured, plan.progress.target_tokens)
        ranked = rank([evaluate(case, o.technique, o.hosts, o.changes, o.options, progress) for o in top],
                      plan.deadline_s)
        winners.append(ranked[0].kind if ranked else "none fits")
        if on_draw is not None:
            on_draw(len(winners), len(draws))
    counts = Counter(winners)
    best = plan.best.kind
    return {"draws": len(winners), "contenders": len(top), "share": counts.get(best, 0) / len(winners),
            "others": {k: v / len(winners) for k, v in counts.most_common() if k != best}}


MAX_CANDIDATES = 50_000  # options the planner will weigh (a floor each); beyond, it asks to be narrowed
# the structured search simulates at most this many options, lowest floors first, and says how many
# it left whose floors did not rule them out (a 1,024-GPU option costs seconds to simulate)
STRUCTURED_BUDGET = 48
# an option (not a row asked) whose simulation is expected to take more CPU seconds than this (its work count,
# geosim.cost.expected_seconds) is not simulated; the plan says how many such were left and the largest (issue
# 44: 2,048-GPU options took 40 s each on a 4,096-GPU question; --max-gpus or --technique reach them)
PLANNER_LONG_S = 6 * LONG_PREDICTION_S
# the expected CPU seconds (geosim.cost.expected_seconds, summed over the options simulated, the rows asked not
# counted) the whole search may spend on options the user did not ask; an option that would pass it is left,
# counted in `unsettled` with the structured budget's, and the search goes on with options that still fit.
# A count, not a clock: the answer is the same on any machine.
# Issue 44 bounds a command by 60 s of CPU; the estimate errs long for Data's large rings (geosim.cost), so the
# budget is sized on answers that must not move (2 shared cores; docs/results/2026-11-28-verdict-speed.md): the
# options simulated on bench/bench_every_row.py's 128-GPU case are expected 11.7 s in all, on its 1,024-GPU case
# 26.1 s, and on `predict --scenario scale:1x256x16 --technique data --hosts all` 80.6 s (its verdict, Data on
# 1,024 GPUs, expected 64.5 s, took 4.1 s). What one option may take (PLANNER_LONG_S), the search may in all.
SEARCH_BUDGET_S = PLANNER_LONG_S


@dataclass
class Search:
    simulated: list[Option]
    considered: int  # every candidate, simulated or not
    pruned: int  # never simulated: their floor ranks below the top `keep` already found
    seconds: float = 0.0  # wall time of the search
    exhaustive: bool = True  # every subset and order, or the structured search
    unsettled: int = 0  # never simulated though their floor could still beat the options kept (budget)
    long: int = 0  # never simulated though their floor could still rank: each expected past PLANNER_LONG_S
    longest: tuple | None = None  # of those: (technique, GPUs, expected CPU seconds) of the longest
    expected_s: float = 0.0  # expected CPU seconds of the options simulated (the rows asked not counted)
    over_budget: int = 0  # of `unsettled`: those left because they would have passed SEARCH_BUDGET_S


def search(case: Case, max_gpus: int | None = None, keep: int | None = 10, deadline_s: float | None = None,
           choices: dict | None = None, techniques: tuple[str, ...] | None = None,
           progress: Callable[..., None] | None = None, same_progress: SameProgress | None = None,
           exhaustive: bool | None = None, budget: int | None = -1, asked: list[tuple] = ()) -> Search:
    """Simulate candidates in order of their floor; stop once no floor can reach the top `keep`.
    The floor only ever underestimates, so nothing that belongs in the top `keep` is skipped;
    keep=None simulates everything. More than MAX_CANDIDATES candidates: a one-line error
    naming what narrows the search, before anything is simulated. `budget` caps the simulations
    (-1: none for the exhaustive search, STRUCTURED_BUDGET for the structured one; None: none).
    Options not asked are also bounded by SEARCH_BUDGET_S, the expected CPU seconds of those simulated
    (geosim.cost.expected_seconds, known from each one's build before it is simulated): one that would pass
    it is left, and the search goes on with the cheaper ones. What either budget leaves unsimulated though
    its floor could still rank is counted in `unsettled`.
    `asked` (geosim.studies.asked.asked_candidates: the techniques on the host sets and layout the user
    asked) join the candidates and are never left to the budget: the verdict cannot be slower than a
    row the user asked that runs (only their floors prune them, which never hides a better one)."""
    started = time.perf_counter()
    key = rank_key(deadline_s)
    every = is_exhaustive(case, exhaustive)
    if budget == -1:
        budget = None if every or keep is None else STRUCTURED_BUDGET
    todo, seen = [], set()
    for args, seeded in itertools.chain(((a, True) for a in asked),
                                        ((a, False) for a in candidates(case, max_gpus, choices, techniques, every))):
        if seeded and max_gpus is not None and _gpus_of(case, args[1]) > max_gpus:
            continue
        if (k := candidate_key(case, *args)) in seen:
            continue
        seen.add(k)
        if len(todo) >= MAX_CANDIDATES:
            raise GeosimError(f"the plan would weigh more than {MAX_CANDIDATES:,} options on "
                              f"{len(case.cluster.hosts)} VMs; narrow it with --technique, --max-gpus, "
                              f"--intra-stage or a smaller scenario", source="plan")
        todo.append((floor_s(case, *args, same_progress), args, seeded))
        if progress and len(todo) % 200 == 0:
            progress(len(todo), None, "weighed")
    gpus_of = _gpus_counter(case)
    todo.sort(key=lambda fa: key(fa[0], gpus_of(fa[1][1])))
    best: list[tuple] = []  # keys of the best feasible options so far, sorted, at most `keep`

    def could_rank(floor: float, args: tuple) -> bool:
        """Whether an option of this floor could still be among the `keep` best found so far."""
        return keep is None or len(best) < keep or key(floor, gpus_of(args[1])) <= best[-1]

    simulated, spent, left, slow = [], 0, [], []
    expected, over = 0.0, []  # expected CPU seconds of the options simulated; those left past SEARCH_BUDGET_S
    for i, (floor, args, seeded) in enumerate(todo):
        if not could_rank(floor, args):
            break
        if budget is not None and spent >= budget and best and not seeded:
            left.append((floor, args))
            continue
        if seeded:  # a row asked is answered whatever it costs (asked_rows announced it)
            option = evaluate(case, *args, same_progress)
        else:
            technique, hosts, changes, options = args
            asked_case = case.with_(workload=replace(case.workload, **changes)) if changes else case
            # its expected seconds are known after its build and memory check (deferring_long(0)); the
            # schedule built is kept for the second asking, which simulates it
            with deferring_long(0.0):
                try:
                    option = _option(asked_case, technique, hosts, changes, options, same_progress)
                except LongPrediction as long:
                    if long.seconds > PLANNER_LONG_S:  # expected to simulate for long: left, said (geosim.cost)
                        slow.append((floor, args, long.seconds))
                        continue
                    if expected + long.seconds > SEARCH_BUDGET_S:
                        # past the search's budget of expected seconds: left; a cheaper option after it may
                        # still fit in what is left (the estimate errs long on large rings: geosim.cost)
                        over.append((floor, args))
                        continue
                    expected += long.seconds
                    with simulating_deferred():
                        option = _option(asked_case, technique, hosts, changes, options, same_progress)
        simulated.append(option)
        spent += option.ok  # an infeasible or out-of-memory option costs a build, not a simulation
        if option.ok:
            # options that tie exactly (the hybrid where it is SparseLoCo) count once: the verdict names
            # one of them and a runner-up that differs, which the search must then not prune
            best = sorted(set(best + [key(option.ranked_time_s, option.gpus)]))[:keep]
        if progress:
            progress(len(simulated), len(todo))
    # left by the budget: those whose floor could still rank among the options kept are unsettled
    over_budget = sum(1 for f, a in over if could_rank(f, a))
    unsettled = sum(1 for f, a in left if could_rank(f, a)) + over_budget
    # left as long: those whose floor could still rank among the options kept (the rest are pruned)
    slow = [(f, a, s) for f, a, s in slow if could_rank(f, a)]
    longest = max(slow, key=lambda x: x[2], default=None)
    return Search(simulated, len(todo), len(todo) - len(simulated) - unsettled - len(slow),
                  time.perf_counter() - started, every, unsettled=unsettled, long=len(slow),
                  longest=(longest[1][0], _gpus_of(case, longest[1][1]), longest[2]) if longest else None,
                  expected_s=expected, over_budget=over_budget)


def candidate_key(case: Case, technique: str, hosts: tuple[str, ...], changes: dict, options: dict | None) -> tuple:
    """What makes two candidates the same run: a microbatch count equal to the workload's is no change."""
    changes = {k: v for k, v in changes.items() if getattr(case.workload, k, None) != v}
    return technique, tuple(hosts), repr(sorted(changes.items())), repr(options)


def _gpus_of(case: Case, hosts: tuple[str, ...]) -> int:
    return sum(len(case.cluster.host(h).gpus) for h in hosts)


def _gpus_counter(case: Case):
    """_gpus_of(case, hosts), each set of hosts counted once: the search asks for thousands of
    options over a few dozen sets."""
    counted: dict[tuple, int] = {}

    def gpus_of(hosts: tuple[str, ...]) -> int:
        n = counted.get(hosts)
        if n is None:
            n = counted[hosts] = _gpus_of(case, hosts)
        return n

    return gpus_of


def parse_duration(text: str) -> float:
    """--deadline: '36h', '90min', '5400s', '1.5d'; a bare number is hours. Returns seconds."""
    # a deadline of 0 would be no deadline at all; 100 years is past any training run
    return units.parse_duration(text, "--deadline", bare="h", low=0.0, high=100 * 365 * 86400.0, exclusive_low=True)


@dataclass
class Plan:
    case: Case
    options: list[Option]  # feasible ones, best first
    failed: dict[str, int]  # status -> how many options predicted it
    deadline_s: float | None
    max_gpus: int | None
    algorithm: Selection | None  # Algorithm 1 on predicted probes (on every VM of the slice: select.algorithm1)
    algorithm_option: Option | None  # its choice, predicted for the same workload
    considered: int  # candidate options, simulated or pruned
    pruned: int  # never simulated: even their compute-only floor ranks below the options kept
    progress: SameProgress = SameProgress()  # what the options are ranked on (ranking.time_to_progress_s)
    simulated: int = 0  # options simulated (feasible or not)
    unsettled: int = 0  # left unsimulated by the structured search's budget though their floor could rank
    seconds: float = 0.0  # wall time of the search
    exhaustive: bool = True  # every subset and order was tried (else the structured search)
    # asked rows that fail on divisibility, each with the best microbatch count that runs it (None: none does)
    retried: list = field(default_factory=list)
    long: int = 0  # left unsimulated: each expected to take past PLANNER_LONG_S (Search.long)
    longest: tuple | None = None  # (technique, GPUs, expected CPU seconds) of the longest of them
    expected_s: float = 0.0  # Search.expected_s
    over_budget: int = 0  # Search.over_budget: of `unsettled`, those SEARCH_BUDGET_S left

    def long_line(self) -> str | None:
        """What the search left because it would take long, each option or all of them together
        (SEARCH_BUDGET_S: budget_line), in one line (None when nothing was)."""
        if not self.long:
            return self.budget_line()
        technique, gpus, seconds = self.longest
        line = (f"the planner left {self.long:,} option{'s' if self.long != 1 else ''} unsimulated, {'each' if self.long != 1 else 'it'} expected to "
                f"take over {PLANNER_LONG_S:g} s of CPU (the longest, {label(technique)} on {gpus:,} GPUs, about "
                f"{seconds:,.0f} s; an estimate from its work count); ask --max-gpus or --technique to weigh "
                f"{'them' if self.long != 1 else 'it'}")
        budget = self.budget_line()
        return line if budget is None else f"{line}; and {budget[len('the planner '):]}"

    def budget_line(self) -> str | None:
        """The options SEARCH_BUDGET_S left, in one line (None when it left none that could rank)."""
        if not self.over_budget:
            return None
        n = self.over_budget
        return (f"the planner left {n:,} option{'s' if n != 1 else ''} unsimulated past its budget of "
                f"{SEARCH_BUDGET_S:g} s of expected CPU for the options not asked ({self.expected_s:,.1f} s "
                f"spent; estimates from their work counts), though {'their floors' if n != 1 else 'its floor'} "
                f"could still rank; ask --max-gpus or --technique to weigh {'them' if n != 1 else 'it'}")

    def search_line(self) -> str:
        """How much the planner looked at: options weighed, simulated, pruned, and how long it took."""
        how = "every subset and order" if self.exhaustive else "structured by site and host group"
        budgets = " and ".join(([f"of {STRUCTURED_BUDGET}"] if self.unsettled > self.over_budget else []) + (
            [f"of {SEARCH_BUDGET_S:g} s of expected CPU for the options not asked"] if self.over_budget else []))
        left = (f", {self.unsettled:,} left unsimulated by the budget {budgets} (their floors do not "
                f"rule them out)" if self.unsettled else "")
        return (f"search ({how}): {self.considered:,} options weighed, {self.simulated:,} simulated, "
                f"{self.pruned:,} pruned by their floor{left}"
                + (f", {self.long:,} left as too long to simulate (over {PLANNER_LONG_S:g} s each)" if self.long else "")
                + f", in {self.seconds:.2f} s")

    @property
    def best(self) -> Option | None:
        return self.options[0] if self.options else None

    @property
    def meets_deadline(self) -> list[Option]:
        if self.deadline_s is None:
            return self.options
        return [o for o in self.options if o.ranked_time_s <= self.deadline_s]

    def verdict(self, where: str | None = None, estimate: str = "predicted") -> str:
        """The one line a slice's answer starts with (geosim.studies.ranking.verdict)."""
        line = verdict(where or self.case.cluster.name, self.options, estimate=estimate,
                       algorithm=self.algorithm.label if self.algorithm else None,
                       algorithm_option=self.algorithm_option)
        if not self.options and self.long:  # not "none runs": some were never simulated (long_line says which)
            line += f"; {self.long:,} option{'s' if self.long != 1 else ''} left unsimulated as too long to simulate"
        return line

    def why_algorithm1_differs(self) -> str | None:
        """Why Algorithm 1's choice is not the planner's best, in one sentence (None when they agree)."""
        if self.best is None or self.algorithm is None:
            return None
        hosts = [h.name for h in self.case.cluster.hosts]
        return why_algorithm1_differs(self.best, self.algorithm, self.algorithm_option, algorithm1_kinds(*hosts))

    def comparison(self) -> str:
        """One sentence: how Algorithm 1's choice compares with the planner's best."""
        best, algo, chosen = self.best, self.algorithm, self.algorithm_option
        if algo is None:
            return (f"Algorithm 1 (a pipeline stage per VM) is not weighed past {ALGORITHM1_HOSTS} VMs; "
                    f"`geosim select` runs it.")
        if best is None:
            return f"Algorithm 1 picks {algo.label}; the planner finds no feasible option either."
        if chosen is None or not chosen.ok:
            return f"Algorithm 1 picks {algo.label}; the planner's best is {best.label} ({_hours(best.ranked_time_s)})."
        ratio = chosen.ranked_time_s / best.ranked_time_s
        if ratio <= 1.0 + 1e-9:
            return f"Algorithm 1 picks {algo.label} ({_hours(chosen.ranked_time_s)}), as fast as the planner's best."
        return (f"Algorithm 1 picks {algo.label}: {_hours(chosen.ranked_time_s)}, {ratio:.2f}x the planner's best "
                f"({_hours(best.ranked_time_s)}, {_hours(chosen.ranked_time_s - best.ranked_time_s)} more).")

    def to_dict(self) -> dict:
        return {"scenario": self.case.cluster.name, "model": self.case.model.name, "considered": self.considered,
                "pruned": self.pruned, "simulated": self.simulated, "search_seconds": self.seconds,
                "search": "exhaustive" if self.exhaustive else "structured", "unsettled": self.unsettled,
                "unsimulated_long": self.long, "search_expected_s": self.expected_s,
                "search_budget_left": self.over_budget, "failed": self.failed, "deadline_s": self.deadline_s, "max_gpus": self.max_gpus,
                "best": self.best.to_dict() if self.best else None,
                "algorithm1": self.algorithm.to_dict() if self.algorithm else None,
                "algorithm1_option": self.algorithm_option.to_dict() if self.algorithm_option else None,
                "comparison": self.comparison(), "verdict": self.verdict("verdict"),
                "why_algorithm1_differs": self.why_algorithm1_differs(), "options": [o.to_dict() for o in self.options]}


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


# Algorithm 1 probes Pipeshard with a stage per VM: past this many VMs (predict's "each alone" rows stop there too)
# the planner does not put it beside the verdict; `geosim select` still runs it when asked
ALGORITHM1_HOSTS = 16


def algorithm_choice(case: Case, delta: float, progress: SameProgress | None = None
                     ) -> tuple[Selection | None, Option | None]:
    """Algorithm 1 on predicted probes, and its choice predicted for the full workload."""
    hosts = [h.name for h in case.cluster.hosts]
    if len(hosts) > ALGORITHM1_HOSTS:
        return None, None
    selection = algorithm1(PredictedProbes(case.cluster, case.model, case.workload, case.params), *hosts, delta=delta)
    if selection.technique is None:
        return selection, None
    return selection, evaluate(case, selection.technique, selection.hosts, {}, None, progress)


def make_plan(case: Case, deadline_s: float | None = None, max_gpus: int | None = None, delta: float = 0.1,
              keep: int | None = 10, choices: dict | None = None,
              techniques: tuple[str, ...] | None = None, progress: Callable[[int, int], None] | None = None,
              same_progress: SameProgress | None = None, exhaustive: bool | None = None,
              asked: list[tuple] = ()) -> Plan:
    """Rank every option (geosim.studies.ranking's rule: time to the same training progress) and put
    Algorithm 1's choice beside the best. `choices` go to the techniques' plan_variants() (Pipeshard:
    intra_stages); `same_progress` says what progress is (default: the workload's tokens, efficiencies
    from the parameters file)."""
    same_progress = same_progress or SameProgress(case.params)
    found = search(case, max_gpus, keep, deadline_s, choices, techniques, progress, same_progress, exhaustive,
                   asked=asked)
    failed: dict[str, int] = {}
    for o in found.simulated:
        if not o.ok:
            failed[o.prediction.status] = failed.get(o.prediction.status, 0) + 1
    # an asked row that fails only on divisibility at the workload's microbatches: the counts that run
    retried = other_microbatches(case, found.simulated, asked, same_progress, keep, deadline_s)
    ok = _one_each(rank(found.simulated + [o for _, o in retried if o is not None and o.ok], deadline_s))
    selection, chosen = algorithm_choice(case, delta, same_progress)
    return Plan(case, ok, failed, deadline_s, max_gpus, selection, chosen,
                considered=found.considered, pruned=found.pruned, progress=same_progress,
                simulated=len(found.simulated), seconds=found.seconds, exhaustive=found.exhaustive,
                unsettled=found.unsettled, retried=retried, long=found.long, longest=found.longest,
                expected_s=found.expected_s, over_budget=found.over_budget)


def _one_each(ranked: list[Option]) -> list[Option]:
    """A row asked and the planner's variant that is the same run (the asked layout with its default layer
    split spelled out) listed once, under the planner's fuller label."""
    def run_of(o: Option) -> tuple:
        p = o.prediction
        return o.technique, o.hosts, o.workload.microbatches, p.total_time_s, p.peak_memory_gib, p.description

    fuller: dict[tuple, Option] = {}
    for o in ranked:
        held = fuller.get(run_of(o))
        if held is None or len(o.options or {}) + len(o.changes) > len(held.options or {}) + len(held.changes):
            fuller[run_of(o)] = o
    kept = {id(o) for o in fuller.values()}
    return [o for o in ranked if id(o) in kept]


OTHER_COUNTS_RUN = 2  # a row failing on divisibility: this many other microbatch counts that run are weighed


@dataclass
class Unsimulated:
    """The microbatch counts at which an asked row runs (its build and memory check pass), none of them
    simulated: even the least of their floors ranks below the `keep` best options, so none could change
    the ranking's top (or the verdict); what other_microbatches gives in place of the faster of them."""

    microbatches: tuple[int, ...]
    floor_s: float  # the least of their floors, on the ranking's measure (floor_s)
    keep: int
    ok: bool = False  # not an option that ran: never ranked


def other_microbatches(case: Case, simulated: list[Option], asked: list[tuple],
                       progress: SameProgress | None, keep: int | None = None,
                       deadline_s: float | None = None) -> list[tuple[Option, Option | Unsimulated | None]]:
    """For each asked row that did not run because a batch does not divide (global_batch / microbatches
    over the GPUs or replicas), the faster of the nearest microbatch counts that run it (the divisors of
    the global batch, nearest the asked count first, until OTHER_COUNTS_RUN of them run: a count that does
    not divide fails when its schedule is built, one out of memory before it is simulated, so only those
    few runs are simulated; every divisor simulated made a 128-GPU question 10x slower): (the row as asked,
    the row at that count); where none runs, the first count at which the batch divides but the run fails
    otherwise (out of memory), else None. The verdict ranks what runs, so it is never slower than a row it
    offers.

    Which counts run is known before simulating (predict's build and memory check, deferring_long(0)).
    With `keep` (the search's), a count is simulated only where its floor could still place it: among
    the `keep` best (the search's options that fit and the rows already settled; floor_s never
    overestimates), and ahead of its own row's best so far. What is skipped could rank nowhere the
    answer shows: the verdict, its runner-up and the `keep` best are what simulating every count gives
    (tests/test_plan_speed.py). A row none of whose counts needs simulating gets an Unsimulated."""
    wanted = {candidate_key(case, *a) for a in asked}
    asked_count = case.workload.microbatches
    rows = []  # (the row, the counts that run, the first count that divides but fails otherwise)
    for o in simulated:
        if o.ok or "divisible" not in (o.prediction.reason or "") or o.changes or \
                candidate_key(case, o.technique, o.hosts, o.changes, o.options) not in wanted:
            continue
        batch = case.workload.global_batch
        counts = sorted((m for m in range(1, min(batch, 4096) + 1) if batch % m == 0 and m != asked_count),
                        key=lambda m: (abs(math.log(m / asked_count)), m))
        runs, divides = [], None
        for m in counts:
            x = _unless_it_runs(case, o, m, progress)
            if x is None or x.ok:
                runs.append((m, x))
                if len(runs) == OTHER_COUNTS_RUN:
                    break
            elif divides is None and "divisible" not in (x.prediction.reason or ""):
                divides = x  # none runs: the first count that divides but fails otherwise (out of memory)
        rows.append((o, runs, divides))
    key = rank_key(deadline_s)
    fits = [(key(x.ranked_time_s, x.gpus), x.ranked_time_s) for x in simulated
            if x.ok and x.prediction.memory_verdict != "may not fit"]
    floors = {}
    if keep is not None:
        floors = {(i, m): key(floor_s(case, o.technique, o.hosts, {"microbatches": m}, o.options, progress), o.gpus)
                  for i, (o, runs, _) in enumerate(rows) for m, x in runs if x is None}
    out: dict[int, tuple] = {}
    # the rows whose counts have the lowest floors first: their answers set the bar for the others
    for i in sorted(range(len(rows)), key=lambda i: min((floors.get((i, m), ()) for m, _ in rows[i][1]), default=())):
        o, runs, divides = rows[i]
        bar = _kth_apart(fits, keep) if keep is not None else None
        ran, skipped = [], []
        for m, x in sorted(runs, key=lambda r: floors.get((i, r[0]), ())):
            floor = floors.get((i, m))
            best = rank([x for _, x in ran])[0] if ran else None
            if floor is not None and ((bar is not None and floor > bar) or (
                    best is not None and best.prediction.memory_verdict != "may not fit"
                    and floor > key(best.ranked_time_s, best.gpus))):
                skipped.append(m)  # it ranks below the `keep` best, or below its own row's best: never shown
                continue
            x = x or evaluate(case, o.technique, o.hosts, {"microbatches": m}, o.options, progress)
            if not x.ok:  # refused in the engine (geosim.cost's bound on what it would expand)
                return _every_count(case, rows, progress)
            ran.append((m, x))
        if ran:
            # the order the counts were found in, nearest first, as ties are broken when every count runs
            best = rank([x for m, x in sorted(ran, key=lambda r: [c for c, _ in runs].index(r[0]))])[0]
            out[i] = (o, best)
            if best.prediction.memory_verdict != "may not fit":
                fits.append((key(best.ranked_time_s, best.gpus), best.ranked_time_s))
        elif runs:
            least = min(floor_s(case, o.technique, o.hosts, {"microbatches": m}, o.options, progress) for m in skipped)
            out[i] = (o, Unsimulated(tuple(m for m, _ in runs), least, keep))
        else:
            out[i] = (o, divides)
    return [out[i] for i in range(len(rows))]


def _kth_apart(fits: list[tuple], k: int) -> tuple | None:
    """The k-th best of the (rank key, time) pairs counting times closer than SAME_TIME as one (the
    verdict names no runner-up that is the best's own run), None when there are fewer than k."""
    apart = []
    for pair in sorted(fits):
        if not apart or pair[1] - apart[-1][1] > SAME_TIME * apart[-1][1]:
            apart.append(pair)
    return apart[k - 1][0] if len(apart) >= k else None


def _unless_it_runs(case: Case, row: Option, m: int, progress: SameProgress | None) -> Option | None:
    """The row at m microbatches where it fails before simulating (its build or memory check), as
    evaluate() answers it; None where it would be simulated (not simulated here)."""
    with deferring_long(0.0):
        try:
            return evaluate(case, row.technique, row.hosts, {"microbatches": m}, row.options, progress)
        except LongPrediction:
            return None


def _every_count(case: Case, rows: list, progress: SameProgress | None) -> list:
    """other_microbatches as it was before its bounds: each count simulated in order until enough run
    (where a count that passes its build and memory check is then refused in the engine)."""
    out = []
    for o, _, _ in rows:
        batch, asked_count = case.workload.global_batch, case.workload.microbatches
        counts = sorted((m for m in range(1, min(batch, 4096) + 1) if batch % m == 0 and m != asked_count),
                        key=lambda m: (abs(math.log(m / asked_count)), m))
        runs, divides = [], None
        for m in counts:
            x = evaluate(case, o.technique, o.hosts, {"microbatches": m}, o.options, progress)
            if x.ok:
                runs.append(x)
                if len(runs) == OTHER_COUNTS_RUN:
                    break
            elif divides is None and "divisible" not in (x.prediction.reason or ""):
                divides = x
        out.append((o, rank(runs)[0] if runs else divides))
    return out


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
        rows.append({"label": f"{label(technique)} on {'+'.join(hosts)}", "status": r.status,
                     "technique": technique, "hosts": list(hosts), "gpus": gpus, "total_time_s": seconds,
                     "gpu_hours": seconds * gpus / 3600 if seconds else None, "record": r.run_id})
    rows.sort(key=lambda d: (d["total_time_s"] is None, d["total_time_s"] or 0))
    try:
        algorithm, missing = algorithm1(source, *[h.name for h in cluster.hosts], delta=delta).to_dict(), None
    except GeosimError as exc:
        algorithm, missing = None, exc.problem
    ranked = [MeasuredOption(d["label"], d["label"], d["gpus"], d["total_time_s"]) for d in rows if d["total_time_s"]]
    chosen = next((o for o in ranked if algorithm and o.label == algorithm["label"]), None)
    line = verdict("verdict", ranked, estimate="measured", algorithm=algorithm["label"] if algorithm else None,
                   algorithm_option=chosen)
    return {"scenario": cluster.name, "model": model.name, "measured": path, "options": rows, "verdict": line,
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


# -- the answer against RTT ------------------------------------------------------------------


def answer_vs_rtt(case: Case, rtts_ms: list[float], plan_at: Callable[[Case, float], Plan],
                  algorithm1_flips: bool = True, locate: bool = True) -> dict:
    """The planner's best and Algorithm 1's choice at each RTT, and where each flips (the same
    bisection for both; locate=False leaves flips bracketed by the RTTs given). plan_at(case at the RTT, rtt_ms) -> Plan. What plan and select
    --sweep-rtt print, so the two commands give one answer."""
    plans: dict[float, Plan] = {}

    def at(rtt_ms: float) -> Plan:
        if rtt_ms not in plans:
            plans[rtt_ms] = plan_at(case.with_(cluster=with_rtt(case.cluster, ms_to_s(rtt_ms))), rtt_ms)
        return plans[rtt_ms]

    rows, flips = choice_vs_rtt(rtts_ms, lambda r: ((at(r).best.kind if at(r).best else "none"), at(r)), locate=locate)
    algorithm_flips = choice_vs_rtt(rtts_ms, lambda r: ((at(r).algorithm.label if at(r).algorithm else "-"), None))[1] \
        if algorithm1_flips else []
    return {"scenario": case.cluster.name, "model": case.model.name,
            "rows": [{"rtt_ms": r, "best": kind, "best_option": p.best.label if p.best else None,
                      "total_time_s": p.best.ranked_time_s if p.best else None,
                      "algorithm1": p.algorithm.label if p.algorithm else None,
                      "algorithm1_total_time_s": p.algorithm_option.ranked_time_s
                      if p.algorithm_option and p.algorithm_option.ok else None,
                      "verdict": p.verdict(f"{r:g} ms")} for r, kind, p in rows],
            "flips": [{"between_ms": [lo, hi], "below": a, "above": b} for lo, hi, a, b in flips],
            "algorithm1_flips": [{"between_ms": [lo, hi], "below": a, "above": b} for lo, hi, a, b in algorithm_flips]}
