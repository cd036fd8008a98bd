"""Write docs/reference/cli.md from the argparse definitions, so the CLI reference stays true.

    python tools/cli_reference.py            # rewrite docs/reference/cli.md
    python tools/cli_reference.py --check    # exit 1 if the file is out of date (tests/test_cli_vocabulary.py)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's geosim, not an installed one

from geosim.cli import build_parser  # noqa: E402
from geosim.cli.vocabulary import FLAGS  # noqa: E402

OUT = ROOT / "docs" / "reference" / "cli.md"


def _subcommands(parser, path="geosim"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{path} {name}", sub
                yield from _subcommands(sub, f"{path} {name}")


def _options(parser):
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
            continue
        yield action


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
             "`START:STOP:xFACTOR` (`0.1:150:x2`).", "", "| flag | takes | meaning |", "|---|---|---|"]
    lines += [f"| `{flag}` | {_cell(kind)} | {_cell(meaning)} |" for flag, (kind, meaning) in sorted(FLAGS.items())]
    for path, parser in _subcommands(build_parser()):
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
    text = render()
    if "--check" in sys.argv[1:]:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is out of date: run python tools/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_name(OUT.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, OUT)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
