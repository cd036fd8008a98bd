"""Collectives timed by arithmetic instead of events, where every link is one sender's own.

A collective's steps cost most of a run's events: each step is a send (a timeout) and a
receive (a wait) on every rank. When no hop (link direction, GPU port) of the whole run is
ever used by two senders, the order in which different senders' transfers are started
cannot change any of them: a hop's backlog and a connection's window move only with their
own sender's transfers, and each sender's transfers still happen in its program's order.
Then a collective can be held until its last rank arrives and timed all at once, each rank
starting from its own arrival time (ranks on mixed GPUs arrive apart): the same send()
arithmetic per step, the same state left behind, and each rank released at the very
instant its last receive would have completed. Other runs (a hop with two senders: GPUs
sharing a NIC into one ring, point-to-point sends into a ring's port; two groups'
collectives under one tag; a trace wanted) run every step as events.

`ExclusiveLinks` gives a model this, given its `route(src, dst).hops` and a
`send_at(src, dst, nbytes, p2p, label, now)` that is its send() started at `now`.

Over 400 lines: the same pairs and hop maps serve the symmetry's network half (symmetric_under,
symmetric_fixing, reduce_to and the reduced run's checks), which is why it lives here.
"""

from __future__ import annotations

import copy
from dataclasses import fields

from geosim.sim import collectives
from geosim.sim.schedule import Collective, Recv, Repeat, Send
from geosim.sim.symmetry import OrderMatters


def sender_pairs(programs: dict[int, list], hosts: tuple[str, ...]):
    """Every (sender, receiver) pair the programs can send over, each once, as they are met:
    point-to-point sends and each collective's steps, inside Repeat blocks too. Raises
    SharedTag where two groups' collectives carry one tag (the engine holds a collective's
    ranks by tag and context: it would gather both groups' ranks as one)."""
    seen_pairs: set[tuple[int, int]] = set()
    seen_collectives: set[tuple] = set()
    group_of: dict[tuple, tuple] = {}  # a collective's tag -> its group
    seen_blocks: set[tuple[int, int]] = set()  # (rank, id of an op list): programs share blocks
    for rank, program in programs.items():
        pending = [program]
        while pending:
            ops = pending.pop()
            if (rank, id(ops)) in seen_blocks:
                continue
            seen_blocks.add((rank, id(ops)))
            for op in ops:
                kind = type(op)
                if kind is Send:
                    found = ((rank, op.dst),)
                elif kind is Repeat:
                    pending.append(op.ops)
                    continue
                elif kind is Collective:
                    group = group_of.setdefault(op.tag, op.group)
                    if group is not op.group and group != op.group:
                        raise SharedTag(op.tag)
                    if (op.op, op.group, op.algorithm) in seen_collectives:
                        continue
                    seen_collectives.add((op.op, op.group, op.algorithm))
                    found = collective_pairs(op, hosts)
                else:
                    continue
                for pair in found:
                    if pair not in seen_pairs:
                        seen_pairs.add(pair)
                        yield pair


class SharedTag(Exception):
    """Collectives of two different groups carry this tag."""


