"""SIGINT and SIGTERM as a flag the run checks at safe points, never an exception thrown
into the middle of an import, a compilation or a collective.

An exception raised inside jax's import or XLA's compiler left the process half torn down:
a false "jax is not installed", or a record written and then a SIGSEGV on the way out. With
the flag, a run stops at the next step boundary (or right after the compilation) and
reports an interrupted run. A second signal means "now": the process exits at once (130),
writing nothing more, so no record is ever half-written.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

_state = {"signal": None, "installed": False, "abandoned": False, "recorded": False, "writing": False,
          "exit_after_write": None}


def _handler(signum, frame):
    if _state["signal"] is not None and _state["writing"]:
        # the record is being appended (a few milliseconds): exiting now could leave a half line
        # or say "without a record" about one that lands; exit the moment it is on disk
        _state["exit_after_write"] = signum
        return
    if _state["signal"] is not None:  # the second one: stop now, write nothing more
        try:
            sys.stderr.write("interrupted again: exiting now (the record is written)\n" if _state["recorded"]
                             else "interrupted again: exiting without a record\n")
            sys.stderr.flush()
        finally:
            os._exit(128 + signum)
    _state["signal"] = signum
    name = signal.Signals(signum).name
    try:
        sys.stderr.write(f"{name}: stopping at the next safe point (again to exit at once)\n")
        sys.stderr.flush()
    except Exception:
        pass


def mark_recorded() -> None:
    """The run's record is on disk: a second signal from now on loses nothing."""
    _state["recorded"] = True


@contextlib.contextmanager
def writing_record():
    """Append the record inside this block: a second signal that comes meanwhile waits for the
    block's end, then exits at once (130) saying whether the record was written."""
    _state["writing"] = True
    try:
        yield
    finally:
        _state["writing"] = False
        if _state["exit_after_write"] is not None:
            _handler(_state["exit_after_write"], None)


def install() -> None:
    """Catch SIGINT and SIGTERM from now on (main thread only; idempotent)."""
    if _state["installed"]:
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # ignored on purpose (nohup, a background job): stays so
            signal.signal(sig, _handler)
    _state["installed"] = True


@contextlib.contextmanager
def handling():
    """install() for the block, and the handlers found before it back after it: a caller in the same
    process (a test runner, a notebook, a script calling geosim.cli.main) keeps its own Ctrl-C. Without
    this a pytest run that had run a live command in-process took its first Ctrl-C as this run's "stop
    at the next safe point" and ended at the second one without a summary."""
    if _state["installed"]:
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    install()
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: set outside Python, nothing to put back
                signal.signal(sig, handler)
        _state.update(signal=None, installed=False, recorded=False, writing=False, exit_after_write=None)


def requested() -> str | None:
    """The name of the signal received, if any (SIGINT, SIGTERM)."""
    return signal.Signals(_state["signal"]).name if _state["signal"] is not None else None


def check() -> None:
    """Raise KeyboardInterrupt at a safe point if a signal came."""
    if _state["signal"] is not None:
        raise KeyboardInterrupt(requested())


def call(fn, *args):
    """fn(*args), in a helper thread while this one watches for a signal: long calls into
    XLA (compiling a step takes seconds to minutes) stop at once. An abandoned call keeps
    running in its thread, so the process must then end with hard_exit(), not a normal
    interpreter shutdown (which would tear JAX down under it: the old SIGSEGV)."""
    if not _state["installed"]:
        return fn(*args)
    import threading

    box = {}

    def work():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=work, name=getattr(fn, "__name__", "call"), daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.05)
        if _state["signal"] is not None and thread.is_alive():
            _state["abandoned"] = True
            raise KeyboardInterrupt(requested())
    if "error" in box:
        raise box["error"]
    return box["value"]


def hard_exit_needed() -> bool:
    return _state["abandoned"]


def hard_exit(code: int) -> None:
    """End now, after flushing what was printed (a call() is still running in its thread)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def exit_code(default: int = 130) -> int:
    """The shell's convention: 128 + the signal's number (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + _state["signal"] if _state["signal"] is not None else default
