"""The best option at each RTT of a sweep, by the planner's ranking (geosim.studies.ranking).

A sweep's rows compare techniques on all VMs at their default settings; the answer to "what
should I use at this RTT" also weighs single VMs and Pipeshard's layer splits and microbatches.
That answer is the planner's, so the sweep asks the planner (studies/plan.answer_vs_rtt) for
each panel, in the sweep's workers: `geosim sweep` and `geosim plan --sweep-rtt` cannot disagree.
"""

from __future__ import annotations

from geosim.inputs.case import Case
from geosim.inputs.scenario import get_model
from geosim.studies.sweep.grid import NATIVE
from geosim.studies.sweep.table import as_table
from geosim.studies.sweep.run import SweepContext, point_workload
from geosim.studies.whatif import with_bandwidth, with_gpu
from geosim.base.units import gbps_to_bps
from geosim.studies.asked import asked_candidates
from geosim.studies.plan import answer_vs_rtt, make_plan

MAX_PLANNED_HOSTS = 4  # the planner enumerates VM subsets: beyond a few VMs that is the scale sweep's job


def best_jobs(rows, metric: str = "total_time_s") -> list[dict]:
    """One job per panel of all-VM points that vary RTT (a sweep's table, or a list of rows): the RTTs and
    the techniques swept (every one of them, ranked on time to the same training progress:
    geosim.studies.ranking)."""
    jobs = []
    for panel in as_table(rows, metric).panels("rtt_ms"):
        if panel.template["hosts"] != "all":
            continue
        template = {k: v for k, v in panel.template.items() if k not in ("technique", "rtt_ms")}
        techniques = [t for t in panel.techniques if panel.ran(t)]
        rtts = sorted(x for i, x in enumerate(panel.xs) if any(panel.codes[t][i] for t in techniques))
        jobs.append({"point": template, "rtts": rtts, "techniques": techniques})
    return jobs


def solve_best(ctx: SweepContext, job: dict) -> dict:
    """The planner's best (and Algorithm 1's choice) at each of the job's RTTs (runs in a worker)."""

    p = job["point"]
    sc = ctx.scenarios[p["scenario"]]
    cluster = sc.cluster
    if len(cluster.hosts) > MAX_PLANNED_HOSTS:
        return {"point": p, "skipped": f"{len(cluster.hosts)} VMs: more than the planner enumerates here "
                                       f"({MAX_PLANNED_HOSTS})"}
    if p["gpu"] != NATIVE:
        cluster = with_gpu(cluster, p["gpu"])
    if p["bandwidth_gbps"] != NATIVE:
        cluster = with_bandwidth(cluster, gbps_to_bps(p["bandwidth_gbps"]))
    model = get_model(p["model"], sc.models)
    case = Case(cluster, model, sc.workload(**point_workload(p, sc, model)), ctx.params, ctx.network)
    techniques = tuple(job["techniques"])
    # flips stay bracketed by the grid's RTTs: bisecting each on the planner would cost ~7 plans a flip
    # (`geosim plan --sweep-rtt` locates them); the crossover table bisects technique pairs already
    choices = {"layout": p["layout"]} if p.get("layout") else None  # the layout asked: the planner ranks it too
    # seeded with the panel's own lines (each technique on all the VMs, the layout asked): the best option is
    # never above a line it ranks (the report draws it as their lower envelope)
    everyone = [tuple(h.name for h in cluster.hosts)]
    layout = p.get("layout") or None
    doc = answer_vs_rtt(case, job["rtts"], lambda c, _: make_plan(c, keep=1, choices=choices, techniques=techniques,
                                                                  asked=asked_candidates(c, techniques, everyone, layout)),
                        algorithm1_flips=False, locate=False)
    return {"point": p, "techniques": list(techniques), **doc}


def best_vs_rtt(rows, ctx: SweepContext, executor) -> list[dict]:
    jobs = best_jobs(rows, ctx.metric)
    order = [repr(job["point"]) for job in jobs]
    return sorted(executor.imap(solve_best, jobs), key=lambda d: order.index(repr(d["point"])))  # grid order
