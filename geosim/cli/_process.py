"""What every subcommand's process gets, whatever it runs (used by geosim.cli.main):

- SIGTERM is handled as SIGINT: the command unwinds, so atomic writers remove their temporary
  files and locks are released, and the process exits 143 with one line.
- A closed stdout is refused before any work (Python would otherwise drop every print, and a
  command would exit 0 with its answer lost); a stdout that fails later (no space, EIO) is one line
  naming stdout, never a traceback at exit.
- Under --json, stdout is one JSON document also when the command fails: an error object with
  the same one line that goes to stderr, and exit 2. argparse's own errors are one line as well.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading

from geosim.base.errors import elide_long_words
from geosim.base.fileio import output_error

ERROR_SCHEMA = "geosim.error/1"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so that it unwinds as on Ctrl-C."""


def interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt (Ctrl-C, SIGTERM, the time limit) an exception was raised from, if any: Python
    3.11 wraps what a descriptor's __set_name__ raises in a RuntimeError, so a signal that lands while a
    dataclass is being made (importing a module at start-up) surfaces as one."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__
    return None


# Issue 44 bounds a question (predict, select, plan, trace) by 60 s: past its --time-limit a command stops,
# wherever it is, and says in one line what it was doing and what to ask instead (exit 2). 50 s leaves the
# process's start-up and exit inside the minute on a loaded machine (55 s ended at 59.6 s beside a test run);
# `--time-limit none` lifts it for a question worth the wait.
DEFAULT_TIME_LIMIT = "50s"
_activity = ""  # the latest progress line's text: what the command was doing when its time ran out


def note_activity(text: str) -> None:
    """Progress reporters say here what the command is doing now (geosim.cli._progress, common.Progress)."""
    global _activity
    _activity = text


class TimeLimit(KeyboardInterrupt):
    """The command's --time-limit passed (SIGALRM), raised where the program is, so that it unwinds as on
    Ctrl-C (atomic writers clean up, locks are released), then ends with one line and exit 2. A
    KeyboardInterrupt, not an Exception: a handler of GeosimError or Exception on the way never swallows it."""

    def __init__(self, seconds: float):
        super().__init__(seconds)
        self.seconds = seconds
        self.activity = _activity

    def line(self) -> str:
        doing = f" ({self.activity})" if self.activity else ""
        return (f"stopped at its time limit of {self.seconds:g} s{doing}; ask less (--technique, --hosts, "
                "--max-gpus, fewer microbatches or layers) or give --time-limit a longer time (none: no limit)")


_passed = False  # the time limit of the command that ran last passed


def _raise_time_limit(signum, frame):
    global _passed
    _passed = True
    raise TimeLimit(_limit_s)


def time_limit_passed() -> bool:
    return _passed


def exit_now(code: int) -> None:
    """End the process with `code` after flushing its output, without freeing what it holds."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


_limit_s = 0.0


@contextlib.contextmanager
def time_limit(seconds: float | None):
    """Raise TimeLimit in this (the main) thread once `seconds` of wall time pass inside the block, and
    every quarter second after until it is left; None or 0: no limit. Forked children do not inherit the timer."""
    global _limit_s, _activity, _passed
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return
    _limit_s, _activity, _passed = seconds, "", False
    previous = signal.signal(signal.SIGALRM, _raise_time_limit)
    # then again every quarter second until the block is left: a handler that runs inside a finalizer (a
    # generator closed by the garbage collector, a __del__) has its exception printed as unraisable and
    # dropped, and the command would run on past its limit
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.25)
    previous_hook = sys.unraisablehook

    def hook(unraisable):  # the dropped one is not worth a printed traceback: the next quarter second raises again
        if not isinstance(unraisable.exc_value, TimeLimit):
            previous_hook(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        sys.unraisablehook = previous_hook


def parse_time_limit(text: str | None) -> float | None:
    """--time-limit: a duration ('90s', '10min', '2h'; a bare number is seconds), or none/0 for no limit."""
    from geosim.base.units import parse_duration

    if text is None or text.strip().lower() in ("none", "0", "0s", "off"):
        return None
    return parse_duration(text, "--time-limit", bare="s", low=1.0, high=7 * 86400.0)


_MAIN_PID: int | None = None


def _raise_terminated(signum, frame):
    if os.getpid() != _MAIN_PID:  # a forked child (a sweep's pool worker) inherited this: die as SIGTERM says
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    raise Terminated()


def terminate_as_interrupt() -> None:
    """SIGTERM unwinds like SIGINT in this process (only where nobody installed a handler of their
    own); processes forked from it still die at once, as a pool's terminate() expects."""
    global _MAIN_PID
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        _MAIN_PID = os.getpid()
        signal.signal(signal.SIGTERM, _raise_terminated)


def stdout_is_open() -> bool:
    if sys.stdout is None:  # Python's stdout when fd 1 was closed at start
        return False
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # a test's StringIO: open, with no descriptor
        return True
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def json_wanted(argv: list[str]) -> bool:
    return "--json" in argv


def print_error(command: str | None, line: str, as_json: bool, code: int = 2, kind: str = "error") -> None:
    """The one line on stderr (`geosim CMD: error: ...`, or `geosim CMD: interrupted`); under --json
    also the error object on stdout, with the exit code."""
    name = f"geosim {command}" if command else "geosim"
    print(f"{name}: {kind}: {line}" if line else f"{name}: {kind}", file=sys.stderr)
    if as_json and sys.stdout is not None:
        doc = {"schema": ERROR_SCHEMA, "command": command, "error": line or kind, "exit": code}
        try:
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
            sys.stdout.flush()
        except Exception:  # stdout itself failing: the line on stderr says it all
            pass


class OneLineParser(argparse.ArgumentParser):
    """argparse's errors as one line (no usage block), and as a JSON error object under --json."""

    def error(self, message):
        argv = sys.argv[1:] if _ARGV is None else _ARGV
        command = self.prog.split(" ", 1)[1] if " " in self.prog else None
        prog = self.prog
        if command is None and argv:  # `geosim predict --bogus`: the top parser reports it, of predict
            commands = next((a.choices for a in self._actions if isinstance(a, argparse._SubParsersAction)), {})
            if argv[0] in commands:
                command, prog = argv[0], commands[argv[0]].prog
        print_error(command, f"{elide_long_words(message)} (see {prog} --help)", json_wanted(argv))
        sys.exit(2)


_ARGV: list[str] | None = None


def remember_argv(argv: list[str]) -> None:
    global _ARGV
    _ARGV = list(argv)


def deferred_warnings(args) -> None:
    """Deprecation lines collected while parsing or running: printed once the command has run (a
    deprecated flag and an error together print the error alone)."""
    for line in getattr(args, "_deprecations", []) or []:
        print(line, file=sys.stderr)


class GuardedStdout:
    """sys.stdout, whose write failures (no space, EIO) are one line naming stdout; a closed pipe
    stays BrokenPipeError (`geosim predict | head` is not an error)."""

    def __init__(self, stream):
        self._stream = stream

    def _guarded(self, method, *args):
        try:
            return method(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise output_error("stdout", exc, "cannot write the answer", file=False) from None

    def write(self, text):
        return self._guarded(self._stream.write, text)

    def writelines(self, lines):
        return self._guarded(self._stream.writelines, lines)

    def flush(self):
        return self._guarded(self._stream.flush)

    def __getattr__(self, name):
        return getattr(self._stream, name)
