"""`geosim report --sweep-dir DIR`: plots (PNG and SVG) and a one-page HTML report of a sweep."""

from __future__ import annotations

import argparse
import json

from geosim.cli.vocabulary import add_renamed, deprecate

HELP = "plot a sweep directory (time vs RTT, breakdown) and write a self-contained HTML report"


def add_arguments(p) -> None:
    p.add_argument("--sweep-dir", dest="out_dir", default="sweep", metavar="DIR",
                   help="the sweep's directory (`geosim sweep --sweep-dir`): its results are read and the report and "
                        "plots written into it (default ./%(default)s)")
    # the old positional directory, kept for now (docs/reference/cli.md: renamed flags)
    p.add_argument("old_dir", nargs="?", metavar="DIR", help=argparse.SUPPRESS)
    add_renamed(p, "--out-dir", "--sweep-dir", dest="out_dir")
    p.add_argument("--records", metavar="FILE", help="run records (JSON Lines) to overlay as measured points")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")


def run(args) -> int:
    from geosim.report.html import build_report

    directory = args.out_dir
    if args.old_dir is not None:
        deprecate(args, "`geosim report DIR` is deprecated; use --sweep-dir DIR")
        directory = args.old_dir
    written = build_report(directory, records=args.records)
    if args.json:
        print(json.dumps(written, indent=1))
    else:
        print(f"{written['report']}  ({written['rows']} points, {written['crossovers']} crossovers, "
              f"{written['measured_points']} measured points)")
        for path in written["plots"]:
            print(f"  {path}")
    return 0
