"""What the user asked beside what the planner found.

A command's rows are the technique(s) on the host sets the user named, simulated as named,
whatever the cluster's size: "how long on all 96 GPUs?" gets that answer, not the planner's best
layout on fewer GPUs. The verdict is the planner's best and may use other hosts or another
microbatch count; where it does, verdict_notes() says so and by how much the asked rows trail it,
on the ranking's own measure (time to the same training progress).
"""

from __future__ import annotations

from dataclasses import replace

from geosim.inputs.case import Case
from geosim.predict import LongPrediction, Prediction, deferring_long, predict, simulating_deferred
from geosim.inputs.structure import host_list
from geosim.studies.ranking import Option, SameProgress, fmt_time, margin, startup_note, time_to_progress_s
from geosim.base.errors import GeosimError
from geosim.techniques import label, layout_options

# the study's models (Table II is gpt2m; gpt2L and gpt2l its larger runs), by their names and aliases: they keep the
# study's workload (20 epochs of 650,000 tokens) when no workload is given, so its answers stay to the bit
STUDY_MODELS = frozenset({"gpt2m", "gpt2-medium", "gpt2L", "study-gpt2L-30", "gpt2l", "study-gpt2l-26"})


def scales_workload(scenario, model, given: dict) -> bool:
    """Whether the workload is the default that scales with the model: a model outside the study, and
    neither the scenario's [workload] nor the question (`given`: flags, a sweep's axes) says how many
    tokens to train (epochs, tokens_per_epoch). The study's 13M tokens would make a large model's verdict
    a matter of start-up (DiLoCo at H = 100 would synchronise about once), so it trains Chinchilla's 20
    tokens per parameter: the study's 20 epochs, each of as many tokens as the model has parameters."""
    asked = {**scenario.workload_overrides, **{k: v for k, v in given.items() if v is not None}}
    return model.name not in STUDY_MODELS and "epochs" not in asked and "tokens_per_epoch" not in asked


def scaled_tokens_per_epoch(model) -> int:
    """The scaled default's epoch: num_params tokens, so 20 epochs are convergence.CHINCHILLA_TOKENS_PER_PARAM
    (20) tokens per parameter."""
    return max(1, int(model.num_params))


def scaled_workload_note(model) -> str:
    return (f"workload: Chinchilla's 20 tokens per parameter ({20 * model.num_params:.3g} tokens), the default for a "
            f"model outside the study; --epochs and --tokens-per-epoch set another")


# the "each VM alone" rows multiply the work by the VMs: past this many, only the whole slice is asked
MAX_ALONE_ROWS = 16


def default_host_sets(cluster) -> list[tuple[str, ...]]:
    """What predict's rows ask by default (--hosts all,each) and what plan and select seed their search
    with, so the three weigh the same rows: all the VMs together, then each alone (up to MAX_ALONE_ROWS
    VMs; past that, the whole cluster only)."""
    names = tuple(h.name for h in cluster.hosts)
    if len(names) > MAX_ALONE_ROWS:
        return [names]
    return list(dict.fromkeys([names] + [(n,) for n in names]))


def asked_candidates(case: Case, techniques: tuple[str, ...], host_sets: list[tuple[str, ...]],
                     layout: dict | None = None) -> list[tuple]:
    """The rows asked as the planner's candidates (technique, hosts, changes, options): each technique on
    each host set at the workload's microbatches, with the layout asked where it fits those hosts (one
    that fits none of them is the layout's mistake, refused before: cli.common.check_layout_plannable).
    The planner's search never leaves them to its budget, so the verdict is never slower than a row
    that runs."""
    out, alone = [], set()
    for hosts in host_sets:
        if len(hosts) == 1:  # a VM alone crosses no link: of VMs with the same hardware, the first stands for all
            twin = repr(replace(case.cluster.host(hosts[0]), name="", site=""))
            if twin in alone:
                continue
            alone.add(twin)
        for technique in techniques:
            try:
                options = layout_options(technique, case, hosts, **layout) if layout else None
            except GeosimError:
                continue
            out.append((technique, tuple(hosts), {}, options))
    return out


def asked_rows(case: Case, techniques: tuple[str, ...], host_sets: list[tuple[str, ...]],
               options_for=None, on_row=None, on_long=None) -> list[Prediction]:
    """Each technique on each asked host set, at the workload's own microbatches and the technique's
    default layout or the one asked (options_for(technique, hosts) -> per-run options): the question as
    asked (a row that cannot run says why in its reason). Rows expected to take long (their work count,
    geosim.cost.long_prediction) run after the others: on_long(technique, hosts, LongPrediction) is
    called before each starts; on_row(prediction) as each row is done. The rows come back in the
    order asked."""
    questions = [(technique, hosts) for hosts in host_sets for technique in techniques]

    def ask(technique, hosts):
        return predict(case, technique, hosts=hosts, options=options_for(technique, hosts) if options_for else None)

    answers, later = {}, []
    with deferring_long():
        for i, (technique, hosts) in enumerate(questions):
            try:
                answers[i] = ask(technique, hosts)
            except LongPrediction as long:
                later.append((i, long))
                continue
            if on_row is not None:
                on_row(answers[i])
        with simulating_deferred():
            for i, long in sorted(later, key=lambda x: x[1].seconds):  # the quickest of the long ones first
                technique, hosts = questions[i]
                if on_long is not None:
                    on_long(technique, hosts, long)
                answers[i] = ask(technique, hosts)
                if on_row is not None:
                    on_row(answers[i])
    return [answers[i] for i in range(len(questions))]


