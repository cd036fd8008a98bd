"""A lockstep collective's rounds priced for all its senders at once (the TCP model's arithmetic on arrays).

`_exclusive.lockstep_ends` walks a ring's rounds sender by sender: one `send_at` call per rank per
round, 10 million of them for Shard's flat ring over 128 GPUs at four sites (no two sites alike, so
no symmetry folds the ranks). Where every hop has one sender (the condition under which collectives
are timed by arithmetic at all) the senders of one round touch disjoint state: each its own hops'
backlogs and its own connection. So a round is the same handful of operations on every sender,
and here they run on numpy arrays, one array operation per line of `TCPNetwork.send_at`, in its
order: IEEE-754 addition, subtraction, multiplication, division, comparison and max give the same
bits on an array element as on a Python float, so every time is the scalar walk's to the last bit.

Only the common case runs on arrays: a route without a token bucket, and a windowed TCP flow not
restarting after idling whose window is at its largest or already holds the message (slow start's
loop would not run). A sender in slow start or restarting (its first sends, a connection idle past
the retransmission timeout) is priced by the model's own `flow_time` on a scratch connection; a
collective over a rate-limited hop is walked send by send. Once nothing changes but the times, the
rounds take a shorter form (_steady_rounds), in blocks. The state is read from the model when the
collective starts and written back when it ends (free_at, each connection's window and last
activity, each sender's bytes and transfers), as the scalar walk would have left it; no other
transfer runs in between (the engine asks collective_ends between events).
"""

from __future__ import annotations

import numpy as np

from geosim.sim import collectives

# below this many senders a round's Python loop is as quick as the arrays' fixed cost per operation
MIN_SENDERS = 24


class _Phase:
    """What one round's sends are made of, as arrays over the senders (in group order): a ring phase's
    rounds all send the same bytes to the same peers, so they share one."""

    __slots__ = ("lead", "lead_max", "rto_min", "permuted", "serialize", "nbytes", "one_way", "overhead", "hops", "conns",
                 "all_conns", "any_windowed", "routes", "w_max", "w_rto", "w_bytes_rtt", "w_slow_below", "counted")

    def __init__(self, net, sends, hop_index: dict, conn_index: dict):
        routes = [net.route(rank, dst) for rank, dst, _, _, _ in sends]
        self.lead = np.array([r.handshake_s if p2p else r.credit_s for r, (_, _, _, p2p, _) in zip(routes, sends)])
        self.nbytes = np.array([nbytes for _, _, nbytes, _, _ in sends], dtype=float)
        self.serialize = self.nbytes / np.array([r.line_rate for r in routes])  # nbytes / route.line_rate
        self.one_way = np.array([r.one_way_s for r in routes])
        self.overhead = np.array([r.overhead_s for r in routes])  # each message's fixed cost, the route's
        width = max(len(r.hops) for r in routes)
        # hop by place in the route, then sender: a (width x senders) table, so each place is a row and
        # the largest backlog of a route a reduction down the rows (across a row's short axis is slow)
        # a shorter route padded with its own first hop again: the same backlog, written twice alike
        self.hops = np.array([[hop_index[h] for h in r.hops] + [hop_index[r.hops[0]]] * (width - len(r.hops))
                              for r in routes],
                             dtype=np.intp).T.copy()
        self.conns = np.array([conn_index[(rank, dst)] for rank, dst, _, _, _ in sends], dtype=np.intp)
        # every connection of the plan, in order (a flat ring's one phase): read and written whole
        self.all_conns = len(conn_index) == len(sends) and bool((self.conns == np.arange(len(sends))).all())
        # flow_time's arithmetic on every sender at once, a sender without a window made neutral in it: its
        # largest window infinite (the window stays its connection's), no bytes x RTT (0 s of flow: the flow
        # ends at the start, before the line does), never in slow start, never restarting
        windowed = [r.windowed for r in routes]
        self.any_windowed = any(windowed)
        self.routes = routes
        inf = float("inf")
        self.w_max = np.array([r.max_window if w else inf for r, w in zip(routes, windowed)])
        self.w_bytes_rtt = np.array([n * r.rtt_s if w else 0.0 for r, w, n in zip(routes, windowed, self.nbytes)])
        # slow start's loop runs while the window is below its largest and below the bytes (0 sent so far)
        self.w_slow_below = np.array([min(r.max_window, n) if w else -inf for r, w, n in zip(routes, windowed,
                                                                                             self.nbytes)])
        self.w_rto = np.array([r.restart_after_s if w else inf for r, w in zip(routes, windowed)])
        self.counted = float(sum(nbytes for _, _, nbytes, _, _ in sends))
        self.lead_max = float(self.lead.max())
        self.rto_min = float(self.w_rto.min())  # inf: no sender with a window


