"""Network backends: what a transfer costs, behind one small protocol the engine calls.

The seam (`NetworkBackend`) is small: a backend implements `send_at` (CountingNetwork gives the rest);
whatever else it can do is an optional protocol (CollectiveShortcut, CollectivePrecompute, Symmetric,
ConnectionState, SendFloor), asked for once when a run starts (`capabilities(net)`), never probed per
op. Two layers, as ASTRA-sim's network API (send, recv, schedule, time) has collectives above it:

  transfers, what every backend answers (the engine matches each Send with its Recv in its own
  mailbox, so a backend sees sends alone):
    send_at(src, dst, nbytes, p2p, label, now) -> time   a transfer started at `now`, reserving what it
                                                          holds; when it has arrived. The one call that
                                                          prices traffic: the engine's steps and the
                                                          collective fast paths below all go through it
    count(src, nbytes, transfers), sent(rank)           traffic not simulated (a skipped repetition);
                                                          what a rank has sent
    shift_connections(src, since, delta)                skipped repetitions move the transfer state on
  collectives, above the transfers (without the optional protocols every collective runs as its
  point-to-point steps):
    collective_ops(coll, rank)                          the Sends and Recvs (or a Barrier) a rank runs
    may_shortcut(coll), collective_time(coll)           ranks arriving together: the whole collective
    prepare(programs), may_precompute(coll),            ranks arriving apart: every rank's end time,
      collective_ends(coll, arrivals)                   the steps' own, by walking them with send_at
  and what the symmetry proof and the planner ask (geosim.sim.symmetry; techniques/_floor.py):
    hosts, symmetric_under(image), groups_may_move,     whether renaming ranks maps the network onto
      reduce_to(symmetry)                               itself; only representatives then run
    symmetric_fixing(image), refused_at_fixed_hop()     the same where a shared hop is its own image
                                                        (checked as the reduced run goes; optional)
    least_delay_s(src, dst, nbytes, p2p)                a floor on a send's time (0: none)
    least_step_s(src, dst, nbytes)                      a collective step's least hold of its connection
                                                        and least time to arrive (the ring floors)

Models, one file each:

  fabric.FabricNetwork         each link by its transport: NVLink inside a host, RDMA (InfiniBand, RoCE)
                               between hosts that have it, with NCCL's own model for their collectives
                               (_nccl: ring or tree, LL/LL128/Simple); TCP sockets (tcp.py's routes) on the
                               rest. What a case runs by default; on a cluster without NVLink or RDMA it is tcp
  tcp.TCPNetwork               links, routes, TCP's window, slow start and per-message costs;
                               collectives timed by arithmetic where links have one sender each
  alphabeta.AlphaBetaNetwork   latency + bytes / bandwidth per link, first-come-first-served
                               links, no TCP; symmetric collectives simulated once
  ideal.IdealNetwork           free communication: sends cost nothing, collectives are barriers
Helpers the backends share start with an underscore, as in geosim/techniques/: _topology (the graph
of hosts, sites and links, routes), _nccl (NCCL's tuning model), _exclusive (collectives timed by arithmetic where every link
has one sender) and _loss (TCP's response functions under loss and a token bucket's drops).

A backend is built per run by a factory called as
    factory(clock, cluster, params, devices, trace) -> NetworkBackend
where clock has `.now` (the simulation's time) and trace is a list to append
("link", name, label, start, end, bytes) rows to, or None. The backend classes are
their own factories.

Each backend is one module found by its module: `NAME` (what a case or `--network` calls it),
`BACKEND` (its factory) and, where it has constants of its own, `PARAMETERS` (their declaration:
geosim.base.parameters.Scalar, key, unit, range, fit range, prior, source), `TABLE` (the parameters
file's table that holds them: the TCP backend's is [transport]) and `Settings` (a frozen dataclass
with one SI field per declared parameter). geosim.inputs.params reads and writes them
(`Params.network(NAME)`), the fit frees them from the same declaration, and the reference page
lists them (`network_parameters()`). The engine has no default: the caller names the backend
(`network_backend(case.network)`); a Case runs "fabric" unless it says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from geosim.base.discover import modules as entry_modules
from geosim.base.errors import GeosimError

from geosim.sim import collectives
from geosim.sim.schedule import Collective, Device
from geosim.inputs.specs import Cluster, Params


class NetworkBackend(Protocol):
    """What every backend answers (the engine, the symmetry proof and the planner need no more). Of the
    members, send_at is the one a backend writes: CountingNetwork gives the rest. Everything else a backend
    may do is an optional protocol below, asked for once when a run starts (`capabilities`)."""

    bytes_sent: float
    transfers: int
    hosts: tuple[str, ...]  # each rank's host

    def send_at(self, src: int, dst: int, nbytes: float, p2p: bool, label: str, now: float) -> float:
        """A transfer started at `now` (reserving what it holds); the time it has arrived."""

    def send(self, src: int, dst: int, nbytes: float, p2p: bool, label: str = "") -> float:
        """send_at started at the clock's now; the seconds until it has arrived."""

    def count(self, src: int, nbytes: float, transfers: int = 1) -> None:
        """Record traffic that was not simulated (repetitions the engine skipped)."""

    def sent(self, rank: int) -> tuple[float, int]:
        """(bytes, transfers) `rank` has sent so far."""

    def collective_ops(self, coll: Collective, rank: int) -> tuple:
        """The ops `rank` runs for `coll`: Sends and Recvs, or a Barrier of the group."""


