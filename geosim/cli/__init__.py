"""The one entry point, `geosim`, and its subcommands.

Each subcommand is a module with HELP, add_arguments(parser) and run(args) -> int. The
core's are the modules of this package that define them (found by walking it, so a new
one needs no reinstall); the parts that live outside geosim/ (calibrate, live, fabric)
register theirs under the entry-point group "geosim.commands" (pyproject.toml), so this
package imports none of them by name. Modules import their heavy dependencies
inside run(), so `geosim predict` never loads jax or ray; and a run imports only its own
subcommand's module (`geosim --help` imports them all to list them).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from geosim import __version__
from geosim.cli import _process
from geosim.cli.vocabulary import lower_choices
from geosim.base.discover import module_names
from geosim.base.errors import GeosimError
from geosim.base.validate import check_flags, whole_numbers

ENTRY_POINT_GROUP = "geosim.commands"
# the order `geosim --help` lists them in; commands not named here follow alphabetically
ORDER = ("predict", "select", "plan", "sweep", "report", "models", "trace", "calibrate", "live")


def _core_commands() -> dict[str, str]:
    """Subcommand name -> module, for this package's modules that are subcommands."""
    return {name.rsplit(".", 1)[1]: name for name in module_names(__name__, __path__)}


def _available_commands(only: str | None = None):
    """(name, module) of every subcommand, or of `only` alone when it is one of this package's: a
    run imports its own subcommand's module, not the others' (the help lists them all)."""
    core = _core_commands()
    if only in core:
        module = importlib.import_module(core[only])
        if all(hasattr(module, attr) for attr in ("HELP", "add_arguments", "run")):
            yield only, module
            return
    from importlib.metadata import entry_points  # 25 ms: only where a plugin may be wanted

    plugins = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in core}
    names = [n for n in ORDER if n in core or n in plugins]
    names += sorted(n for n in {**core, **plugins} if n not in ORDER)
    if only in plugins:
        names = [only]
    for name in names:
        if name in core:
            module = importlib.import_module(core[name])
            if all(hasattr(module, attr) for attr in ("HELP", "add_arguments", "run")):  # else a shared helper
                yield name, module
            continue
        try:
            yield name, plugins[name].load()
        except ModuleNotFoundError as exc:
            if exc.name != plugins[name].value:  # a real missing dependency inside the module: surface it
                raise


def flag_bounds() -> dict:
    """Every command's numeric flags' bounds (command path -> flag -> Bound), from each command module's
    FLAG_BOUNDS: what the bounds reference and the tests read."""
    return {path: bounds for _, module in _available_commands() for path, bounds in
            getattr(module, "FLAG_BOUNDS", {}).items()}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of `command` alone (what a run of it needs)."""
    parser = _process.OneLineParser(
        prog="geosim",
        description="Predict, measure and choose parallel training techniques for geo-distributed GPU slices.",
    )
    parser.add_argument("--version", action="version", version=f"geosim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module in _available_commands(command):
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run, _flag_bounds=getattr(module, "FLAG_BOUNDS", {}))
    lower_choices(parser)  # --precision FP16 as --scenario UTAH-GPN (geosim.cli.vocabulary)
    whole_numbers(parser)  # --tokens-per-epoch 1e9 as 1000000000 (geosim.base.validate)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        code = _main(argv)
        if argv is None and _process.time_limit_passed():
            # the process itself (not a caller's main([...])): leave at once, as the limit promised; freeing
            # the gigabyte of objects a large question holds took seconds past it under load
            _process.exit_now(code)
        return code
    except (KeyboardInterrupt, RuntimeError) as exc:  # Ctrl-C (or SIGTERM) between the steps that catch it
        interrupt = _process.interrupt_behind(exc)
        if interrupt is None:
            raise  # a RuntimeError of its own: a bug to see whole
        terminated = isinstance(interrupt, _process.Terminated)
        print(f"geosim: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)  # one line, no traceback
        return 143 if terminated else 130


def _main(argv: list[str] | None) -> int:
    args_given = sys.argv[1:] if argv is None else argv
    _process.remember_argv(args_given)
    # the subcommand named first (options before it are --help/--version: they need every command)
    command = args_given[0] if args_given and not args_given[0].startswith("-") else None
    as_json = _process.json_wanted(args_given)
    _process.terminate_as_interrupt()
    parser = build_parser(command)  # Ctrl-C (or SIGTERM) while the subcommands load: main's one line
    if not _process.stdout_is_open():  # else every print is dropped and the answer is lost with exit 0
        print(f"geosim{' ' + command if command else ''}: error: stdout is closed: geosim writes its answer "
              f"there (redirect it to /dev/null to discard it)", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    real_stdout, sys.stdout = sys.stdout, _process.GuardedStdout(sys.stdout)
    try:
        check_flags(parser, args, args._flag_bounds)  # every number in its bound before any work (geosim/base/validate.py)
        limit = _process.parse_time_limit(args.time_limit) if hasattr(args, "time_limit") else None
        with _process.time_limit(limit):
            code = int(args._run(args) or 0)
        sys.stdout.flush()
        _process.deferred_warnings(args)  # after the answer: a failing command prints its error alone
        return code
    except GeosimError as exc:
        _process.print_error(args.command, exc.line(), as_json)
        return 2
    except _process.TimeLimit as exc:
        _process.print_error(args.command, exc.line(), as_json)
        return 2
    except _process.Terminated:
        _process.print_error(args.command, "", as_json, 143, "terminated")
        return 143
    except KeyboardInterrupt:
        _process.print_error(args.command, "", as_json, 130, "interrupted")
        return 130
    except BrokenPipeError:  # `geosim predict | head`
        return 0
    except OSError as exc:
        if exc.filename is None:
            raise  # not about a path the user gave: a bug to see whole
        # a path the checks before it did not foresee (too long a name, a loop of links, a failing
        # disk) is still the user's path: one line naming it, as every other input error
        _process.print_error(args.command, f"{exc.filename}: {exc.strerror or exc}", as_json)
        return 2
    finally:
        sys.stdout = real_stdout


if __name__ == "__main__":
    sys.exit(main())
