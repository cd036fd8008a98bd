"""The discrete-event kernel under the engine: SimPy's Environment cut to what the engine uses.

The engine used SimPy itself; its per-event bookkeeping (priorities, failure handling, an
active-process slot, a method call per step and per schedule) was most of a prediction's time.
This keeps SimPy's semantics exactly, so every prediction is the same to the last bit:

- events are processed in order of (time, insertion): SimPy's (time, priority, id) with every
  event at its NORMAL priority; its URGENT start of each process is the processes starting, in
  order, before the first event;
- a time is `now + delay`, computed as SimPy computes it;
- a processed event hands its callbacks its value in the order they were added;
- a process that yields an event already processed goes on at once with its value.

Nothing fails here: the engine never fails an event, so there is no failure path. One thing
SimPy lacks: `succeed_at`, an event processed at a given time rather than at now + a delay
(which would round), for ranks released from a collective the network timed ahead.
"""

from __future__ import annotations

from heapq import heappop, heappush
from itertools import count

PENDING = object()


class Event:
    """Something a process can wait for. `callbacks` is None once the event has been processed."""

    __slots__ = ("callbacks", "value")

    def __init__(self, value=PENDING):
        self.callbacks = []
        self.value = value


class Clock:
    __slots__ = ("now", "_queue", "_ids", "_starting")

    def __init__(self):
        self.now = 0.0
        self._queue: list = []
        self._ids = count()
        self._starting: list = []

    def timeout(self, delay: float, value=None) -> Event:
        """An event processed `delay` seconds from now."""
        event = Event(value)
        heappush(self._queue, (self.now + delay, next(self._ids), event))
        return event

    def event(self) -> Event:
        """An event processed when succeed() is called on it."""
        return Event()

    def succeed(self, event: Event, value=None) -> None:
        if event.value is not PENDING:
            raise RuntimeError("event already triggered")
        event.value = value
        heappush(self._queue, (self.now, next(self._ids), event))

    def succeed_at(self, event: Event, time: float, value=None) -> None:
        """succeed(), processed at `time` (not before now): for a time computed ahead, which
        now + (time - now) would round (the engine's arithmetic collectives)."""
        if event.value is not PENDING:
            raise RuntimeError("event already triggered")
        if time < self.now:
            raise ValueError(f"event scheduled in the past: {time} < {self.now}")
        event.value = value
        heappush(self._queue, (time, next(self._ids), event))

    def process(self, generator) -> None:
        """Run a generator that yields events, from the start of run()."""
        self._starting.append(generator)

    def run(self) -> None:
        """Process events until none is left."""
        for generator in self._starting:
            _start(generator)
        self._starting = []
        queue = self._queue
        while queue:
            self.now, _, event = heappop(queue)
            callbacks, event.callbacks = event.callbacks, None
            for callback in callbacks:
                callback(event)


def _start(generator) -> None:
    send = generator.send

    def resume(event, send=send):
        value = event.value
        while True:
            try:
                event = send(value)
            except StopIteration:
                return
            callbacks = event.callbacks
            if callbacks is not None:
                callbacks.append(resume)
                return
            value = event.value  # processed already: go on at once, as SimPy does

    try:
        event = next(generator)
    except StopIteration:
        return
    if event.callbacks is not None:
        event.callbacks.append(resume)
    else:
        resume(event)