class Plan:
    """A collective shape's rounds as phases: per round, its phase (what each sender sends, to whom) and
    the index of the sender each rank receives from. `phases`: (sends, sources, rounds) in the order
    they run, each sends list in group order."""

    __slots__ = ("ranks", "hops", "pairs", "runs")

    def __init__(self, net, group: tuple, phases: list):
        self.ranks = group
        hop_index: dict[int, int] = {}
        conn_index: dict[tuple, int] = {}
        for sends, _, _ in phases:
            for rank, dst, _, _, _ in sends:
                if (rank, dst) not in conn_index:
                    conn_index[(rank, dst)] = len(conn_index)
                    for h in net.route(rank, dst).hops:
                        hop_index.setdefault(h, len(hop_index))
        self.hops = list(hop_index)
        self.pairs = list(conn_index)
        self.runs = []  # (phase, sources, rounds): consecutive rounds alike
        for sends, sources, count in phases:
            phase = _Phase(net, sends, hop_index, conn_index)
            # every sender's message received by one rank (a ring's phase): its arrival is then some clock
            phase.permuted = sorted(sources) == list(range(len(sources)))
            self.runs.append((phase, np.array(sources, dtype=np.intp), count))


def _usable(net, group: tuple, pairs) -> bool:
    """Enough senders for arrays to pay, and no route through a token bucket (its burst stays scalar)."""
    return len(group) >= net.vector_min_senders and not any(net.route(src, dst).burst_bytes for src, dst in pairs)


def plan_for(net, group: tuple, rounds: list) -> Plan | None:
    """lockstep_rounds' rounds as a Plan (consecutive rounds of the same sends share a phase), or None
    where they are walked send by send (_usable)."""
    if not rounds or not _usable(net, group, {(rank, dst) for sends, _ in rounds for rank, dst, *_ in sends}):
        return None
    phases, last = [], None
    for sends, sources in rounds:
        key = (tuple((dst, nbytes, p2p) for _, dst, nbytes, p2p, _ in sends), tuple(sources))
        if key == last:
            phases[-1][2] += 1
        else:
            phases.append([sends, sources, 1])
            last = key
    return Plan(net, group, phases)


def ring_plan(net, coll, group: tuple, hosts: tuple[str, ...]) -> Plan | None:
    """A ring collective's Plan straight from its rings (collectives.ring_phases), each phase's sends
    and step count as collectives.ring and collectives.hierarchical write them, without expanding
    2(p - 1) steps for each of p ranks (the tree, or no arrays: None)."""
    phases = collectives.ring_phases(coll, hosts)
    if phases is None or not phases or not _usable(net, group, {pair for phase in phases for pair in phase}):
        return None
    flat = len(phases) == 1 and len(phases[0]) == len(group) and (
        coll.algorithm != "hierarchical" or collectives.host_layout(group, hosts) is None)
    p = len(group)
    if flat:
        kinds = [(coll.op, p, coll.nbytes)]
    else:
        layout = collectives.host_layout(group, hosts)
        _, _, peers, _ = layout[group[0]]
        g, h = p // len(peers), len(peers)
        local = ("local", g, coll.nbytes)
        across = ("across", h, coll.nbytes / g)
        kinds = {"allreduce": [("reduce_scatter",) + local, ("allreduce",) + across, ("all_gather",) + local],
                 "reduce_scatter": [("reduce_scatter",) + local, ("reduce_scatter",) + across],
                 "all_gather": [("all_gather",) + across, ("all_gather",) + local]}[coll.op]
        kinds = [(op, length, nbytes) for op, _, length, nbytes in kinds if length > 1]
        if len(kinds) != len(phases):
            return None
    index = {rank: i for i, rank in enumerate(group)}
    label = coll.tag[0]
    built = []
    for pairs, (op, length, nbytes) in zip(phases, kinds):
        nxt = dict(pairs)
        prev = {dst: src for src, dst in pairs}
        if len(nxt) != p or len(prev) != p:
            return None  # not every rank sends in this phase: not lockstep
        chunk = nbytes / length  # collectives.ring's chunk
        steps = {"allreduce": 2 * (length - 1), "reduce_scatter": length - 1, "all_gather": length - 1}[op]
        built.append(([(rank, nxt[rank], chunk, False, label) for rank in group], [index[prev[rank]] for rank in group],
                      steps))
    return Plan(net, group, built)


