"""Ranks that run alike, simulated once: a symmetry of the whole run, proven before it is used.

A shift σ of the ranks (within each segment of `segment` consecutive ranks, every rank moves
`shift` places on, cyclically) is a symmetry of a run when
  - the programs map onto each other: σr's program is r's with every rank in it renamed by σ
    (a Send's destination, a Recv's source; a collective or Repeat block over a group that σ
    maps onto itself, whose steps for σr are r's renamed: the same ring neighbours, renamed; or,
    where the model holds or steps collectives, over a group σ moves onto another whose ranks
    all run or none do, its tag naming the image host where it names a host);
  - σr has r's GPU, so the same compute times;
  - the network backend says σ maps its state onto itself (its symmetric_under): routes of
    equal cost, each hop of r's routes mapped to one hop of σr's, and the run's outcome free of
    the order in which simultaneous events are processed (every hop has one sender; or, for the
    ideal network, no state at all). Where no shift passes that, a shift may fix a shared hop (a
    WAN link every pipeline replica crosses: the network's symmetric_fixing): all copies of a
    sender reserve it at one instant, and the reduced run checks at every such instant that the
    hop's backlog, counted as if every copy came first, reaches no send's end there, so that the
    copies' order decides nothing (else OrderMatters, and every rank runs).
Then the run is the same run with its ranks renamed, and, the outcome being free of event order,
it has one outcome: rank σr's times are rank r's, its bytes r's bytes. σ moves every rank (no
rank of a segment is fixed by a power of σ below segment/shift), so each rank r is the image of
exactly one representative (the first `shift` ranks of its segment) under exactly one power of
σ, and a message from s to r is, renamed by that power, a message its representative receives:
the engine runs only the representatives and answers each of their receives from the message
its renamed sender sent (EngineRun, canonical()). Where no shift passes, the full run goes on.
"""

from __future__ import annotations

from dataclasses import dataclass

from geosim.sim import collectives
from geosim.sim.schedule import HOST_IN_TAG, Collective, Compute, Recv, Repeat, Schedule, Send


@dataclass(frozen=True)
class Symmetry:
    """σ: rank r -> the rank `shift` places on in its segment of `segment` consecutive ranks."""

    size: int  # ranks, numbered 0..size-1
    segment: int  # divides size
    shift: int  # divides segment, < segment

    @property
    def copies(self) -> int:
        """Ranks each representative stands for (its orbit under σ)."""
        return self.segment // self.shift

    def image(self, rank: int) -> int:
        base = rank - rank % self.segment
        return base + (rank - base + self.shift) % self.segment

    def representative(self, rank: int) -> int:
        base = rank - rank % self.segment
        return base + (rank - base) % self.shift

    def representatives(self) -> list[int]:
        return [rank for rank in range(self.size) if rank % self.segment < self.shift]

    def power(self, rank: int, k: int) -> int:
        """σ^k(rank): k places on (back, for k < 0) in its segment's cycle."""
        base = rank - rank % self.segment
        return base + (rank - base + k * self.shift) % self.segment

    def canonical(self, src: int, dst: int) -> tuple[int, int]:
        """A message src -> dst, renamed by the power of σ that takes dst to its representative."""
        back = dst % self.segment - dst % self.shift  # places dst is past its representative
        base = src - src % self.segment
        return base + (src - base - back) % self.segment, dst - back


class OrderMatters(Exception):
    """In a run of a symmetry's representatives, two senders reserved one hop at one instant: the
    order of simultaneous events decides which goes first, and the full run's order is not the
    representatives' (the engine runs every rank instead)."""


