"""What the user asked beside what the planner found.

A command's rows are the technique(s) on the host sets the user named, simulated as named,
whatever the cluster's size: "how long on all 96 GPUs?" gets that answer, not the planner's best
layout on fewer GPUs. The verdict is the planner's best and may use other hosts or another
microbatch count; where it does, verdict_notes() says so and by how much the asked rows trail it,
on the ranking's own measure (time to the same training progress).
"""

from __future__ import annotations

from geosim.case import Case
from geosim.predict import Prediction, predict
from geosim.structure import host_list
from geosim.studies.ranking import Option, SameProgress, fmt_time, margin, startup_note, time_to_progress_s
from geosim.errors import GeosimError
from geosim.techniques import label, layout_options

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
    out = []
    for hosts in host_sets:
        for technique in techniques:
            try:
                options = layout_options(technique, case, hosts, **layout) if layout else None
            except GeosimError:
                continue
            out.append((technique, tuple(hosts), {}, options))
    return out


def asked_rows(case: Case, techniques: tuple[str, ...], host_sets: list[tuple[str, ...]],
               options_for=None) -> list[Prediction]:
    """Each technique on each asked host set, at the workload's own microbatches and the technique's
    default layout or the one asked (options_for(technique, hosts) -> per-run options): the question as
    asked (a row that cannot run says why in its reason)."""
    return [predict(case, technique, hosts=hosts, options=options_for(technique, hosts) if options_for else None)
            for hosts in host_sets for technique in techniques]


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

    lines, never = [], {}
    for row, other in plan.retried:
        if other is not None:
            lines.append(f"{label(row.technique)} on {host_list(row.hosts)} fails at {row.workload.microbatches} "
                         f"microbatches ({row.prediction.reason}); with {other.microbatches} it runs: "
                         f"{fmt_time(other.ranked_time_s)}, ranked with the other options")
            continue
        found = re.search(r"by (.+) \((\d+)\)$", row.prediction.reason or "")
        by = (found.group(1).removeprefix("the number of "), int(found.group(2))) if found else ("GPUs", row.gpus)
        techniques, among = never.setdefault(tuple(row.hosts), ([], {}))
        techniques.append(label(row.technique))
        among[by] = None
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
    return [n for n in [startup_note(plan.best)] if n] + microbatch_alternatives(plan)
