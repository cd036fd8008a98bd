"""geosim sites: FABRIC's sites, where they are, which GPUs they offer, and the RTT model."""

from __future__ import annotations

import json
import sys

from geosim.base.errors import GeosimError
from geosim.cli.common import add_json_argument
from geosim.base.sites import COMPONENT_GPU, estimate_rtt_ms, get_site, gpu_component, rtt_model, site_catalog, sources

HELP = "list FABRIC's sites (city, coordinates, GPU components) and the RTTs estimated between them"


def add_arguments(parser) -> None:
    parser.add_argument("--gpu", help=f"only sites known to offer this GPU ({', '.join(COMPONENT_GPU.values())})")
    parser.add_argument("--rtt-from", metavar="SITE", help="add a column: the RTT estimated from this site (ms)")
    add_json_argument(parser)


def run(args) -> int:
    sites = list(site_catalog().values())
    if args.gpu:
        component = gpu_component(args.gpu)
        sites = [s for s in sites if component in s.gpus]
    if args.rtt_from is not None and not args.rtt_from.strip():  # given, even empty: a mistake, not "no column"
        raise GeosimError("empty: a FABRIC site to estimate RTTs from", source="--rtt-from")
    origin = get_site(args.rtt_from, source="--rtt-from") if args.rtt_from else None
    model = rtt_model()
    if args.json:
        docs = []
        for s in sites:
            doc = s.to_dict(sources())
            if origin:
                doc["rtt_from"] = {"site": origin.name, "rtt_ms": round(estimate_rtt_ms(origin, s), 2), "estimated": True}
            docs.append(doc)
        json.dump({"sites": docs, "rtt_model": model.to_dict()}, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    extra = f" {'RTT from ' + origin.name:>14}" if origin else ""
    print(f"{'site':<13} {'city':<34} {'country':<7} {'lat':>8} {'lon':>9}  {'GPU components':<26}{extra}")
    for s in sites:
        gpus = ", ".join(s.gpus) if s.gpus else "not public (see fablib)"
        alias = f" ({'/'.join(s.aliases)})" if s.aliases else ""
        rtt = f" {estimate_rtt_ms(origin, s):>11.1f} ms" if origin else ""
        print(f"{s.name + alias:<13} {s.city:<34} {s.country:<7} {s.lat:>8.4f} {s.lon:>9.4f}  {gpus:<26}{rtt}")
    print(f"\n{len(sites)} site(s)" + (f" known to offer {args.gpu}" if args.gpu else "")
          + ". GPUs: where the study (Table I) used them; elsewhere FABRIC's live resources "
            "(fablib.list_sites()) have the counts. Sources: `geosim sites --json`.")
    if origin:
        print(f"RTTs {model.describe()}")
    return 0