def find_symmetry(schedule: Schedule, network) -> Symmetry | None:
    """The shift that leaves the fewest representatives among those proven to be symmetries of
    this run (programs, GPUs and the network's own check), or None."""
    devices = schedule.devices
    size = len(devices)
    if size < 2 or any(d.rank != i for i, d in enumerate(devices)) or set(schedule.programs) != set(range(size)):
        return None
    checker = network.symmetric_under
    # a group the shift moves onto another (a replica's, onto the next replica's) is run by the
    # engine's held collectives, repeated blocks and barriers (the ideal network's collectives),
    # counted by the representatives in it; a model without groups_may_move keeps groups in place
    groups_may_move = network.groups_may_move
    candidates = []
    for segment in _divisors(size):
        for shift in _divisors(segment):
            if shift < segment:
                candidates.append(Symmetry(size, segment, shift))
    candidates.sort(key=lambda s: (size // s.segment * s.shift, -s.segment))
    at_fixed_hop = getattr(network, "refused_at_fixed_hop", None)
    refused = []  # (shift, its map of hosts) the network refused at a shared hop the shift fixes
    for symmetry in candidates:
        host_image = _same_devices(devices, symmetry)
        if host_image is None:
            continue
        if not checker(symmetry.image):
            if at_fixed_hop is not None and at_fixed_hop():
                refused.append((symmetry, host_image))
        elif _programs_map(schedule.programs, symmetry, network.hosts, host_image, groups_may_move):
            return symmetry
    # none: a shift that fixes a shared hop (a WAN link all replicas cross), checked again as the reduced run goes
    # (the network's symmetric_fixing). The programs first here: that network check walks every pair per shift
    for symmetry, host_image in refused:
        if _programs_map(schedule.programs, symmetry, network.hosts, host_image, groups_may_move) and (
                network.symmetric_fixing(symmetry.image)):
            return symmetry
    return None


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _same_devices(devices, symmetry: Symmetry) -> dict[str, str] | None:
    """σr has r's GPU, and σ maps hosts onto hosts (ranks sharing a host are moved to one host):
    that map of hosts, or None."""
    host_of: dict[str, str] = {}
    for d in devices:
        other = devices[symmetry.image(d.rank)]
        # (a cluster's hosts share GPU objects: identity first, a field-by-field compare only where it fails)
        if (other.gpu is not d.gpu and other.gpu != d.gpu) or host_of.setdefault(d.host, other.host) != other.host:
            return None
    return host_of if len(set(host_of.values())) == len(host_of) else None


def _renamer(host_image: dict[str, str]):
    """A tag as σ renames it: a host a tag names (after HOST_IN_TAG) becomes its image host."""
    def renamed(tag: tuple) -> tuple:
        if HOST_IN_TAG not in tag:
            return tag
        items = list(tag)
        for i in range(len(items) - 1):
            if items[i] == HOST_IN_TAG:
                items[i + 1] = host_image.get(items[i + 1], items[i + 1])
        return tuple(items)
    return renamed


def _programs_map(programs: dict, symmetry: Symmetry, hosts: tuple[str, ...], host_image: dict[str, str],
                  groups_may_move: bool = False) -> bool:
    checked: dict[tuple[int, int], bool] = {}  # (id of r's op list, id of σr's) -> whether they map
    shapes: dict[tuple, bool] = {}
    image = symmetry.image
    renamed = _renamer(host_image)

    def group_maps(group, theirs) -> bool:
        if _invariant(group, theirs, image):
            return True
        # moved onto another group: its members all run (representatives) or none do, so the
        # engine's count of a group's running ranks is whole
        return (groups_may_move and len(set(group)) == len(group) and set(theirs) == {image(r) for r in group}
                and len({r % symmetry.segment < symmetry.shift for r in group}) == 1)

    def ops_map(mine, theirs) -> bool:
        key = (id(mine), id(theirs))
        known = checked.get(key)
        if known is not None:
            return known
        checked[key] = True  # a block met again while being checked is being checked
        ok = len(mine) == len(theirs) and all(op_maps(a, b) for a, b in zip(mine, theirs))
        checked[key] = ok
        return ok

    def op_maps(a, b) -> bool:
        kind = type(a)
        if type(b) is not kind:
            return False
        if kind is Compute:
            return a is b or a == b
        if kind is Send:
            return b.dst == image(a.dst) and (b.nbytes, b.tag, b.p2p) == (a.nbytes, renamed(a.tag), a.p2p)
        if kind is Recv:
            return b.src == image(a.src) and b.tag == renamed(a.tag)
        if kind is Repeat:
            return ((b.count, b.tag) == (a.count, renamed(a.tag)) and group_maps(a.group, b.group)
                    and ops_map(a.ops, b.ops))
        if kind is Collective:
            if (a.op, a.nbytes, a.algorithm, renamed(a.tag)) != (b.op, b.nbytes, b.algorithm, b.tag):
                return False
            key = (a.op, a.algorithm, id(a.group), id(b.group))
            known = shapes.get(key)
            if known is None:
                known = shapes[key] = group_maps(a.group, b.group) and _steps_map(a, b, image, hosts)
            return known
        return False  # a Barrier: techniques do not emit one

    return all(ops_map(programs[rank], programs[image(rank)]) for rank in programs)


def _invariant(group: tuple, theirs: tuple, image) -> bool:
    """σ maps the group onto itself, and σr's copy of it has the same members (their order aside)."""
    members = set(group)
    return len(members) == len(group) and set(theirs) == members and {image(r) for r in group} == members


def _steps_map(a: Collective, b: Collective, image, hosts) -> bool:
    """Every member's steps of b are its σ-preimage's steps of a, renamed: rings (and the rings of
    the hierarchical form) with the same lengths and the renamed neighbours. The tree only when b's
    group is a's renamed in order (its root and positions move with it)."""
    if (a.algorithm == "tree" and a.op == "allreduce") or a.op == "all_to_all":  # positions matter
        return b.group == tuple(image(r) for r in a.group)
    mine, theirs = _ring_shape(a, hosts), _ring_shape(b, hosts)
    for rank, phases in mine.items():
        renamed = tuple((length, image(nxt), image(prev)) for length, nxt, prev in phases)
        if theirs[image(rank)] != renamed:
            return False
    return True


def _ring_shape(coll: Collective, hosts) -> dict[int, tuple]:
    """rank -> per ring phase of its steps (collectives.expand): (ring length, next, previous)."""
    group = coll.group
    layout = collectives.host_layout(group, hosts) if coll.algorithm == "hierarchical" else None
    if layout is None:
        p = len(group)
        return {r: ((p, group[(i + 1) % p], group[i - 1]),) for i, r in enumerate(group)}
    order = {"allreduce": ("local", "peers", "local"), "reduce_scatter": ("local", "peers"),
             "all_gather": ("peers", "local")}[coll.op]
    shape = {}
    for rank, (local, local_pos, peers, peer_pos) in layout.items():
        rings = {"local": (local, local_pos), "peers": (peers, peer_pos)}
        shape[rank] = tuple((len(ring), ring[(pos + 1) % len(ring)], ring[pos - 1])
                            for ring, pos in (rings[name] for name in order))
    return shape
