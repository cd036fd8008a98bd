"""Write docs/reference/bounds.md from the bounds in the code (geosim/validate.py, geosim/scenario.py,
the sweep grid, convergence), so the page lists every bound as the code applies it.

    python tools/bounds_reference.py            # rewrite docs/reference/bounds.md
    python tools/bounds_reference.py --check    # exit 1 if the file is out of date (tests/test_bad_inputs.py)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's geosim, not an installed one

from _generated import write_or_check  # noqa: E402 (tools/_generated.py)
from geosim import scenario  # noqa: E402
from geosim.studies import convergence  # noqa: E402
from geosim.studies.sweep.grid import MAX_GRID_POINTS, MAX_RANGE_POINTS  # noqa: E402
from geosim.validate import FALLBACK, FLAG_BOUNDS, Bound  # noqa: E402

OUT = ROOT / "docs" / "reference" / "bounds.md"


def _number(x) -> str:
    if isinstance(x, int) or float(x).is_integer() and abs(x) < 1e7:
        return f"{int(x):,}"
    return f"{x:g}"


def _range(b: Bound) -> str:
    low = f"> {_number(b.low)}" if b.exclusive_low else f">= {_number(b.low)}"
    return f"{low}, <= {_number(b.high)}" + (", whole" if b.integer else "")


def render() -> str:
    lines = [
        "# Bounds on numbers",
        "",
        "Generated from the code by `python tools/bounds_reference.py`; do not edit by hand.",
        "",
        "Every number geosim takes from a user (a flag, a scenario or parameters file, a run record) goes",
        "through one check (`geosim/validate.py`, `check_number`): a finite number in an explicit range,",
        "whatever its type and size. NaN, infinity and integers too large for a float are refused",
        "everywhere, as one line naming the flag or the file and key (exit 2). The bounds refuse typos,",
        "not real work: they are far above what any study slice needs, and counts that multiply work",
        "(hosts, GPUs, draws, devices, steps) are bounded where a larger value could only be a mistake",
        "or would run for days before printing anything.",
        "",
        "## Scenarios",
        "",
        "| what | bound | why |",
        "|---|---|---|",
        f"| hosts in a scenario | <= {scenario.MAX_HOSTS:,} | each host is simulated; 1,024-host plans are in reach |",
        f"| GPUs in a host | <= {scenario.MAX_GPUS_PER_HOST} | past any server (8-16 GPUs) |",
        f"| GPUs in a scenario | <= {scenario.MAX_GPUS:,} | each GPU is a process of the simulation; 8,192 are in "
        "reach |",
    ]
    for table, ranges in (("links[]", scenario.LINK_RANGES), ("gpus", scenario.GPU_RANGES),
                          ("models", scenario.MODEL_RANGES), ("workload", scenario.WORKLOAD_RANGES)):
        for key, (low, high) in ranges.items():
            lines.append(f"| `{table}.{key}` | >= {_number(low)}, <= {_number(high)} | keeps every prediction "
                         "finite |")
    lines += [
        "",
        "## Values parsed from text",
        "",
        "| flag | bound | why |",
        "|---|---|---|",
        f"| `predict --target-tokens` | > 0, <= {_number(convergence.TARGET_TOKENS_RANGE[1])} | ~1,000x today's "
        "largest training runs |",
        f"| `predict --token-efficiency T=V` | 0 < V <= {_number(convergence.MAX_TOKEN_EFFICIENCY)}, T a "
        "technique | Data's tokens over the technique's; none is 10x better than Data |",
        "| `plan --deadline` | > 0, <= 100 years | 0 would mean no deadline |",
        f"| `sweep` grid | <= {MAX_GRID_POINTS:,} points, <= {MAX_RANGE_POINTS:,} per range | each point is a "
        "prediction held in memory |",
        "| `sweep --set FIELD=...`, `--epochs`, `--global-batch`, `--microbatches` | a scenario's "
        "`workload` range | checked before the first point runs |",
        "",
        "## Flags",
        "",
        f"A numeric flag not listed here is refused when it is not finite or beyond {_number(FALLBACK.high)} "
        "(`tests/test_bad_inputs.py` checks that none is missing).",
        "",
        "| command | flag | bound | why |",
        "|---|---|---|---|",
    ]
    for command, bounds in sorted(FLAG_BOUNDS.items()):
        for flag, bound in sorted(bounds.items()):
            lines.append(f"| `geosim {command}` | `{flag}` | {_range(bound)} | {bound.why} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    return write_or_check(OUT, render(), sys.argv[1:], "bounds_reference.py")[0]


if __name__ == "__main__":
    sys.exit(main())