def lockstep_ends(net, plan: Plan, arrivals: dict[int, float], Connection) -> dict[int, float]:
    """_exclusive.lockstep_ends for the TCP model, a round at a time on arrays (module docstring);
    Connection: the model's connection state class (cwnd, last_active)."""

    settings = net.settings
    restart_on, initial = settings.slow_start_after_idle, settings.initial_window_bytes
    free_at = net.free_at
    free = np.array([free_at[h] for h in plan.hops])
    connections, pairs_cache = net.connections, net._pairs
    conns = []
    for key in plan.pairs:  # as send_at makes them: a connection starts from the initial window
        conn = connections.get(key)
        if conn is None:
            conn = connections[key] = Connection(cwnd=initial)
        if key not in pairs_cache:
            pairs_cache[key] = (net.route(*key), conn)
        conns.append(conn)
    group = plan.ranks
    sent = [net._sent[rank] for rank in group]
    initial_sent = [s[0] for s in sent]
    state = [np.array([c.cwnd for c in conns]), np.array([c.last_active for c in conns]),
             np.array([arrivals[rank] for rank in group])]  # cwnd, last active, each rank's clock
    total, rounds = 0.0, 0
    for phase, sources, count in plan.runs:
        left = count
        while left:
            ran = _steady_rounds(phase, sources, left, free, state, restart_on)
            left -= ran
            if left:  # a round the steady form does not cover: the whole model's round
                _round(phase, sources, free, state, restart_on, net.flow_time, Connection)
                left -= 1
        for _ in range(count):  # the walk's own sum, in its order
            total += phase.counted
        rounds += count
    cwnd, active, clock = state
    # the state as the scalar walk leaves it
    for h, value in zip(plan.hops, free.tolist()):
        free_at[h] = value
    for conn, c, a in zip(conns, cwnd.tolist(), active.tolist()):
        conn.cwnd, conn.last_active = c, a
    for mine, b in zip(sent, _sums(plan, initial_sent)):
        mine[0] = b
        mine[1] += rounds
    net.bytes_sent += total
    net.transfers += rounds * len(group)
    return dict(zip(group, clock.tolist()))


def _round(phase: _Phase, sources, free, state: list, restart_on: bool, flow_time, Connection) -> None:
    """One round, every line of send_at on arrays (slow start and restarts by the model's own flow_time)."""
    cwnd, active, now = state
    # np.maximum(a, b) stands for `a if a >= b else b` (and its mirror): the two differ only on a NaN or
    # on 0.0 against -0.0, neither of which a time is
    maximum = np.maximum
    last = active if phase.all_conns else active[phase.conns]  # not written in place below: rebound
    start = maximum(now + phase.lead, last)  # ready, or when the connection is free
    busy = maximum(free[phase.hops], now) + phase.serialize  # each hop's backlog grows
    free[phase.hops] = busy
    done = maximum(start + phase.serialize, busy.max(axis=0))
    if phase.any_windowed:  # flow_time: at the largest window (or one holding the bytes), bytes x RTT / window
        held = cwnd if phase.all_conns else cwnd[phase.conns]
        window = np.minimum(held, phase.w_max)
        elapsed = phase.w_bytes_rtt / window
        slow = window < phase.w_slow_below  # slow start (below both its largest window and the bytes)
        if restart_on:
            slow |= (start - last) > phase.w_rto
        if slow.any():  # slow start or a restart: the model's own loop, on a scratch connection
            for j in np.flatnonzero(slow).tolist():
                scratch = Connection(cwnd=float(held[j]), last_active=float(last[j]))
                elapsed[j] = flow_time(phase.routes[j], scratch, float(phase.nbytes[j]), float(start[j]))
                window[j] = scratch.cwnd
        if phase.all_conns:
            state[0] = window
        else:
            cwnd[phase.conns] = window
        done = maximum(done, start + elapsed)
    if phase.all_conns:
        state[1] = done
    else:
        active[phase.conns] = done
    arrived = now + ((done + phase.one_way + phase.overhead) - now)
    state[2] = maximum(arrived[sources], now)


