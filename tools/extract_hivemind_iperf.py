"""Write geosim/data/hivemind-iperf.csv from a checkout of github.com/cirquit/hivemind-multi-cloud.

    python tools/extract_hivemind_iperf.py PATH/TO/hivemind-multi-cloud > geosim/data/hivemind-iperf.csv

Every row of every artifacts/networking/logs/**/iperf-profile-*.csv, as the file has it, with the
file's path in front; a row that two files both hold (the same timestamp and hosts: experiment
sets that copied an earlier set's profile) is kept once, from the first file in path order.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path


def main(root: str) -> int:
    logs = Path(root) / "artifacts" / "networking" / "logs"
    out = csv.writer(sys.stdout, lineterminator="\n")
    header = None
    seen = set()
    for path in sorted(logs.rglob("iperf-profile-*.csv")):
        with path.open(newline="") as f:
            rows = list(csv.reader(f))
        if header is None:
            header = rows[0]
            out.writerow(["file", *header])
        for row in rows[1:]:
            key = tuple(row[:3])
            if not row or key in seen:
                continue
            seen.add(key)
            out.writerow([str(path.relative_to(root)), *row])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