def shared_hops_map(pairs, route, image, hop_image: dict[int, int],
                    fixed_ok: bool = False) -> dict[int, tuple[int, int]] | None:
    """Where hops have several senders: each hop's orbit under the renaming (a cycle of hop_image),
    as hop -> (the orbit's canonical hop, how many places on from it the hop is), when every sender's
    copies use distinct hops: each hop of a pair's route has an orbit as long as its sender's and no
    two hops of one route share an orbit. Otherwise None: a sender and its copy, running alike, would
    reserve one hop at the same instants, and which goes first is the order of simultaneous events.
    With fixed_ok, a hop that is its own image (all of a sender's copies reserve it at one instant: a WAN
    link every replica crosses) is accepted too, where the route's flows may leave it out of their ends
    (_may_share): the reduced run then checks at each such instant that the hop decides no send's end
    (ExclusiveLinks._fixed_send_at), whatever the copies' order."""
    orbits: dict[int, tuple[int, int]] = {}
    length: dict[int, int] = {}
    for hop in hop_image:
        if hop in orbits:
            continue
        cycle = [hop]
        while (nxt := hop_image.get(cycle[-1], hop)) != hop:
            cycle.append(nxt)
        if cycle[-1] not in hop_image:
            return None  # the pairs sent over are not the images of each other's: the programs do not map
        for i, h in enumerate(cycle):
            orbits[h] = (hop, i)
            length[h] = len(cycle)
    rank_orbit: dict[int, int] = {}
    senders: dict[int, set[int]] = {}  # a fixed hop's senders (all may reserve it at one instant)
    if fixed_ok:
        for src, dst in pairs:
            for h in route(src, dst).hops:
                if length[h] == 1:
                    senders.setdefault(h, set()).add(src)
    for src, dst in pairs:
        n = rank_orbit.get(src)
        if n is None:
            n, r = 1, image(src)
            while r != src:
                n, r = n + 1, image(r)
            rank_orbit[src] = n
        the_route = route(src, dst)
        hops = the_route.hops
        if len({orbits[h][0] for h in hops}) != len(hops):
            return None
        for h in hops:
            if length[h] != n and not (fixed_ok and length[h] == 1 and _may_share(the_route, len(senders[h]))):
                return None
    return orbits


def _may_share(route, flows: int) -> bool:
    """Whether `flows` senders' flows meeting at a fixed hop of this route can leave its line time out of their
    ends, which the reduced run checks (ExclusiveLinks._fixed_send_at): only window-bound TCP flows (their
    windows together within the bandwidth-delay product of the route's slowest hop) can, and only on a route
    without a token bucket (whose burst the first copy would take). A cheap refusal, not the proof: a host's
    GPUs through its one NIC (flows at line rate) are refused here rather than by a reduced run's first steps."""
    if getattr(route, "burst_bytes", 0) or not getattr(route, "windowed", False):
        return False
    return flows * route.max_window <= route.line_rate * route.rtt_s


def _with_hops(route, canonical: dict[int, int]):
    """A copy of the route whose hops (and a field naming one of them: the TCP model's shaped_hop)
    are their canonical hops."""
    copied = copy.copy(route)
    copied.hops = tuple(canonical[h] for h in route.hops)
    for f in fields(route):
        value = getattr(route, f.name)
        if f.name.endswith("_hop") and value in canonical:
            setattr(copied, f.name, canonical[value])
    return copied


def collective_pairs(coll: Collective, hosts: tuple[str, ...]) -> set[tuple[int, int]]:
    phases = collectives.ring_phases(coll, hosts)
    if phases is not None:  # O(p): the ring forms' pairs without expanding every rank
        return {pair for phase in phases for pair in phase}
    return {(rank, op.dst) for rank in coll.group for op in collectives.expand(coll, rank, hosts)
            if type(op) is Send}


def one_sender_per_hop(pairs, route) -> bool:
    """Whether no hop is held by the routes of two different senders (stops at the first that is:
    most runs that have one find it early)."""
    sender_of: dict[int, int] = {}
    for src, dst in pairs:
        for hop in route(src, dst).hops:
            if sender_of.setdefault(hop, src) != src:
                return False
    return True


def collective_ends(steps_of, arrivals: dict[int, float], send_at, canonical=None) -> dict[int, float]:
    """Each rank's end time for a collective whose ranks reached it at `arrivals` (rank -> time),
    walking every rank's steps (steps_of(rank): Sends and Recvs) as the engine would run them:
    a send starts at the rank's time and arrives at `now + (arrival - now)` (the clock's own
    sum, so the times are the event run's to the last bit); a receive waits for its message.
    send_at(src, dst, nbytes, p2p, label, now) -> arrival time does the send's bookkeeping.
    The order senders are visited in is free: no two share a hop or a connection. With `canonical`
    (a symmetry's, geosim.sim.symmetry), arrivals hold only its representatives, and a send to any
    rank is filed as the message it stands for: canonical(src, dst), a representative's receive."""
    clock = dict(arrivals)
    position = dict.fromkeys(arrivals, 0)
    steps = {rank: steps_of(rank) for rank in arrivals}
    messages: dict[tuple, float] = {}  # (src, dst, tag) -> when it has arrived
    running = list(arrivals)
    while running:
        blocked, progressed = [], False
        for rank in running:
            ops, i, now = steps[rank], position[rank], clock[rank]
            start = i
            while i < len(ops):
                op = ops[i]
                if type(op) is Send:
                    key = (rank, op.dst, op.tag) if canonical is None else (*canonical(rank, op.dst), op.tag)
                    messages[key] = now + (send_at(rank, op.dst, op.nbytes, op.p2p, op.tag[0], now) - now)
                else:
                    arrived = messages.pop((op.src, rank, op.tag), None)
                    if arrived is None:
                        break
                    if arrived > now:
                        now = arrived
                i += 1
            position[rank], clock[rank] = i, now
            progressed = progressed or i > start
            if i < len(ops):
                blocked.append(rank)
        if not progressed:  # a full pass sent nothing new: nothing ever will
            raise RuntimeError(f"collective steps wait on each other: ranks {sorted(blocked)}")
        running = blocked
    return clock