def _steady_rounds(phase: _Phase, sources, most: int, free, state: list, restart_on: bool) -> int:
    """Up to `most` rounds of `phase` in the form they take once nothing changes but the times: each
    sender's hops at one backlog (they then grow alike: one value a sender), its window settled (not
    in slow start, not restarting: bytes x RTT / window is the same every round). Then
      done = max(start + serialize, max over hops of backlog, start + elapsed)
           = max(start + max(serialize, elapsed), backlog)
    exactly: adding a number is monotone in IEEE-754 (round to nearest), so fl(s + a) and fl(s + b)
    keep the order of a and b, and the larger of the two sums is the sum with the larger. Returns how
    many rounds it ran: 0 where a sender's hops differ or its window is not settled; it stops before a
    round in which a connection would restart after idling (_round runs that one). After its first
    round, blocks (_block) checked once after each (a block that fails runs again: _careful, in full)."""
    hops, all_conns = phase.hops, phase.all_conns
    table = free[hops]
    backlog = table[0] if len(table) == 1 else table.max(axis=0)
    if len(table) > 1 and not (table == backlog).all():
        return 0
    cwnd, active, now = state
    last = active if all_conns else active[phase.conns]
    longest, window, check_restart = phase.serialize, None, False
    if phase.any_windowed:
        window = np.minimum(cwnd if all_conns else cwnd[phase.conns], phase.w_max)
        if (window < phase.w_slow_below).any():
            return 0
        longest = np.maximum(phase.serialize, phase.w_bytes_rtt / window)
        check_restart = restart_on
    ran, prev = 0, None  # prev: each rank's clock when the round before started (None: none in this call)
    # made once a call: 100 kB arrays made and freed a block were glibc's mmap and munmap each time
    buffers = [np.empty((BLOCK + 2, len(now))), np.empty((BLOCK + 2, len(now)))]
    scratch = np.empty((BLOCK, len(now)))
    careful, short, idle_hops = False, phase.permuted, True
    while ran < most:
        if prev is None or careful or most - ran < 2:
            stepped = _careful(phase, sources, backlog, last, now, longest, check_restart)
            if stepped is None:
                break  # a restart: _round's
            (backlog, last, now), prev, ran = stepped, now, ran + 1
            continue
        block = min(BLOCK, most - ran)
        held = (prev.base, now.base)  # a buffer prev or now is a row of is not written over
        clocks = buffers[0] if all(b is not buffers[0] for b in held) else buffers[1]
        if any(b is clocks for b in held):
            clocks = np.empty_like(clocks)
        kept = _block(phase, sources, block, backlog, last, now, prev, longest, short, idle_hops, clocks)
        if check_restart and not _no_restart(phase, clocks, block, scratch):
            careful = True  # rounds far apart: each checked on its own from here
            continue
        if short and not clocks[block + 1].max() <= 2.0 * clocks[1].min():
            short = False  # early times (a clock near 0): the subtraction is not exact; the block again, in full
            continue
        if idle_hops and not ((backlog <= clocks[1]).all()
                              and (np.add(clocks[1:block], phase.serialize, out=scratch[:block - 1])
                                   <= clocks[2:block + 1]).all()):
            idle_hops = False  # a hop still busy when its sender sent again: the block again, with backlogs
            continue
        backlog, last = kept
        prev, now, ran = clocks[block], clocks[block + 1], ran + block
    if ran:
        free[hops] = backlog
        if all_conns:
            state[1] = last
        else:
            active[phase.conns] = last
        if window is not None and all_conns:
            state[0] = window
        elif window is not None:
            cwnd[phase.conns] = window
        state[2] = now
    return ran


