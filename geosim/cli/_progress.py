"""Progress of long work: a line on stderr every few seconds, whatever stderr is (a terminal, a
file, a pipe) and also under --json (stdout stays the one document). Quiet for work that ends
within the first interval, so quick commands print nothing extra."""

from __future__ import annotations

import sys
import time

INTERVAL_S = 5.0  # seconds between lines: often enough to see it move, rarely enough to read


class Every:
    """Call with (done, total) as work advances; prints `label: done/total what (N s)` at most
    once per interval, and a closing line if it printed anything."""

    def __init__(self, label: str, what: str = "", interval_s: float = INTERVAL_S):
        self.label, self.what, self.interval_s = label, what, interval_s
        self.started = self.last = time.monotonic()
        self.printed = False

    def __call__(self, done: int, total: int | None = None, note: str = "") -> None:
        now = time.monotonic()
        if now - self.last < self.interval_s:
            return
        self.last = now
        of = f"/{total:,}" if total is not None else ""
        self._line(f"{done:,}{of} {self.what}{' ' + note if note else ''} ({now - self.started:.0f} s)")

    def message(self, text: str) -> None:
        """For a callback that reports with a message ('[12/400] utah-gpn ...'): the latest, now and then."""
        now = time.monotonic()
        if now - self.last >= self.interval_s:
            self.last = now
            self._line(f"{text.strip()} ({now - self.started:.0f} s)")

    def close(self, summary: str = "done") -> None:
        if self.printed:
            self._line(f"{summary} ({time.monotonic() - self.started:.0f} s)")

    def _line(self, text: str) -> None:
        from geosim.cli._process import note_activity

        note_activity(f"{self.label}: {text}")
        self.printed = True
        try:
            print(f"  {self.label}: {text}", file=sys.stderr, flush=True)
        except (OSError, ValueError):  # stderr closed: progress is not worth failing for
            pass


# work whose own first steps say it would take longer than this is refused before it goes on
MAX_ESTIMATED_S = 3600.0


def refuse_if_too_long(done: int, total: int, elapsed_s: float, flag: str, what: str, per_flag: int = 1) -> None:
    """A cost estimate from the first `done` of `total` items: refuse (one line naming `flag`)
    when the rest would take more than MAX_ESTIMATED_S. `per_flag`: items per unit of the flag's
    value (predictions per draw), so the line says how large a value would fit."""
    from geosim.base.errors import GeosimError

    if done <= 0 or total <= done:
        return
    per_item = elapsed_s / done
    estimate = per_item * total
    if estimate > MAX_ESTIMATED_S:
        fits = max(1, int(MAX_ESTIMATED_S / per_item / per_flag))
        raise GeosimError(f"{total:,} {what} at {per_item:.2g} s each would take about {estimate / 3600:.1f} hours, "
                          f"past the {MAX_ESTIMATED_S / 3600:.0f}-hour limit on one command; {flag} {fits:,} or less fits",
                          source=flag)


class Heartbeat:
    """For work with phases that report nothing themselves (reading, checking, writing records):
    a thread prints `label: <phase> (N s)` every interval until the block ends. Set .phase as the
    work moves on."""

    def __init__(self, label: str, phase: str = "working", interval_s: float = INTERVAL_S):
        import threading

        self.label, self.phase, self.interval_s = label, phase, interval_s
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, text: str) -> None:  # also what a time limit's line says the command was doing
        from geosim.cli._process import note_activity

        self._phase = text
        note_activity(f"{self.label}: {text}")

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(1)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                print(f"  {self.label}: {self.phase} ({time.monotonic() - self.started:.0f} s)", file=sys.stderr,
                      flush=True)
            except (OSError, ValueError):
                return