def verdict_notes(best: Option | None, rows: list[Prediction], host_sets: list[tuple[str, ...]],
                  progress: SameProgress, microbatches: int, microbatches_from: str) -> list[str]:
    """Lines under the verdict: where it uses hosts that were not asked (and how much slower the
    fastest asked row is), and where it changes the microbatch count the user gave.
    `microbatches_from` names where the workload's count came from (a flag or the scenario)."""
    if best is None:
        return []
    notes = [n for n in [startup_note(best)] if n]
    asked = {frozenset(s) for s in host_sets}
    if frozenset(best.hosts) not in asked:
        notes.append(_other_hosts(best, rows, host_sets, progress))
    if best.microbatches is not None and best.microbatches != microbatches:
        notes.append(f"the verdict's {best.microbatches} microbatches are the planner's choice, not the "
                     f"{microbatches} asked ({microbatches_from}); the rows keep {microbatches}")
    return notes


def _other_hosts(best: Option, rows: list[Prediction], host_sets: list[tuple[str, ...]],
                 progress: SameProgress) -> str:
    widest = max(host_sets, key=len)
    where = (f"the verdict uses {len(best.hosts)} VM{'s' if len(best.hosts) != 1 else ''} "
             f"({host_list(best.hosts)}), not a host set asked")
    ranked = [(time_to_progress_s(r, progress.efficiency(r).value, progress.target_tokens), r) for r in rows if r.ok]
    if not ranked:
        return f"{where}; no row asked runs (each says why)"
    seconds, row = min(ranked, key=lambda x: x[0])
    on = f"the {len(row.hosts)} VMs asked" if tuple(row.hosts) == tuple(widest) and len(row.hosts) > 1 else host_list(row.hosts)
    fastest = f"{where}; the fastest row asked, {label(row.technique)} on {on}, takes {fmt_time(seconds)}"
    if seconds >= best.ranked_time_s:
        return f"{fastest}, {margin(seconds, best.ranked_time_s)} on the verdict's {fmt_time(best.ranked_time_s)}"
    # the structured search (large clusters) simulates a budget of options: it can miss the asked layout
    return (f"{fastest}, less than the verdict's {fmt_time(best.ranked_time_s)}: the planner's search did not "
            f"reach this layout")


def microbatch_alternatives(plan) -> list[str]:
    """Lines for the asked rows that fail on divisibility (plan.retried): the microbatch count at which
    each runs, and its time, ranked with the rest; where no count does, one line per set of hosts naming
    the techniques, what the batch does not divide among, and the global batches that would."""
    import math
    import re

    lines, never, runs = [], {}, {}
    for row, other in plan.retried:
        if other is not None and not hasattr(other, "prediction"):  # plan.Unsimulated: runs, not simulated
            counts = " or ".join(str(m) for m in other.microbatches)
            best = "the verdict and its runner-up" if other.keep == 2 else f"the {other.keep} best options"
            lines.append(f"{label(row.technique)} on {host_list(row.hosts)} fails at {row.workload.microbatches} "
                         f"microbatches ({row.prediction.reason}); with {counts} it runs, not simulated: its floor, "
                         f"{fmt_time(other.floor_s)}, already trails {best}")
            continue
        if other is not None and not other.ok:
            lines.append(f"{label(row.technique)} on {host_list(row.hosts)} fails at {row.workload.microbatches} "
                         f"microbatches ({row.prediction.reason}); with {other.microbatches} the batch divides, but "
                         f"it is {other.prediction.status}: {other.prediction.reason}")
            continue
        if other is not None:  # twins (the same hosts' kind, the same time) on one line
            key = (row.technique, row.workload.microbatches, row.prediction.reason, other.microbatches,
                   fmt_time(other.ranked_time_s))
            runs.setdefault(key, []).append(host_list(row.hosts))
            continue
        found = re.search(r"by (.+) \((\d+)\)$", row.prediction.reason or "")
        by = (found.group(1).removeprefix("the number of "), int(found.group(2))) if found else ("GPUs", row.gpus)
        techniques, among = never.setdefault(tuple(row.hosts), ([], {}))
        techniques.append(label(row.technique))
        among[by] = None
    for (technique, asked, reason, count, seconds), where in runs.items():
        on = ", ".join(where[:-1]) + " and " + where[-1] if len(where) > 1 else where[0]
        lines.append(f"{label(technique)} on {on} fail{'s' if len(where) == 1 else ''} at {asked} microbatches "
                     f"({reason}); with {count} {'it runs' if len(where) == 1 else 'each runs'}: {seconds}, ranked "
                     f"with the other options")
    for hosts, (techniques, among) in never.items():
        batch = plan.case.workload.global_batch
        step = math.lcm(*(n for _, n in among))
        batches = " or ".join(str(b) for b in dict.fromkeys([batch // step * step, -(-batch // step) * step]) if b > 0)
        who = ", ".join(techniques[:-1]) + " and " + techniques[-1] if len(techniques) > 1 else techniques[0]
        lines.append(f"on {host_list(hosts)}, {who} fail{'s' if len(techniques) == 1 else ''} at every microbatch "
                     f"count: {batch} sequences do not divide among {' or '.join(f'{n} {what}' for what, n in among)}; "
                     f"a global batch of {batches} would run {'it' if len(techniques) == 1 else 'them'}")
    return lines


def plan_notes(plan) -> list[str]:
    """The notes plan and select print under the verdict (predict adds verdict_notes' on its rows): a
    start-up-bound verdict, and asked rows that run at another microbatch count."""
    return [n for n in [startup_note(plan.best), plan.long_line()] if n] + microbatch_alternatives(plan)