def lockstep_rounds(group: tuple[int, ...], steps: list[tuple], symmetry=None) -> list[tuple] | None:
    """A collective whose every rank runs the same number of (Send, Recv) pairs, the k-th Recv
    taking the k-th Send of its sender (rings, and the phases of the hierarchical form), as
    rounds: per round, each rank's send (rank, dst, nbytes, p2p, label) and the index of the
    rank whose send it receives. None for any other shape (the tree: collective_ends walks it).
    With a symmetry (geosim.sim.symmetry), `group` is its representatives in the collective: a
    receive from s takes the send of s's representative that stands for s's (canonical())."""
    index = {rank: i for i, rank in enumerate(group)}
    length = len(steps[0])
    if length % 2 or any(len(ops) != length for ops in steps):
        return None
    stands_for = symmetry.representative if symmetry is not None else None
    rounds = []
    for k in range(0, length, 2):
        sends, sources = [], []
        for i, rank in enumerate(group):
            send, recv = steps[i][k], steps[i][k + 1]
            if type(send) is not Send or type(recv) is not Recv:
                return None
            sender = recv.src if stands_for is None else stands_for(recv.src)
            if sender not in index:
                return None
            source = index[sender]
            theirs = steps[source][k]
            if type(theirs) is not Send or theirs.tag != recv.tag:
                return None
            if (theirs.dst != rank if symmetry is None
                    else symmetry.canonical(sender, theirs.dst) != (recv.src, rank)):
                return None
            sends.append((rank, send.dst, send.nbytes, send.p2p, send.tag[0]))
            sources.append(source)
        rounds.append((sends, sources))
    return rounds


def lockstep_ends(group: tuple[int, ...], rounds: list[tuple], arrivals: dict[int, float], send_at) -> dict[int, float]:
    """collective_ends for lockstep_rounds: round by round, every rank sends at its own time
    (the end of its previous receive) and then waits for its source's message of the round."""
    clock = [arrivals[rank] for rank in group]
    for sends, sources in rounds:
        arrived = [now + (send_at(rank, dst, nbytes, p2p, label, now) - now)
                   for now, (rank, dst, nbytes, p2p, label) in zip(clock, sends)]
        clock = [message if message > now else now for now, message in zip(clock, [arrived[j] for j in sources])]
    return dict(zip(group, clock))


