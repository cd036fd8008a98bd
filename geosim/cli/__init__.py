"""The one entry point, `geosim`, and its subcommands.

Each subcommand is a module with HELP, add_arguments(parser) and run(args) -> int,
registered under the entry-point group "geosim.commands" (pyproject.toml). The parts
that live outside geosim/ (calibrate, live, fabric) register theirs the same way, so
this package imports none of them by name. Modules import their heavy dependencies
inside run(), so `geosim predict` never loads jax or ray.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points

from geosim import __version__
from geosim.errors import GeosimError

ENTRY_POINT_GROUP = "geosim.commands"
# the order `geosim --help` lists them in; commands not named here follow alphabetically
ORDER = ("predict", "select", "plan", "sweep", "report", "trace", "calibrate", "live")


def _available_commands():
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    names = [n for n in ORDER if n in found] + sorted(n for n in found if n not in ORDER)
    for name in names:
        try:
            yield name, found[name].load()
        except ModuleNotFoundError as exc:
            if exc.name != found[name].value:  # a real missing dependency inside the module: surface it
                raise


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="geosim",
        description="Predict, measure and choose parallel training techniques for geo-distributed GPU slices.",
    )
    parser.add_argument("--version", action="version", version=f"geosim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module in _available_commands():
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
    except KeyboardInterrupt:  # Ctrl-C while the subcommands load: nothing started yet
        print("geosim: interrupted", file=sys.stderr)
        return 130
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except GeosimError as exc:
        print(f"geosim {args.command}: error: {exc.line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"geosim {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `geosim predict | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
