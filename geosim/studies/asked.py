"""What the user asked beside what the planner found.

A command's rows are the technique(s) on the host sets the user named, simulated as named,
whatever the cluster's size: "how long on all 96 GPUs?" gets that answer, not the planner's best
layout on fewer GPUs. The verdict is the planner's best and may use other hosts or another
microbatch count; where it does, verdict_notes() says so and by how much the asked rows trail it,
on the ranking's own measure (time to the same training progress).
"""

from __future__ import annotations

from geosim.case import Case
from geosim.predict import LongPrediction, Prediction, deferring_long, predict, simulating_deferred
from geosim.structure import host_list
from geosim.studies.ranking import Option, SameProgress, fmt_time, margin, time_to_progress_s
from geosim.techniques import label


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
    notes = []
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
