"""`geosim plan --sites ...`: which FABRIC sites to ask for (geosim.fabric.choose), printed or as JSON.

The plan command finds this module through the entry-point group geosim.plan_extensions
(pyproject.toml): the fabric wing adds its flags to plan, the core imports nothing of it."""

from __future__ import annotations

import json
import sys

from geosim.cli.common import fmt_duration, workload_overrides
from geosim.base.errors import GeosimError
from geosim.fabric.choose import DEFAULT_BANDWIDTH_GBPS, rank_sites, resolve_sites
from geosim.base.sites import rtt_model
from geosim.cli.vocabulary import add_renamed
from geosim.inputs.scenario import get_model, make_workload


def add_arguments(parser) -> None:
    fabric = parser.add_argument_group("choosing FABRIC sites (instead of --scenario; docs/guide/fabric.md)")
    fabric.add_argument("--sites", metavar="SITE,SITE,...|all",
                        help="rank every slice these FABRIC sites allow (site pairs x GPU models) by the planner's "
                             "best option on it; 'all': every site whose GPUs are known")
    fabric.add_argument("--gpu", help="with --sites: only this GPU model (RTX6000, T4, A30, A40)")
    fabric.add_argument("--host-count", dest="vms", type=int, default=2,
                        help="with --sites: VMs per slice (default: %(default)s)")
    fabric.add_argument("--gpus-per-host", dest="gpus_per_vm", type=int, default=2,
                        help="with --sites: GPUs per VM (default: %(default)s, as in the study)")
    add_renamed(fabric, "--vms", "--host-count", dest="vms", type=int)
    add_renamed(fabric, "--gpus-per-vm", "--gpus-per-host", dest="gpus_per_vm", type=int)


def wanted(args) -> bool:
    return args.sites is not None  # given, even empty, is not "no --sites" (run says what is wrong)


def run(args, params, deadline_s, techniques) -> int:
    if not args.sites.strip():
        raise GeosimError("empty: FABRIC sites, comma-separated, or 'all'", source="--sites")
    for flag, value in (("--scenario", args.scenario), ("--rtt-ms", args.rtt_ms), ("--records", args.records),
                        ("--sweep-rtt", args.sweep_rtt)):
        if value:
            raise GeosimError("not with --sites (the sites make the slices; their RTTs are measured or estimated)",
                              source=flag)
    if args.vms < 1 or args.gpus_per_vm < 1:
        raise GeosimError("must be >= 1", source="--host-count" if args.vms < 1 else "--gpus-per-host")
    model = get_model(args.model)
    for key, value in workload_overrides(args).items():
        if value is not None and not isinstance(value, str) and value <= 0:
            raise GeosimError(f"must be > 0, got {value}", source=f"--{key.replace('_', '-')}")
    workload = make_workload({k: v for k, v in workload_overrides(args).items() if v is not None}, source="--sites")
    sites, notes = resolve_sites(args.sites, args.gpu)
    bandwidth = DEFAULT_BANDWIDTH_GBPS if args.bandwidth_gbps is None else args.bandwidth_gbps
    if bandwidth <= 0:
        raise GeosimError(f"must be > 0, got {bandwidth}", source="--bandwidth-gbps")
    if args.bandwidth_gbps is None:
        notes.append(f"links: {bandwidth:g} Gbit/s (the study's scenarios' assumption; --bandwidth-gbps to change)")
    ranking = rank_sites(sites, model, workload, params, vms=args.vms, gpus_per_vm=args.gpus_per_vm, gpu=args.gpu,
                         deadline_s=deadline_s, techniques=techniques, notes=notes, bandwidth_gbps=bandwidth)
    if args.json:
        doc = {"model": model.name, "vms": args.vms, "gpus_per_vm": args.gpus_per_vm, "gpu": args.gpu,
               "sites": [s.name for s in sites], **ranking.to_dict()}
        json.dump(doc, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    w = workload
    print(f"\nFABRIC slices of {args.vms} VMs x {args.gpus_per_vm} GPUs at {', '.join(s.name for s in sites)}"
          + (f", {args.gpu} only" if args.gpu else ""))
    print(f"  {model.name}, {w.epochs} epochs of {w.tokens_per_epoch:,} tokens, batch {w.global_batch} x {w.seq_len}, "
          f"{w.precision}; params: {params.source}"
          + (f"; deadline {fmt_duration(deadline_s)}: cheapest first" if deadline_s else ""))
    print(f"  {len(ranking.ranked)} slices: {ranking.planned} planned, {ranking.derived} derived (one VM alone is best "
          f"already at a smaller RTT), the rest share a plan with an identical slice")
    # time: to the same training progress (the ranking's measure; the run's own time at token efficiency 1)
    print(f"  {'#':>3} {'time':>9} {'GPU-h':>6} {'GPUs':>4} {'RTT ms':>12}  {'slice (site:GPU per VM)':<34} best option")
    shown = ranking.ranked if args.all else ranking.ranked[:args.top]
    for i, c in enumerate(shown, start=1):
        rtt = "/".join(f"{r:.1f}" + ("~" if e else "") for r, e in c.rtts.values()) or "-"
        if c.best is None:
            print(f"  {i:>3} {'-':>9} {'-':>6} {'-':>4} {rtt:>12}  {c.label:<34} no feasible option")
            continue
        b = c.best
        print(f"  {i:>3} {fmt_duration(b.ranked_time_s):>9} {b.gpu_hours:>6.2f} {b.gpus:>4} {rtt:>12}  {c.label:<34} "
              f"{b.label}" + (" (derived)" if c.derived_from else ""))
    if len(shown) < len(ranking.ranked):
        print(f"  ... {len(ranking.ranked) - len(shown)} more (--all lists them)")
    if any(c.estimated for c in ranking.ranked):
        print(f"  ~ RTT {rtt_model().describe()}. Measured RTTs (Table I) are used where the study has the pair.")
    for note in ranking.notes:
        print(f"  note: {note}")
    feasible = [c for c in ranking.ranked if c.best]
    if feasible:
        print(f"  Ask for: {_ask(feasible[0], args.vms)}")
        spread = next((c for c in feasible if len(set(c.sites)) > 1), None)
        if len(set(feasible[0].sites)) == 1 and spread:
            print(f"  Across sites, the best is {_ask(spread, args.vms)} ({fmt_duration(spread.best.ranked_time_s)})")
    return 0


def _ask(c, vms: int) -> str:
    where = (f"{vms} VMs at {c.sites[0]}" if len(set(c.sites)) == 1 else " + ".join(c.sites))
    gpus = "/".join(dict.fromkeys(c.gpus))
    fewer = " (its best option leaves VMs idle)" if len(c.best.hosts) < vms else ""
    return f"{where}, {gpus}{fewer}"