# --- optional protocols: a backend that has one implements all of its members ------------------------------

@runtime_checkable
class CollectiveShortcut(Protocol):
    """Ranks arriving together: the whole collective timed at once (alpha-beta's symmetric fast path)."""

    def may_shortcut(self, coll: Collective) -> bool:
        """Whether collective_time could answer for `coll` (the engine then gathers its ranks first)."""

    def collective_time(self, coll: Collective) -> float | None:
        """When every rank of `coll` has reached it at this instant, the seconds it takes for all of
        them (counting its bytes), or None to have the engine run collective_ops."""


@runtime_checkable
class CollectivePrecompute(Protocol):
    """Ranks arriving apart: each rank's end time computed when the last arrives (tcp's _exclusive,
    fabric's NCCL model)."""

    def prepare(self, programs: dict[int, list]) -> None:
        """Called once before the run with every rank's program (a backend may study its routes)."""

    def may_precompute(self, coll: Collective) -> bool:
        """Whether collective_ends times `coll`: the engine then holds each rank that reaches it
        until the last one has, whenever they arrive, instead of running its steps."""

    def collective_ends(self, coll: Collective, arrivals: dict[int, float]) -> dict[int, float]:
        """All of `coll`'s transfers, each rank starting at its arrival time (rank -> time), with
        every state the steps would leave; each rank's end time."""


@runtime_checkable
class Symmetric(Protocol):
    """What the symmetry proof asks (geosim.sim.symmetry): without it every rank runs."""

    groups_may_move: bool  # a symmetry may move a group onto another (the backend holds or steps its collectives)

    def symmetric_under(self, image) -> bool:
        """Whether renaming each rank r as image(r) maps the run's network onto itself and its outcome
        does not depend on the order of simultaneous events."""

    def reduce_to(self, symmetry) -> None:
        """Only the symmetry's representatives run: collective_ends is asked with their arrivals alone."""


@runtime_checkable
class ConnectionState(Protocol):
    """A backend whose transfers leave state behind (TCP's windows): skipped repetitions move it on."""

    def shift_connections(self, src: int, since: float, delta: float) -> None:
        """Repetitions of a block were skipped: src's transfer state active since `since` moves on by delta."""


@runtime_checkable
class SendFloor(Protocol):
    """A lower bound on a send's time, which the planner prunes with (techniques/_pipeline_floor.py)."""

    def least_delay_s(self, src: int, dst: int, nbytes: float, p2p: bool) -> float:
        """The fewest seconds a send of these bytes can take."""


@runtime_checkable
class StepFloor(Protocol):
    """Lower bounds on a collective step's send where each connection carries one message after another
    (techniques/_floor.py's ring floors)."""

    def least_step_s(self, src: int, dst: int, nbytes: float) -> tuple[float, float]:
        """(seconds the send holds its connection at least, seconds from its issue to its arrival at least)."""


def _no(*_args, **_kwargs) -> bool:
    return False


def _none(*_args, **_kwargs) -> None:
    return None


def _zero(*_args, **_kwargs) -> float:
    return 0.0


def _never_asked(coll, arrivals):
    raise NotImplementedError("collective_ends asked of a backend without CollectivePrecompute")