BLOCK = 16  # rounds whose checks _steady_rounds makes at once, after them


def _careful(phase: _Phase, sources, backlog, last, now, longest, check_restart: bool):
    """One steady round, its restart checked first: (backlog, last activity, clock), or None (a restart)."""
    maximum = np.maximum
    start = maximum(now + phase.lead, last)
    if check_restart and ((start - last) > phase.w_rto).any():
        return None
    backlog = maximum(backlog, now)
    backlog += phase.serialize
    done = start + longest
    maximum(done, backlog, out=done)
    arrived = done + phase.one_way
    arrived += phase.overhead
    arrived -= now
    arrived += now  # now + ((done + one_way + overhead) - now), as send_at's caller sums it
    clock = arrived[sources]
    return backlog, done, maximum(clock, now, out=clock)


def _block(phase: _Phase, sources, block: int, backlog, last, now, prev, longest, short: bool, idle_hops: bool,
           clocks):
    """`block` steady rounds without their checks: (backlog, last activity) after them, and in `clocks` (a
    block + 2 by ranks array) clocks[0] each rank's clock at the round before, clocks[1] at the first,
    clocks[r + 2] after round r. `short`: the arrival as done + one_way + overhead, without send_at's
    caller's `now + (... - now)`, the same number where the subtraction is exact (Sterbenz: y / 2 <= x
    <= 2 y); the caller checks that it was (every arrival is at most the largest clock after the block,
    every clock at least the least before it: largest <= 2 x least). `idle_hops`: each sender's hops
    free when it sends (its backlog at most its clock), so the backlog after a send is now + serialize,
    never later than start + longest (start >= now, longest >= serialize: monotone again), done is
    start + longest, no backlog is kept a round; the caller checks each backlog against the next clock."""
    maximum = np.maximum
    lead, serialize, one_way, overhead = phase.lead, phase.serialize, phase.one_way, phase.overhead
    clocks[0], clocks[1] = prev, now
    for r in range(block):
        start = maximum(now + lead, last)
        done = start + longest
        if not idle_hops:
            backlog = maximum(backlog, now)
            backlog += serialize
            maximum(done, backlog, out=done)
        last = done
        arrived = done + one_way
        arrived += overhead
        if not short:
            arrived -= now
            arrived += now
        now = maximum(arrived[sources], now, out=clocks[r + 2])
    if idle_hops:
        backlog = clocks[block] + serialize  # the last round's: max(backlog, now) + serialize, its hops free
    return backlog, last


def _no_restart(phase: _Phase, clocks, block: int, scratch) -> bool:
    """Whether no connection restarted in a block's rounds, from its clocks alone: a sender's idle time
    before round r, start - last, is at most its clock's advance since round r - 1 (last, its send of
    round r - 1 done, is past that round's now + lead; start is now + lead or last) plus the roundings
    of the two sums and the difference (each under 2^-52 of the largest time): every advance below the
    smallest restart time by more than those, none restarts (two array operations a block)."""
    advance = np.subtract(clocks[1:block + 1], clocks[:block], out=scratch[:block]).max()
    largest = clocks[block + 1].max() + phase.lead_max
    return advance <= phase.rto_min * (1 - 1e-12) - 1e-14 * (largest + 1.0)


def _sums(plan: Plan, initial: list[float]) -> list[float]:
    """Each sender's bytes after the collective: its count plus each round's bytes, one addition a round
    in order, as send_at adds them; computed once for senders that start alike and send alike."""
    columns = [phase.nbytes for phase, _, _ in plan.runs]
    rows = list(zip(initial, *(c.tolist() for c in columns)))
    distinct = set(rows)
    if len(distinct) > 20:  # many kinds of sender: a round's additions on arrays
        sums = np.array(initial, dtype=float)
        for phase, _, count in plan.runs:
            for _ in range(count):
                sums += phase.nbytes
        return sums.tolist()
    known = {}
    for row in distinct:
        value = row[0]
        for nbytes, (_, _, count) in zip(row[1:], plan.runs):
            for _ in range(count):
                value += nbytes
        known[row] = value
    return [known[row] for row in rows]
