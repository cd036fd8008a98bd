"""`geosim report DIR`: plots (PNG and SVG) and a one-page HTML report of a sweep."""

from __future__ import annotations

import json

HELP = "plot a sweep directory (time vs RTT, breakdown) and write a self-contained HTML report"


def add_arguments(p) -> None:
    p.add_argument("dir", nargs="?", default="sweep", help="a geosim sweep --out directory (default ./sweep)")
    p.add_argument("--records", metavar="FILE", help="run records (JSON Lines) to overlay as measured points")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")


def run(args) -> int:
    from geosim.report.html import build_report

    written = build_report(args.dir, records=args.records)
    if args.json:
        print(json.dumps(written, indent=1))
    else:
        print(f"{written['report']}  ({written['rows']} points, {written['crossovers']} crossovers, "
              f"{written['measured_points']} measured points)")
        for path in written["plots"]:
            print(f"  {path}")
    return 0