@dataclass(frozen=True)
class Capabilities:
    """A backend's answers to the optional protocols, looked up once when a run starts (the engine calls
    these, never probes the backend per op): its own methods where it has the protocol, else the
    defaults (no fast path, no symmetry proven, no state to shift, no floor)."""

    hosts: tuple[str, ...]
    may_shortcut: Callable = _no
    collective_time: Callable = _none
    prepare: Callable = _none
    may_precompute: Callable = _no
    collective_ends: Callable = _never_asked
    groups_may_move: bool = False
    symmetric_under: Callable = _no
    symmetric_fixing: Callable = _no  # symmetric_under where a shared hop may be its own image (checked at run time)
    refused_at_fixed_hop: Callable = _no  # whether symmetric_under's last refusal may pass symmetric_fixing
    reduce_to: Callable = _none
    shift_connections: Callable = _none
    least_delay_s: Callable = _zero


def capabilities(net: NetworkBackend) -> Capabilities:
    """Which optional protocols `net` implements, asked once: the callables the engine then uses."""
    found: dict = {"hosts": net.hosts}
    if isinstance(net, CollectiveShortcut):
        found.update(may_shortcut=net.may_shortcut, collective_time=net.collective_time)
    if isinstance(net, CollectivePrecompute):
        found.update(prepare=net.prepare, may_precompute=net.may_precompute, collective_ends=net.collective_ends)
    if isinstance(net, Symmetric):
        found.update(groups_may_move=net.groups_may_move, symmetric_under=net.symmetric_under,
                     reduce_to=net.reduce_to)
        if hasattr(net, "symmetric_fixing"):
            found.update(symmetric_fixing=net.symmetric_fixing, refused_at_fixed_hop=net.refused_at_fixed_hop)
    if isinstance(net, ConnectionState):
        found.update(shift_connections=net.shift_connections)
    if isinstance(net, SendFloor):
        found.update(least_delay_s=net.least_delay_s)
    return Capabilities(**found)


NetworkFactory = Callable[..., NetworkBackend]


class CountingNetwork:
    """What every backend shares: byte and transfer counts, send() from send_at, collectives as
    point-to-point steps. Subclasses provide send_at() and whichever optional protocols they have."""

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

    def send_at(self, src: int, dst: int, nbytes: float, p2p: bool, label: str, now: float) -> float:
        raise NotImplementedError(f"{type(self).__name__} prices no transfer: a backend implements send_at")

    def send(self, src: int, dst: int, nbytes: float, p2p: bool, label: str = "") -> float:
        now = self.env.now
        return self.send_at(src, dst, nbytes, p2p, label, now) - now

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


@cache
def _backends() -> dict[str, object]:
    # found by name: adding a backend is one file (_topology, _exclusive: helpers the backends share)
    return {module.NAME: module for module in entry_modules(__name__, __path__, "NAME", "BACKEND")}


def network_parameters() -> dict[str, tuple]:
    """name -> (its TABLE, its PARAMETERS, its Settings class) of every backend with constants of its own."""
    return {name: (module.TABLE, module.PARAMETERS, module.Settings)
            for name, module in sorted(_backends().items()) if hasattr(module, "PARAMETERS")}


def network_names() -> list[str]:
    return sorted(_backends())


def network_backend(name: str) -> NetworkFactory:
    """The factory of the network backend called `name` (tcp, alpha-beta, ideal)."""
    backends = _backends()
    if name not in backends:
        raise GeosimError(f"unknown network backend {name!r} (known: {', '.join(sorted(backends))})", key="network")
    return backends[name].BACKEND


class _Still:
    """A clock that never moves: asking a backend for a best case needs no simulation."""

    now = 0.0


def least_step(name: str, cluster: Cluster, params: Params, devices: list[Device]) -> Callable[..., tuple] | None:
    """(src, dst, nbytes) -> (the fewest seconds a collective step's send holds its connection, the fewest
    from its issue to its arrival) on the backend `name`, where it sends over connections one message after
    another (the TCP model's and fabric's StepFloor); None for a backend without it."""
    return send_floors(name, cluster, params, devices)[1]


def send_floors(name: str, cluster: Cluster, params: Params, devices: list[Device]) -> tuple[Callable, Callable | None]:
    """least_delay's and least_step's answers from one backend (its routes priced once for both)."""
    net = network_backend(name)(_Still(), cluster, params, devices)
    return capabilities(net).least_delay_s, (net.least_step_s if isinstance(net, StepFloor) else None)


def least_delay(name: str, cluster: Cluster, params: Params, devices: list[Device]) -> Callable[..., float]:
    """(src, dst, nbytes, p2p) -> the fewest seconds a send can take on the backend `name`: every hop
    idle, windows at their largest (a floor the planner prunes with); 0 for a backend without one."""
    return capabilities(network_backend(name)(_Still(), cluster, params, devices)).least_delay_s
