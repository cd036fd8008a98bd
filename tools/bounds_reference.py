"""Write docs/reference/bounds.md from the bounds in the code (each command module's FLAG_BOUNDS, geosim/inputs/scenario.py,
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
from geosim.inputs import scenario  # noqa: E402
from geosim.studies import convergence  # noqa: E402
from geosim.studies.sweep.grid import MAX_GRID_POINTS, MAX_RANGE_POINTS  # noqa: E402
from geosim.cli import flag_bounds  # noqa: E402
from geosim.cli._process import DEFAULT_TIME_LIMIT  # noqa: E402
from geosim.base.validate import FALLBACK, Bound  # noqa: E402
from geosim import cost  # noqa: E402
from geosim.studies import plan  # noqa: E402
from geosim.base import input_limits as limits  # noqa: E402
from geosim.cli import trace  # noqa: E402
from geosim.report.html import MAX_REPORT_ROWS  # noqa: E402
from geosim.cli._progress import INTERVAL_S, MAX_ESTIMATED_S  # noqa: E402
from geosim.techniques._pipeshard_plan import MAX_MICROBATCHES  # noqa: E402
from geosim.calibrate import importers, wan_public  # noqa: E402
from geosim.live.train import corpus  # noqa: E402

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
        "through one check (`geosim/base/validate.py`, `check_number`): a finite number in an explicit range,",
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
        f"| GPUs in a host | <= {scenario.MAX_GPUS_PER_HOST} | past any server (8-16 GPUs); a generated cluster "
        "(`scale:SxVxG`) has the same bound on G |",
        "| numbers in a name (`scale:SxVxG`, a host range `a[1-16]`, a model `gpt-24x1024-v50257`) | <= 9 digits | "
        "Python's int() raises past 4,300 digits; no count is near 9 |",
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
        "prediction: a million take hours on a few cores |",
        "| `sweep` grid, counted | from each axis's size (a range from its ends and step) before any axis is "
        "built | two ranges of 100,000, or generated clusters of every size, were built before they were refused |",
        f"| an asked layout (`--layer-split`, `--virtual-stages`, ...) | its split has one entry per stage (x virtual "
        "stages), each >= 1, summing to the model's layers; stages x virtual stages <= layers | checked where every "
        "command (predict, plan, select, sweep, `calibrate import`) resolves it: one line, not every row failed |",
        "| `sweep --set FIELD=...`, `--epochs`, `--global-batch`, `--microbatches` | a scenario's "
        "`workload` range | checked before the first point runs |",
        "",
        "## Input files",
        "",
        "Checked before a file is read or parsed, so that no input makes geosim spend gigabytes or minutes",
        "before it refuses (`geosim/base/input_limits.py`). Python's TOML and JSON parsers take whatever they",
        "are given: one long dotted key cost seconds and gigabytes, an array nested 100,000 deep ended in",
        "a RecursionError, a 200 MB scenario was parsed whole before its host count was checked.",
        "",
        "| what | bound | why |",
        "|---|---|---|",
        f"| a TOML file (scenario, parameters) | <= {limits.human_bytes(limits.TOML_MAX_BYTES)} | a 4,096-host "
        "scenario with every link written out is ~2 MB |",
        f"| a JSON file (WAN or slice state, a sweep's manifest) | <= {limits.human_bytes(limits.JSON_MAX_BYTES)} "
        "| these files are a few KB |",
        f"| a JSON Lines file (run records, logs to import) | <= {limits.human_bytes(limits.RECORDS_MAX_BYTES)} "
        "| ~150,000 run records; a study has a few hundred |",
        f"| one line of a records file | <= {limits.human_bytes(limits.LINE_MAX_BYTES)} | a run record is 1-3 KB |",
        f"| a scenario's side file (`bandwidth_samples`), a CSV (`calibrate wan-public`) | <= "
        f"{limits.human_bytes(limits.SMALL_TEXT_MAX_BYTES)} | 100,000 samples are ~1 MB; the iperf extract 85 KB |",
        f"| a text corpus (`live run --data`) | <= {limits.human_bytes(corpus.CORPUS_MAX_BYTES)} | the runs read a "
        "few MB |",
        "| every file a user names | a regular file (opened without blocking, then checked: a FIFO, a device, a "
        "socket or a directory is one line), read at most its bound, strict UTF-8; an error never quotes the "
        "file's content | `/dev/zero` was read until MemoryError, a FIFO hung, `/etc/shadow`'s first line was "
        "printed (`geosim.base.input_limits.read_input`, the one reader) |",
        f"| `calibrate wan-public` | <= {wan_public.MAX_ROWS:,} rows, <= {wan_public.MAX_PROFILES:,} profiles; "
        "each rate and ping a positive finite number | each profile is a bisection of the TCP model; a negative "
        "rate printed +99900% |",
        f"| an Alpa Model or Parallel Config (`calibrate import alpa-*`) | <= {importers.MAX_CONFIG_CHARS:,} "
        "characters | Python's parser spent 16 s and 1.7 GB on a 3.45 MB one; the lines are scanned in linear "
        "time (no backtracking pattern) |",
        f"| nesting (arrays, tables, objects) | <= {limits.MAX_DEPTH} deep | geosim's files nest 4 deep; the "
        "parsers recurse |",
        f"| a TOML dotted key | <= {limits.MAX_KEY_PARTS} parts | geosim's keys have 4 at most; tomllib's cost "
        "grows with the square of the parts |",
        f"| a slice name (`fabric slice create --name`) | <= {limits.MAX_NAME_CHARS} characters, no control "
        "or invisible formatting characters | it names files and remote resources; a bidirectional override "
        "makes it read as another name |",
        "",
        "## Work",
        "",
        "| what | bound | why |",
        "|---|---|---|",
        f"| microbatches the planner tries (Pipeshard) | <= {MAX_MICROBATCHES:,} | a workload's own bound; a batch "
        "of 10 million offered millions of microbatches, each simulated |",
        f"| `trace` | <= {trace.MAX_TRACE_EVENTS:,} events (ops and collective steps per iteration x "
        "`--iterations`), refused before simulating | ~150 MB of JSON, built by a process under 1 GB; data on "
        "1,024 GPUs is 20 million steps an iteration, not the 1,024 ops its programs list |",
        f"| collective steps one prediction expands | <= {cost.MAX_EXPANDED_STEPS / 1e6:,.0f} million (each running "
        "member of each distinct collective x its ring steps, counted once the engine knows which ranks run), "
        f"else `infeasible` | ~{cost.BYTES_PER_STEP} bytes a step: data on 4,096 GPUs of one site would expand "
        "67 million (10 GB) and died with MemoryError |",
        f"| one prediction (a row asked, a planner's option, a sweep point, a draw) | <= "
        f"{cost.MAX_PREDICTION_WORK / 1e9:,.0f} billion simulated steps (ranks x ops x collective steps x "
        "iterations, counted from the schedule before simulating), else answered `infeasible` with the count "
        "and what shrinks it | minutes of simulation at the engine's fastest (Data's ring rounds: 5.4 billion in "
        "52 s), hours at its slowest; Data on 16,384 GPUs of one site (21 billion) ran past 200 s (issue 44; "
        "`geosim/cost.py`) |",
        f"| one planner option (not a row asked) | simulated only when expected to take <= {plan.PLANNER_LONG_S:g} s "
        "of CPU (its work count at its technique's rate, `geosim.cost.expected_seconds`), else left, counted "
        "(`unsimulated_long`) and named in a note | 2,048-GPU options took 40 s each on `scale:1x256x16` and "
        "trailed the verdict 4x (`geosim/studies/plan.py` `PLANNER_LONG_S`) |",
        f"| the planner's options together (not the rows asked) | simulated while their expected CPU seconds summed "
        f"stay <= {plan.SEARCH_BUDGET_S:g} (the same estimate); one that would pass it is left and the search goes on "
        "with cheaper ones; counted (`unsettled`, of it `search_budget_left`; `search_expected_s` spent) and named "
        "in a note | issue 44: bounds the search by a count, not a clock; sized so the bench cases' and "
        "`scale:1x256x16 --technique data`'s answers do not move (`geosim/studies/plan.py` `SEARCH_BUDGET_S`; "
        "docs/results/2026-11-28-verdict-speed.md) |",
        f"| a question (`predict`, `select`, `plan`, `trace`) | `--time-limit`, default {DEFAULT_TIME_LIMIT}: past it the "
        "command stops wherever it is, with one line saying what it was doing (the latest progress) and what to ask "
        "instead, exit 2 (an error document under `--json`); `--time-limit none` lifts it | issue 44 bounds a question "
        "by 60 s: counts bound what is built, but the planner on 4,096-16,384 GPUs of one site, or a Hybrid row asked "
        "on all of them, passed every count and ran for minutes (`geosim/cli/_process.py` `time_limit`; "
        "docs/results/2026-11-28-time-limit.md) |",
        f"| `--draws` (predict, select, plan) | refused when its first draws say the rest would take over "
        f"{MAX_ESTIMATED_S / 3600:.0f} hour | the line says how many draws fit |",
        f"| progress | a line on stderr every {INTERVAL_S:g} s for planning, the rows `predict` is asked, draws, "
        "`calibrate check` and `import`, sweeps and traces, also when stderr is not a terminal and under `--json`; "
        "a thread writes it, so one long simulation still shows the clock | silence looked like a hang |",
        f"| `report` | <= {MAX_REPORT_ROWS:,} rows in the directory, counted before any is read | it holds "
        "every row to plot it, ~6 KB each: a million would be gigabytes |",
        f"| a sweep's memory | flat in its rows: rows stream to `results.jsonl` and `results.csv`; the summary "
        "reads a status byte and a metric (8 bytes) per grid point | a 100,000-point sweep grew past 1 GB |",
        "",
        "## Flags",
        "",
        f"A numeric flag not listed here is refused when it is not finite or beyond {_number(FALLBACK.high)} "
        "(`tests/test_bad_inputs.py` checks that none is missing).",
        "",
        "| command | flag | bound | why |",
        "|---|---|---|---|",
    ]
    for command, bounds in sorted(flag_bounds().items()):
        for flag, bound in sorted(bounds.items()):
            lines.append(f"| `geosim {command}` | `{flag}` | {_range(bound)} | {bound.why} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    return write_or_check(OUT, render(), sys.argv[1:], "bounds_reference.py")[0]


if __name__ == "__main__":
    sys.exit(main())