class ExclusiveLinks:
    """Mixin for a routed model (route(src, dst).hops, send_at(...)): collectives timed by
    collective_ends when the run's routes give every hop one sender. `precompute=False` on the
    model (self.precompute) keeps every step an event, for the tests that compare the two."""

    precompute = True
    groups_may_move = True  # a symmetry may move a group onto another: held collectives count its runners
    # a shared hop that is its own image may be accepted (symmetric_fixing, shared_hops_map's fixed_ok), checked at
    # run time, by a model that says what a send's line time and end are (line_time, send_end: TCPNetwork)
    fixed_hops = False
    _one_sender_per_hop = False  # until prepare() has seen the run's programs
    _symmetry = None  # when only a symmetry's representatives run (reduce_to)
    _fixed_hops: frozenset[int] = frozenset()  # under a symmetry, the shared hops it fixes (reduce_to)
    _refused_fixed = False  # symmetric_under's last refusal was at a fixed shared hop

    def prepare(self, programs: dict[int, list]) -> None:
        self._rounds: dict[Collective, tuple] = {}  # -> (the ranks that run it, its lockstep rounds or None)
        self._shapes: dict[tuple, tuple] = {}  # the same, by what the rounds are made of (collective_ends)
        self._pairs_used: list[tuple[int, int]] = []
        self._pairs_complete = False
        if self.precompute and self.trace is None:  # a trace lists transfers in the order they start
            try:
                self._pairs_used = list(sender_pairs(programs, self.hosts))
            except SharedTag:
                return
            self._pairs_complete = True
            self._one_sender_per_hop = one_sender_per_hop(self._pairs_used, self.route)

    def symmetric_under(self, image) -> bool:
        """Renaming maps each pair the programs send over onto a route of the same cost whose hops
        are the images of its hops, one hop onto one hop across the whole run, so each sender's hops
        and connections go through the same states as its image's; and the outcome is free of the
        order of simultaneous events: every hop has one sender (as for collective_ends), or, where
        hops are shared, no sender's copies share one (shared_hops_map) and the reduced run checks
        that no two senders ever reserve one hop at one instant (reduce_to)."""
        if not self._pairs_complete:
            return False
        hop_image = self._hop_image(image)
        if hop_image is None:
            return False
        return self._one_sender_per_hop or shared_hops_map(self._pairs_used, self.route, image, hop_image) is not None

    def symmetric_fixing(self, image) -> bool:
        """symmetric_under, where a shared hop may be its own image (all of a sender's copies reserve it at one
        instant: a WAN link every pipeline replica crosses): the reduced run then checks at each such instant
        that the hop decides no send's end (_fixed_send_at; OrderMatters otherwise). geosim.sim.symmetry asks it
        only where no shift passes symmetric_under: it walks every pair for each shift it is asked about."""
        if not self.may_fix_hops():
            return False
        hop_image = self._hop_image(image, fixed_ok=True)
        if hop_image is None or all(hop != other for hop, other in hop_image.items()):
            return False  # (no hop fixed: symmetric_under's answer)
        return shared_hops_map(self._pairs_used, self.route, image, hop_image, fixed_ok=True) is not None

    def may_fix_hops(self) -> bool:
        """Whether symmetric_fixing can pass in this run (after prepare): the model prices fixed hops and hops
        are shared (a hop with one sender is never its own image: a symmetry moves every rank)."""
        return self.fixed_hops and self._pairs_complete and not self._one_sender_per_hop

    def _hop_senders(self) -> dict[int, set[int]]:
        """Each hop the run's pairs use -> the ranks that send over it (made once)."""
        known = self.__dict__.get("_senders_of_hops")
        if known is None:
            known = self._senders_of_hops = {}
            for src, dst in self._pairs_used:
                for h in self.route(src, dst).hops:
                    known.setdefault(h, set()).add(src)
        return known

    def refused_at_fixed_hop(self) -> bool:
        """Whether symmetric_under's last refusal was at a shared hop that is its own image, where
        symmetric_fixing may pass the shift (geosim.sim.symmetry asks it only of those)."""
        return self._refused_fixed and self.may_fix_hops()

    def _hop_image(self, image, fixed_ok: bool = False) -> dict[int, int] | None:
        """Each hop the run's pairs use -> its image's hop, or None where renaming does not map one hop onto
        one hop with routes of equal cost; also None, at the first such hop, where hops are shared and one
        hop is its own image: its senders move (a symmetry moves every rank), so that hop's orbit is shorter
        than theirs and shared_hops_map would refuse it after the whole walk (at 10,240 ranks the search
        walked 123 shifts over all 39,680 pairs to find none)."""
        hop_image: dict[int, int] = {}
        # each route's cost once: the symmetry's search asks this for every shift it tries, and a planner's
        # search for every option (_cost of both routes of every pair each time was 8 s of a 1,024-GPU
        # question). By the route's identity, the entry holding the route (a route is not changed once made)
        costs = self.__dict__.setdefault("_route_costs", {})

        def cost(route) -> tuple:
            known = costs.get(id(route))
            if known is None or known[0] is not route:
                known = costs[id(route)] = (route, _cost(route))
            return known[1]

        fixed_refused = not self._one_sender_per_hop and not fixed_ok
        self._refused_fixed = False
        for src, dst in self._pairs_used:
            mine, theirs = self.route(src, dst), self.route(image(src), image(dst))
            if len(mine.hops) != len(theirs.hops) or cost(mine) != cost(theirs):
                return None
            for hop, other in zip(mine.hops, theirs.hops):
                if hop_image.setdefault(hop, other) != other:
                    return None
                if fixed_refused and hop == other:
                    # symmetric_fixing may still pass it, where the hop's flows may leave it out of their ends
                    self._refused_fixed = self.fixed_hops and _may_share(mine, len(self._hop_senders()[hop]))
                    return None
        return hop_image if len(set(hop_image.values())) == len(hop_image) else None

    def reduce_to(self, symmetry) -> None:
        self._symmetry = symmetry
        if self._one_sender_per_hop:
            return  # each hop's state is its one sender's: the representatives' own hops carry it
        # hops with several senders: each orbit of hops is kept in one hop of it, the canonical one
        # (the state every hop of the orbit has, the run being symmetric); a send reserves the
        # canonical hops of its route, and checks that no other sender reserved one at its instant
        hop_image = self._hop_image(symmetry.image, fixed_ok=self.fixed_hops)
        orbits = shared_hops_map(self._pairs_used, self.route, symmetry.image, hop_image, fixed_ok=self.fixed_hops)
        fixed = {hop for hop, other in hop_image.items() if hop == other}
        checks: dict[tuple[int, int], tuple] = {}
        senders: dict[int, set[int]] = {}
        self._fixed_of: dict[tuple[int, int], tuple[int, ...]] = {}
        for src, dst in self._pairs_used:
            route = self.route(src, dst)
            canonical = [orbits[hop] for hop in route.hops]  # (canonical hop, places it is moved on)
            mine = tuple((c, symmetry.power(src, -m)) for c, m in canonical if c not in fixed)
            checks[(src, dst)] = mine
            for c, sender in mine:
                senders.setdefault(c, set()).add(sender)
            moved = _with_hops(route, {hop: c for hop, (c, _) in zip(route.hops, canonical)})
            if fixed.intersection(route.hops):
                # the fixed hops are reserved by _fixed_send_at, once for each copy: send_at prices the rest
                moved.hops = tuple(h for h in moved.hops if h not in fixed)
                self._fixed_of[(src, dst)] = tuple(h for h in route.hops if h in fixed)
            self._routes[(src, dst)] = moved
        # a hop only one sender ever uses cannot see two at one instant
        self._order_checks = {pair: tuple(x for x in mine if len(senders[x[0]]) > 1) for pair, mine in checks.items()}
        self._marks: dict[int, tuple[float, int]] = {}
        self._fixed_hops: frozenset[int] = frozenset(fixed)
        self._instants: dict[int, list] = {}  # fixed hop -> [instant, line time, earliest end reserved there]
        self._copies = symmetry.copies
        self.send_at = self._checked_send_at

    def _checked_send_at(self, src: int, dst: int, nbytes: float, p2p: bool, label: str, now: float) -> float:
        """send_at, after checking that no other sender (in the canonical hops' frame) reserved one of
        its hops at this very instant: there the order of simultaneous events would decide who goes
        first, which the representatives' run does not reproduce (OrderMatters: the engine then runs
        every rank)."""
        marks = self._marks
        for hop, sender in self._order_checks[(src, dst)]:
            last = marks.get(hop)
            if last is not None and last[0] == now and last[1] != sender:
                raise OrderMatters(hop)
            marks[hop] = (now, sender)
        arrival = type(self).send_at(self, src, dst, nbytes, p2p, label, now)
        fixed = self._fixed_of.get((src, dst))
        if fixed:
            self._fixed_send_at(src, dst, nbytes, fixed, now)
        return arrival

    def _fixed_send_at(self, src: int, dst: int, nbytes: float, fixed: tuple[int, ...], now: float) -> None:
        """The send's fixed hops (its own image's, shared_hops_map's fixed_ok), which each of its copies
        reserves at this instant as the full run would: one line time after another from the hop's backlog
        (the same sums, in the same order, where every reservation of the instant has one line time). The
        send's end, priced without them (its connection's last_active), stands only if no such hop's
        backlog reaches past the end of any send that reserved it at this instant: then the full run's
        order of the copies, which the reduced run does not know, decides nothing. Otherwise OrderMatters."""
        line = self.line_time(src, dst, nbytes)
        end = self.send_end(src, dst)
        free_at, instants, copies = self.free_at, self._instants, self._copies
        for hop in fixed:
            seen = instants.get(hop)
            if seen is None or seen[0] != now:
                seen = instants[hop] = [now, line, end]
            elif seen[1] != line:  # unequal line times: the backlog's sums would depend on the copies' order
                raise OrderMatters(hop)
            elif end < seen[2]:
                seen[2] = end
            busy = free_at[hop]
            for _ in range(copies):
                busy = (busy if busy > now else now) + line
            free_at[hop] = busy
            if busy > seen[2]:  # in some order of the instant's reservations the hop would decide an end
                raise OrderMatters(hop)

    def ring_plan(self, coll: Collective, group: tuple[int, ...]):
        """A ring collective's rounds in the model's own form, built from its rings without expanding
        every rank's steps (handed to lockstep), or None: lockstep_rounds of the expanded steps."""
        return None

    def lockstep(self, group: tuple[int, ...], rounds: list[tuple], arrivals: dict[int, float]) -> dict[int, float]:
        """lockstep_ends over the model's send_at; a model may price a round's senders at once
        (TCPNetwork: geosim/sim/network/_rounds.py), the same times to the bit."""
        return lockstep_ends(group, rounds, arrivals, self.send_at)

    def may_precompute(self, coll: Collective) -> bool:
        return self._one_sender_per_hop and len(coll.group) > 1  # a group of one has no steps to save

    def collective_ends(self, coll: Collective, arrivals: dict[int, float]) -> dict[int, float]:
        known = self._rounds.get(coll)
        if known is None:
            # a run meets the same collective ops again and again (repetitions, iterations), and
            # collectives that differ only past their tag's first item (Shard's per layer) have the
            # same rounds: a round's sends carry that first item alone. The ranks that run it:
            # every member, or a symmetry's representatives among them (in group order)
            shape = (coll.op, coll.group, coll.nbytes, coll.algorithm, coll.tag[:1])
            known = self._shapes.get(shape)
            if known is None:
                group = coll.group if self._symmetry is None else tuple(r for r in coll.group if r in arrivals)
                planned = self.ring_plan(coll, group) if self._symmetry is None else None
                if planned is not None:  # the model's rounds straight from the rings, every step unexpanded
                    known = self._shapes[shape] = (group, planned)
                else:
                    steps = [self.collective_ops(coll, rank) for rank in group]
                    known = self._shapes[shape] = (group, lockstep_rounds(group, steps, self._symmetry))
            self._rounds[coll] = known
        group, rounds = known
        if rounds is None:
            canonical = self._symmetry.canonical if self._symmetry is not None else None
            ends = collective_ends(lambda rank: self.collective_ops(coll, rank), arrivals, self.send_at, canonical)
        else:
            ends = self.lockstep(group, rounds, arrivals)
        if min(ends.values()) < max(arrivals.values()):
            # the event run would have let that rank go on before the last one arrived: holding
            # it was wrong. Every form here (ring, hierarchical, tree) ends after all have arrived.
            raise RuntimeError(f"a rank's share of {coll.op} ended before every rank had arrived")
        return ends


def _cost(route) -> tuple:
    """Everything a route's sends are computed from but its hops and its name; a field naming one
    of its hops (the TCP model's shaped_hop, a token bucket's) by where that hop is in the route."""
    values = []
    for f in fields(route):
        if f.name in ("hops", "name"):
            continue
        value = getattr(route, f.name)
        if f.name.endswith("_hop") and value in route.hops:
            value = ("position", route.hops.index(value))
        values.append(value)
    return tuple(values)
