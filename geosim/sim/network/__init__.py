"""Network models: what a transfer costs, behind one small protocol the engine calls.

The engine runs a schedule's ops and asks its network model two things: how long a
send takes to arrive (`send`), and which ops a collective becomes for one rank
(`collective_ops`: point-to-point steps, or a barrier where communication is free).
A model may also offer a fast path for a whole collective (`collective_time` when its
ranks arrive together, `collective_ends` whenever they arrive), and keeps the byte and
transfer counts the engine reports. Models, one file each:

  tcp.TCPNetwork               links, routes, TCP's window, slow start and per-message costs;
                               collectives timed by arithmetic where links have one sender each
  alphabeta.AlphaBetaNetwork   latency + bytes / bandwidth per link, first-come-first-served
                               links, no TCP; symmetric collectives simulated once
  ideal.IdealNetwork           free communication: sends cost nothing, collectives are barriers
Helpers the models share start with an underscore, as in geosim/techniques/: _topology (the graph
of hosts, sites and links, routes) and _exclusive (collectives timed by arithmetic where every link
has one sender).

Two members are optional (the engine simulates every rank without them; CountingNetwork says no):
  symmetric_under(image) -> bool   whether renaming each rank r as image(r) maps the run's network
                                   onto itself (the routes the programs use cost the same, each hop
                                   onto one hop) and its outcome does not depend on the order of
                                   simultaneous events (geosim.sim.symmetry; the proof's network half)
  reduce_to(symmetry)              only the symmetry's representatives run: collective_ends is then
                                   asked with their arrivals alone

A model is built per run by a factory called as
    factory(clock, cluster, params, devices, trace) -> NetworkModel
where clock has `.now` (the simulation's time) and trace is a list to append
("link", name, label, start, end, bytes) rows to, or None. The model classes are
their own factories.

Each model is a backend found by its module: `NAME` (what a case or `--network` calls it),
`MODEL` (its factory) and, where it has constants of its own, `PARAMETERS` (their declaration:
geosim.parameters.Scalar, key, unit, range, fit range, prior, source), `TABLE` (the parameters
file's table that holds them: the TCP model's is [transport]) and `Settings` (a frozen dataclass
with one SI field per declared parameter). geosim.params reads and writes them
(`Params.network(NAME)`), the fit frees them from the same declaration, and the reference page
lists them (`network_parameters()`). The engine has no default: the caller names the model
(`network_model(case.network)`); a Case runs "tcp" unless it says otherwise.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from functools import cache
from typing import Protocol

from geosim.errors import GeosimError

from geosim.sim import collectives
from geosim.sim.schedule import Collective, Device
from geosim.specs import Cluster, Params


class NetworkModel(Protocol):
    bytes_sent: float
    transfers: int

    def send(self, src: int, dst: int, nbytes: float, p2p: bool, label: str = "") -> float:
        """Start a transfer now (reserving what it holds); return the seconds until it has arrived."""

    def collective_ops(self, coll: Collective, rank: int) -> tuple:
        """The ops `rank` runs for `coll`: Sends and Recvs, or a Barrier of the group."""

    def collective_time(self, coll: Collective) -> float | None:
        """Fast path: when every rank of `coll` has reached it at this instant, the seconds it takes
        for all of them (counting its bytes), or None to have the engine run collective_ops."""

    def may_shortcut(self, coll: Collective) -> bool:
        """Whether collective_time could answer for `coll` (the engine then gathers its ranks first)."""

    def prepare(self, programs: dict[int, list]) -> None:
        """Called once before the run with every rank's program (a model may study its routes)."""

    def may_precompute(self, coll: Collective) -> bool:
        """Whether collective_ends times `coll`: the engine then holds each rank that reaches it
        until the last one has, whenever they arrive, instead of running its steps."""

    def collective_ends(self, coll: Collective, arrivals: dict[int, float]) -> dict[int, float]:
        """All of `coll`'s transfers, each rank starting at its arrival time (rank -> time), with
        every state the steps would leave; each rank's end time, exactly as the steps' events."""

    def count(self, src: int, nbytes: float, transfers: int = 1) -> None:
        """Record traffic that was not simulated (repetitions the engine skipped)."""

    def sent(self, rank: int) -> tuple[float, int]:
        """(bytes, transfers) `rank` has sent so far."""

    def shift_connections(self, src: int, since: float, delta: float) -> None:
        """Repetitions of a block were skipped: src's transfer state active since `since` moves on by delta."""

NetworkFactory = Callable[..., NetworkModel]


class CountingNetwork:
    """What every model shares: byte and transfer counts, collectives as point-to-point steps,
    no fast path (collective_ends is never asked) and no state to shift. Subclasses provide send()."""

    def __init__(self, clock, cluster: Cluster, params: Params, devices: list[Device], trace: list | None = None):
        self.env = clock
        self.cluster = cluster
        self.params = params
        self.devices = devices
        self.trace = trace
        self.hosts = tuple(d.host for d in devices)
        self.bytes_sent = 0.0
        self.transfers = 0
        self._sent = {d.rank: [0.0, 0] for d in devices}  # rank -> [bytes, transfers] it has sent

    def count(self, src: int, nbytes: float, transfers: int = 1) -> None:
        self.transfers += transfers
        self.bytes_sent += nbytes
        mine = self._sent[src]
        mine[0] += nbytes
        mine[1] += transfers

    def sent(self, rank: int) -> tuple[float, int]:
        mine = self._sent[rank]
        return mine[0], mine[1]

    def collective_ops(self, coll: Collective, rank: int) -> tuple:
        return collectives.expand(coll, rank, self.hosts)

    def may_shortcut(self, coll: Collective) -> bool:
        return False

    def collective_time(self, coll: Collective) -> float | None:
        return None

    def prepare(self, programs: dict[int, list]) -> None:
        return None

    def may_precompute(self, coll: Collective) -> bool:
        return False  # so collective_ends is never asked

    def shift_connections(self, src: int, since: float, delta: float) -> None:
        return None

    def symmetric_under(self, image) -> bool:
        return False  # not proven for this model: every rank runs

    def reduce_to(self, symmetry) -> None:
        return None

@cache
def _backends() -> dict[str, object]:
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):  # a helper the models share (_topology, _exclusive), not a model
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")  # found by name: adding a model is one file
        if hasattr(module, "NAME") and hasattr(module, "MODEL"):
            found[module.NAME] = module
    return found


def network_parameters() -> dict[str, tuple]:
    """name -> (its TABLE, its PARAMETERS, its Settings class) of every model with constants of its own."""
    return {name: (module.TABLE, module.PARAMETERS, module.Settings)
            for name, module in sorted(_backends().items()) if hasattr(module, "PARAMETERS")}


def network_names() -> list[str]:
    return sorted(_backends())


def network_model(name: str) -> NetworkFactory:
    """The factory of the network model called `name` (tcp, alpha-beta, ideal)."""
    backends = _backends()
    if name not in backends:
        raise GeosimError(f"unknown network model {name!r} (known: {', '.join(sorted(backends))})", key="network")
    return backends[name].MODEL


class _Still:
    """A clock that never moves: asking a model for a best case needs no simulation."""

    now = 0.0


def least_delay(name: str, cluster: Cluster, params: Params, devices: list[Device]) -> Callable[..., float]:
    """(src, dst, nbytes, p2p) -> the fewest seconds a send can take on the model `name`: every hop
    idle, windows at their largest (a floor the planner prunes with); 0 for a model without one."""
    model = network_model(name)(_Still(), cluster, params, devices)
    return getattr(model, "least_delay_s", lambda src, dst, nbytes, p2p: 0.0)
