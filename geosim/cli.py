"""The one entry point, `geosim`, and its subcommands.

Each subcommand is a module with HELP, add_arguments(parser) and run(args) -> int.
Modules import their heavy dependencies inside run(), so `geosim predict` never
loads jax or ray. Adding a subcommand is one line in COMMANDS.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from geosim import __version__
from geosim.errors import GeosimError

COMMANDS = {
    "predict": "geosim.commands.predict",
    "trace": "geosim.commands.trace",
    "calibrate": "calibrate.cli",
    "live": "live.cli",
    "select": "geosim.commands.select",
    "plan": "geosim.commands.plan",
    "sweep": "geosim.commands.sweep",
    "report": "geosim.commands.report",
}


def _available_commands():
    for name, module_name in COMMANDS.items():
        try:
            yield name, importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:  # a real missing dependency inside the module: surface it
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
    parser = build_parser()
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
