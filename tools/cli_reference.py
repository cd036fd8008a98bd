"""Write docs/reference/cli.md from the argparse definitions, so the CLI reference stays true.

    python tools/cli_reference.py            # rewrite docs/reference/cli.md
    python tools/cli_reference.py --check    # exit 1 if the file is out of date (tests/test_cli_vocabulary.py)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's geosim, not an installed one

from _generated import write_or_check  # noqa: E402 (tools/_generated.py)
from geosim.cli import build_parser  # noqa: E402
from geosim.cli.common import ANSWER_SCHEMA  # noqa: E402
from geosim.cli.vocabulary import DEFAULTS_DIFFER, FLAGS, RENAMED, RenamedFlag  # noqa: E402

OUT = ROOT / "docs" / "reference" / "cli.md"


def _subcommands(parser, path="geosim"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{path} {name}", sub
                yield from _subcommands(sub, f"{path} {name}")


def _options(parser):
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction,
                               RenamedFlag)) or action.help == argparse.SUPPRESS:
            continue
        yield action


def _defaults(parser) -> dict[str, dict[str, object]]:
    """flag -> {subcommand: default} over every subcommand (None: the flag has no fixed default there)."""
    found: dict[str, dict[str, object]] = {}
    for path, sub in _subcommands(parser):
        for action in _options(sub):
            for flag in action.option_strings:
                if flag in FLAGS:
                    found.setdefault(flag, {})[path] = action.default
    return found


def _default_cell(flag: str, where: dict[str, object]) -> str:
    """The default most subcommands share; the others named, with why (vocabulary.DEFAULTS_DIFFER)."""
    given = {p: d for p, d in where.items() if d not in (None, False, [], argparse.SUPPRESS)}
    reasons = DEFAULTS_DIFFER.get(flag, {})
    common = {repr(d) for p, d in given.items() if p not in reasons}
    text = ", ".join(sorted(common)) if common else "-"
    for path, why in sorted(reasons.items()):
        if path in given:
            text += f"; {path.removeprefix('geosim ')}: {given[path]!r} ({why})"
    return _cell(text)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _help(parser, action) -> str:
    formatter = parser._get_formatter()
    return _cell(formatter._expand_help(action)) if action.help else ""


def render() -> str:
    lines = ["# Command-line reference", "",
             "Generated from the argparse definitions by `python tools/cli_reference.py`; do not edit by hand.",
             "Every number an option takes has a bound, with its reason: [bounds on numbers](bounds.md).",
             "", "## The vocabulary", "",
             "A flag means the same thing in every subcommand (`tests/test_cli_vocabulary.py` checks it).",
             "List flags are repeatable and comma-separated (`--technique data,zero2 --technique shard`).",
             "Ranges have one syntax: a list (`0.1,1,10`), `START:STOP:STEP` (`0:100:10`) or "
             "`START:STOP:xFACTOR` (`0.1:150:x2`).",
             "A flag that reads a file is named for what it reads (`--records`, `--params`, `--scenario`); the one "
             "that writes ends in `-out` (`--records-out`); `--out` is a file to write, `--out-dir` a directory. "
             "Choices are case-insensitive (`--precision FP16`, `--scenario UTAH-GPN`). `--technique` takes a list "
             "and `all`; `--hosts` is the one way to choose VMs.",
             "The default column gives the default most subcommands share (`-`: none fixed, e.g. the scenario's "
             "own value), then each subcommand whose default differs and why.",
             "", "| flag | takes | meaning | default |", "|---|---|---|---|"]
    parser = build_parser()
    defaults = _defaults(parser)
    lines += [f"| `{flag}` | {_cell(kind)} | {_cell(meaning)} | {_default_cell(flag, defaults.get(flag, {}))} |"
              for flag, (kind, meaning) in sorted(FLAGS.items())]
    lines += ["", "## Renamed flags", "",
              "The old names still work for now and print one deprecation line (`geosim: warning: --measured is "
              "deprecated; use --records`); they will go.", "", "| old | new |", "|---|---|"]
    lines += [f"| `{_cell(old)}` | `{_cell(new)}` |" for old, new in RENAMED.items()]
    lines += ["", "## JSON answers", "",
              f"`predict`, `select` and `plan` with `--json` print one envelope, schema `{ANSWER_SCHEMA}`:", "",
              "```text",
              "{",
              f'  "schema": "{ANSWER_SCHEMA}",',
              '  "command": "predict" | "select" | "plan",',
              '  "params": the parameters file, "note": what the times are (simulator estimates or measured),',
              '  "params_warnings": [...]   (only when the parameters file carries a fit\'s warnings),',
              '  "slices": [ one object per slice: "scenario", "model", "verdict" (the line the text output starts',
              '              the slice with; with --sweep-rtt each of "rows" has its own), and the command\'s',
              '              own fields: predict "best", "runner_up", "verdict_notes" (where the verdict',
              '              leaves the host sets or microbatches asked), "algorithm1", "predictions" (the',
              '              techniques on the host sets asked, as asked); select the probes and Algorithm 1\'s branch; plan "options",',
              '              "best", "algorithm1", ... ]',
              "}",
              "```", "",
              "An option's `time_to_progress_s` is what it is ranked on: the time to the same training progress, "
              "its `total_time_s` stretched by 1 / `token_efficiency` (1 for the study's four techniques; "
              "`token_efficiency_source` says where the value comes from and whether it is assumed).", "",
              "`trace --json` prints one object for one technique or several, schema `geosim.trace/1`: "
              "`scenario`, `model`, `hosts` (the VMs traced, as asked) and `traces`, one per technique "
              "(`out`, `technique`, `iterations_s`, `events`, `description`).",
              "",
              "Under `--json`, every command's stdout is one JSON document also when it fails: "
              "`{\"schema\": \"geosim.error/1\", \"command\", \"error\", \"exit\": 2}`, whose `error` is the line "
              "printed on stderr ([outputs](outputs.md))."]
    lines += ["", "Each command's document has one JSON Schema (draft 2020-12) under [schemas/](schemas/); "
                  "tests/test_json_schemas.py checks every command's output against its own:", "",
              "| command | schema |", "|---|---|"]
    for path, sub in _subcommands(parser):
        if any("--json" in a.option_strings for a in sub._actions):
            name = path.removeprefix("geosim ").replace(" ", "-")
            lines.append(f"| `{path} --json` | [schemas/{name}.schema.json](schemas/{name}.schema.json) |")
    lines.append("| a failure under `--json` | [schemas/error.schema.json](schemas/error.schema.json) |")
    for path, parser in _subcommands(parser):
        options = list(_options(parser))
        if not options:
            continue
        lines += ["", f"## {path}", "", _cell(parser.description or ""), "", "| option | help |", "|---|---|"]
        for action in options:
            name = ", ".join(action.option_strings) or action.dest
            if action.metavar and action.option_strings:
                name += f" {action.metavar}"
            elif action.choices and action.option_strings:
                name += " {" + ",".join(map(str, action.choices)) + "}"
            lines.append(f"| `{_cell(name)}` | {_help(parser, action)} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    code, _ = write_or_check(OUT, render(), sys.argv[1:], "cli_reference.py")
    if "--check" not in sys.argv[1:]:
        print(f"wrote {OUT.relative_to(ROOT)}")
    return code


if __name__ == "__main__":
    sys.exit(main())
