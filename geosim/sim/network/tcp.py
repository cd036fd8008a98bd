"""Links, routes over a networkx topology, and the TCP transport's cost.

A message of n bytes costs its one-way latency plus its serialization, and over TCP
its rate is also capped by the in-flight window: rate = min(bandwidth,
streams x window / RTT). That cap is why NCCL over TCP collapses at 50-100 ms.
An idle connection restarts from the initial window (Linux tcp_slow_start_after_idle),
and a point-to-point send pays a rendezvous handshake of a few round trips. A lossy link, or a
token bucket whose queue overflows, caps the window at what a loss-based flow keeps on average
(_loss.py: CUBIC's and Reno's response functions, Padhye's timeouts, BBR as an option).

Each link direction (and each GPU's PCIe port) is a first-come-first-served server
of capacity one: a transfer holds every hop of its route for its serialization
time, starting when all of them are free, so concurrent transfers share a link by
queueing. The server keeps the time it next falls free instead of a SimPy Resource
with request/release events: the same FIFO discipline, at a tenth of the events,
which is what lets a 1,024-GPU iteration or a calibration fit run in seconds.

Over 400 lines: TCP's cost (window, slow start, loss, shapers, streams) is one model; the routes it
prices and the window report are the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from geosim.base.parameters import FLAG, STEP_RTTS_RANGE, TCP_STREAMS_RANGE, TCP_WINDOW_MIB_RANGE, WHOLE, Scalar
from geosim.sim.network import CountingNetwork
from geosim.sim.network import _rounds
from geosim.sim.network._exclusive import ExclusiveLinks, lockstep_ends
from geosim.sim.network._topology import Topology
from geosim.sim.network._loss import Congestion, loss_limited_rate, shaper_utilization
from geosim.sim.schedule import Device
from geosim.inputs.specs import Cluster, Params


NAME = "tcp"


# The TCP model's own parameters, declared here once (key and unit in the parameters file, range,
# fit range, prior, source): geosim.inputs.params reads and writes them as the file's [transport] table
# (TABLE), geosim.calibrate fits the ones with a `fit` range, tools/write_params_reference.py writes
# their rows of docs/reference/params.md. Each Scalar's `field` is a field of Settings (SI units).
TABLE = "transport"
PARAMETERS: tuple[Scalar, ...] = (
    Scalar("transport.window_mib", "window_bytes", "MiB",
           "TCP window of one socket: a flow moves at most streams x window / RTT",
           "fitted to the study's Table II; Linux autotunes up to ~4 MiB (tcp_rmem/tcp_wmem maximum)",
           range=TCP_WINDOW_MIB_RANGE, fit=(1 / 16, 512.0)),
    Scalar("transport.kernel_window_mib", "kernel_window_bytes", "MiB",
           "TCP window of one socket on a host that states none (tcp_window_mib) and is no FABRIC VM: what its "
           "kernel autotunes to",
           "Linux's defaults since 4.20: net.ipv4.tcp_rmem maximum 6 MiB, tcp_adv_win_scale 1 (half of it "
           "advertised): 3 MiB (Documentation/networking/ip-sysctl.rst; the public WAN check's HostTCP, "
           "calibrate/wan_public.py)", range=TCP_WINDOW_MIB_RANGE),
    Scalar("transport.streams", "streams", WHOLE, "sockets per NCCL connection",
           "NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS default to one; only streams x window matters",
           range=TCP_STREAMS_RANGE),
    Scalar("transport.stream_rate_gbps", "stream_rate_bps", "Gbit/s",
           "what one socket can copy: NCCL's socket proxy is CPU-bound",
           "an earlier fit of the study's Table II", range=(1e-6, 1e5), fit=(0.1, 100.0)),
    Scalar("transport.per_message_overhead_us", "per_message_overhead_s", "us",
           "fixed cost of each message (NCCL's proxy hand-off, the socket calls, a chunk's copy to the host)",
           "prior 100 us x/ e; the study's records hardly move it", range=(0.0, 1e6), fit=(1.0, 2e4),
           prior=(100.0, 1.0)),
    Scalar("transport.p2p_handshake_rtts", "p2p_handshake_rtts", "RTT",
           "round trips of the rendezvous before a point-to-point send (pipeline stages)",
           "fitted to the study's Table II: Alpa's cross-mesh send", range=(0.0, 1e3), fit=(0.1, 50.0)),
    Scalar("transport.collective_step_rtts", "collective_step_rtts", "RTT",
           "round trips each ring step over TCP waits for NCCL's flow control (a link's step_rtts overrides it)",
           "fitted to the study's Table II", range=STEP_RTTS_RANGE, fit=(0.02, 20.0)),
    Scalar("transport.slow_start_after_idle", "slow_start_after_idle", FLAG,
           "restart slow start after an idle period", "Linux's tcp_slow_start_after_idle (on by default)"),
    Scalar("transport.initial_window_kib", "initial_window_bytes", "KiB", "initial congestion window",
           "10 segments of 1460 bytes (RFC 6928)", range=(1e-3, 1e8)),
    Scalar("transport.idle_restart_ms", "idle_restart_s", "ms",
           "idle time after which the window restarts", "Linux: one RTO, at least 200 ms", range=(0.0, 1e8)),
    # loss and token-bucket drops (geosim/sim/network/_loss.py); a link without loss or a shaper never reads them
    Scalar("transport.mss_bytes", "mss_bytes", "B", "TCP payload per segment: the unit of the loss response functions",
           "a 1500-byte MTU less 20 B IPv4, 20 B TCP and 12 B of the timestamp option", range=(88.0, 65483.0)),
    Scalar("transport.cubic_c", "cubic_c", "", "CUBIC's scaling constant C, segments per s^3",
           "RFC 9438 section 4.2 (C = 0.4; Linux's tcp_cubic)", range=(1e-3, 100.0)),
    Scalar("transport.cubic_beta", "cubic_beta", "fraction", "CUBIC's multiplicative decrease: the window after a loss",
           "RFC 9438 section 4.6 (beta_cubic = 0.7; Linux's tcp_cubic)", range=(0.05, 0.99)),
    Scalar("transport.segments_per_ack", "segments_per_ack", WHOLE,
           "segments one ACK acknowledges (Padhye's b) in the Reno-friendly window and the timeout term",
           "Mathis et al. 1997's constant sqrt(3/2) counts every segment acknowledged", range=(1, 64)),
    Scalar("transport.loss_timeouts", "loss_timeouts", FLAG,
           "count retransmission timeouts in a lossy flow's rate (Padhye's term); false: every loss recovered "
           "by SACK and RACK-TLP without one (Mathis's and CUBIC's windows alone)",
           "false: Linux hosts recover by SACK and RACK-TLP (RFC 8985; net.ipv4.tcp_sack 1, tcp_recovery 1, "
           "tcp_early_retrans 3 by default since 4.18); true: Padhye et al. 1998 (Reno without SACK). "
           "docs/results/2026-11-27-wan-public.md"),
    Scalar("transport.bbr", "bbr", FLAG,
           "the hosts run BBR, not CUBIC: random loss costs only its retransmissions, a shaper's queue no idling",
           "Cardwell et al. 2016 (BBR v1 keeps its rate below ~20% random loss); Linux's default is CUBIC"),
)


@dataclass(frozen=True)
class Settings:
    """The TCP model's own constants, one field per entry of PARAMETERS, in SI units; the parameters
    file's [transport] table sets them (Params.network("tcp")). A scenario's link may override
    window, streams and step_rtts."""

    window_bytes: float  # in-flight window per stream (FABRIC's fitted figure: the study's VMs)
    kernel_window_bytes: float  # a host's that states none and is no FABRIC VM (Host.kernel_window)
    streams: int  # sockets NCCL opens per connection
    stream_rate_bps: float  # what one socket can move, host-side (copies through host memory)
    per_message_overhead_s: float
    p2p_handshake_rtts: float  # extra round trips per point-to-point send (rendezvous)
    collective_step_rtts: float  # round trips each collective step waits for flow control
    slow_start_after_idle: bool
    initial_window_bytes: float
    idle_restart_s: float  # idle time after which TCP restarts from the initial window
    mss_bytes: float  # payload per segment (the loss response functions' unit)
    cubic_c: float  # CUBIC's C, segments / s^3
    cubic_beta: float  # CUBIC's multiplicative decrease
    segments_per_ack: int  # Padhye's b
    loss_timeouts: bool  # Padhye's timeout term in a lossy flow's rate
    bbr: bool  # the hosts run BBR instead of CUBIC

    @property
    def congestion(self) -> Congestion:
        return Congestion(self.mss_bytes, self.cubic_c, self.cubic_beta, self.segments_per_ack, self.bbr,
                          self.loss_timeouts)

    @classmethod
    def from_params(cls, params: Params) -> "Settings":
        return params.network(NAME)


@dataclass(slots=True)
class Route:
    hops: tuple[int, ...]  # indices of the link directions held while the bytes serialize
    name: str
    one_way_s: float
    rtt_s: float
    line_rate: float  # bytes/s: the slowest hop's bandwidth
    window_bytes: float  # 0 for paths without TCP (inside a host)
    stream_rate: float  # bytes/s all of the connection's sockets can move, host-side
    step_rtts: float  # round trips a collective step waits for the receiver's credit (TCP paths)
    tcp: bool
    # what every send over the route would compute again (the same products, so the same bits)
    windowed: bool = False  # a TCP flow whose window may limit it (tcp and a round trip > 0)
    max_window: float = 0.0  # bytes: the window, capped by the bandwidth-delay product and the copy rate
    restart_after_s: float = 0.0  # idle longer than this restarts slow start (Linux: RTO >= RTT + 200 ms)
    initial_window: float = 0.0  # bytes a restarted or new flow starts from
    handshake_s: float = 0.0  # a point-to-point send's rendezvous
    credit_s: float = 0.0  # a collective step's wait for the receiver's credit
    # a rate-limited hop (a token bucket, specs.Shaper): the payload bytes its full bucket lets through at
    # once after idling, and which hop it is (its free_at says how long the bucket has been refilling)
    burst_bytes: float = 0.0
    shaped_hop: int = -1
    overhead_s: float = 0.0  # each message's fixed cost (transport.per_message_overhead_us on the TCP model's routes)

    def __post_init__(self) -> None:
        self.windowed = self.tcp and self.rtt_s > 0
        # a window beyond the path's bandwidth-delay product buys nothing, and each socket is
        # also capped by the host's copy rate (NCCL's socket proxy threads)
        self.max_window = min(self.window_bytes, self.line_rate * self.rtt_s, self.stream_rate * self.rtt_s)
        self.credit_s = self.step_rtts * self.rtt_s


@dataclass(slots=True)
class Connection:
    """TCP state of one sender->receiver connection: survives across iterations."""

    cwnd: float
    last_active: float = float("-inf")


class TCPNetwork(ExclusiveLinks, CountingNetwork):
    """precompute=False: every collective step runs as events, even where every link has one
    sender (what tests/test_exclusive_links.py compares the arithmetic against)."""

    def __init__(self, clock, cluster: Cluster, params: Params, devices: list[Device], trace: list | None = None,
                 precompute: bool = True):
        super().__init__(clock, cluster, params, devices, trace)
        self.settings = Settings.from_params(params)
        self.precompute = precompute
        self.topology = Topology(cluster, params, devices)
        self.free_at = self.topology.free_at
        self._routes: dict[tuple[int, int], Route] = {}
        self.connections: dict[tuple[int, int], Connection] = {}
        self._pairs: dict[tuple[int, int], tuple[Route, Connection]] = {}  # what send() looks up
        self._by_sender: dict[int, list[tuple[int, int]]] = {}  # shift_connections' index of connections by sender
        self._by_sender_count = 0  # how many connections it holds (they are only ever added)
        self.host_window = {h.name: w for h in cluster.hosts if (w := host_window(h, self.settings))}

    def route(self, src: int, dst: int) -> Route:
        key = (src, dst)
        if key in self._routes:
            return self._routes[key]
        a, b = self.devices[src], self.devices[dst]
        p = self.settings
        topo = self.topology
        names = [f"gpu{src}:out", f"gpu{dst}:in"]
        same_host = a.host == b.host
        nvlink = topo.same_host_nvlink(a, b)
        rates = [topo.gpu_rate(a, nvlink), topo.gpu_rate(b, nvlink)]
        one_way = self.params.intra_host_latency_s  # the host's, shared with every model
        window, tcp, streams, step_rtts = 0.0, False, p.streams, 0.0
        burst, shaped, shaped_rate, drops = 0.0, None, 0.0, False
        delivered = 1.0  # the fraction of segments no hop of the path loses
        shared: list[tuple[float, float]] = []  # (rate, competing flows) of each hop with other traffic
        declared = False  # whether a hop of the path is a scenario's link (which may set window and streams)
        # the end hosts' own window (a host's tcp_window_mib: what its kernel autotunes to), else the parameters'
        # a flow's window: the smaller of its two hosts' (host_window: stated, the kernel's, or FABRIC's fitted)
        default_window = min(self.host_window.get(a.host) or p.window_bytes, self.host_window.get(b.host) or p.window_bytes)
        if not same_host:
            for u, v, edge in topo.path(a.host, b.host):
                names.append(topo.hop_name(u, v, a, b))
                shaper = edge["link"].shaper if edge["link"] is not None else None
                if shaper is None:
                    rates.append(edge["bandwidth_bps"] / 8)
                else:  # a token bucket's rate counts frames: TCP's payload gets the rest
                    rates.append(edge["bandwidth_bps"] / 8 * shaper.goodput_fraction)
                    if shaped is None or rates[-1] < shaped_rate:
                        burst, shaped, shaped_rate = shaper.burst_bytes * shaper.goodput_fraction, names[-1], rates[-1]
                        queue = rates[-1] * shaper.queue_s + burst  # tbf's limit: latency x rate + burst
                        drops = not shaper.at_sender
                one_way += edge["one_way_s"]
                link = edge["link"]
                if link is not None:
                    # the window and the sockets are the end hosts' settings, which a scenario's link
                    # may declare; a site's LAN declares none, so it must not undo a site link's
                    hop_streams = link.streams or p.streams
                    hop_window = (link.window_bytes or default_window) * hop_streams
                    streams = hop_streams if not declared else min(streams, hop_streams)
                    window = hop_window if not declared else min(window, hop_window)
                    declared = True
                step_rtts = max(step_rtts, link.step_rtts if link and link.step_rtts is not None
                                else p.collective_step_rtts)
                tcp = True
                if link is not None and link.loss:
                    delivered *= 1.0 - link.loss
                if link is not None and link.competing_flows:
                    shared.append((rates[-1], link.competing_flows))
        if tcp and not declared:
            window = default_window * p.streams
        route = Route(
            hops=tuple(topo.hop(n) for n in names), name=" / ".join(names[2:]) if not same_host else f"{a.host} pcie",
            one_way_s=one_way, rtt_s=2 * one_way, line_rate=min(rates), window_bytes=window, tcp=tcp,
            stream_rate=streams * p.stream_rate_bps / 8, step_rtts=step_rtts,
        )
        if shaped is not None and route.windowed:
            # a congestion window grows past the bandwidth-delay product into the shaper's queue (the
            # excess waits there, adding latency, not rate), so after an idle halving it still covers
            # what a line of the same rate would need two round trips for
            route.max_window = min(route.window_bytes, route.line_rate * route.rtt_s + queue,
                                   route.stream_rate * route.rtt_s)
        route.restart_after_s = route.rtt_s + p.idle_restart_s
        bucket_bound = shaped is not None and shaped_rate <= route.line_rate * (1 + 1e-12)  # the bucket is the bottleneck
        if delivered < 1.0 or (bucket_bound and drops and route.windowed):
            self._price_loss(route, 1.0 - delivered, streams, queue if bucket_bound and drops else None)
        if shared and route.windowed:
            # at a bottleneck loss-based flows of one round trip converge to equal rates (Chiu and Jain
            # 1989): the connection's streams keep their share, whatever window they could open
            fair = min(rate * streams / (streams + flows) for rate, flows in shared)
            route.max_window = min(route.max_window, fair * route.rtt_s)
        # every socket of the connection starts from its own initial window
        route.initial_window = min(route.max_window, streams * p.initial_window_bytes)
        route.handshake_s = p.p2p_handshake_rtts * route.rtt_s
        route.overhead_s = p.per_message_overhead_s
        if bucket_bound:
            route.burst_bytes, route.shaped_hop = burst, topo.hop(shaped)
        self._routes[key] = route
        return route

    def _price_loss(self, route: Route, loss: float, streams: int, queue: float | None) -> None:
        """A lossy or shaped route's rate: retransmissions take their share of the line, and a
        loss-based flow's average window is what its response function (random loss) or its saw
        through the bucket's queue (a shaper's drops, `queue` bytes of it) leaves it, whichever is
        less (_loss.py). A route with neither is never asked: it costs what it did before."""
        cc = self.settings.congestion
        if loss > 0:
            route.line_rate *= 1.0 - loss
        if not route.windowed:
            return
        bdp = route.line_rate * route.rtt_s
        limit = min(route.window_bytes, route.stream_rate * route.rtt_s)
        if queue is not None and limit > bdp + queue:
            # the flows fill the bucket's queue before their window stops them: they saw through its drops
            keep = shaper_utilization(bdp, queue, streams, route.rtt_s, cc)
            if keep < 1.0:
                route.max_window = min(route.max_window, keep * bdp)
        per_stream = loss_limited_rate(loss, route.rtt_s, route.restart_after_s, cc)
        if per_stream * streams * route.rtt_s < route.max_window:
            route.max_window = streams * per_stream * route.rtt_s

    def flow_time(self, route: Route, conn: Connection, nbytes: float, start: float) -> float:
        """Seconds the TCP flow needs for nbytes, window- and slow-start-limited (no queueing)."""
        if not route.windowed:
            return 0.0
        w_max = route.max_window
        cwnd = conn.cwnd if conn.cwnd < w_max else w_max
        idle = start - conn.last_active
        rto = route.restart_after_s
        if idle > rto and self.settings.slow_start_after_idle:
            # Linux (tcp_cwnd_restart) halves the window for each RTO of idleness after the
            # first, down to the initial window; halving continuously keeps the model monotonic
            initial = route.initial_window
            cwnd = max(initial, cwnd * 2.0 ** (1.0 - idle / rto)) if idle != float("inf") else initial
        elapsed, sent = 0.0, 0.0
        while cwnd < w_max and sent + cwnd < nbytes:  # slow start: one window per round trip, doubling
            sent += cwnd
            cwnd = min(2 * cwnd, w_max)
            elapsed += route.rtt_s
        elapsed += (nbytes - sent) * route.rtt_s / cwnd
        conn.cwnd = cwnd
        return elapsed

    def least_delay_s(self, src: int, dst: int, nbytes: float, p2p: bool) -> float:
        """The fewest seconds send() can take for these bytes: every hop idle and the window at its
        largest. send() only adds to it (queueing, slow start, waiting for the connection); a floor
        the planner prunes with."""
        route = self._routes.get((src, dst)) or self.route(src, dst)
        line = nbytes / route.line_rate
        if route.windowed:
            # a flow moves at most its largest window per round trip (flow_time)
            line = max(line, nbytes * route.rtt_s / route.max_window)
        return (route.handshake_s if p2p else route.credit_s) + line + route.one_way_s + route.overhead_s

    fixed_hops = True  # a symmetry may fix a shared hop, checked at run time (ExclusiveLinks._fixed_send_at)

    def line_time(self, src: int, dst: int, nbytes: float) -> float:
        """What one send of these bytes holds each hop of its route for (send_at's, without a token bucket's
        burst: shared_hops_map fixes no hop of a shaped route)."""
        return nbytes / self._pairs[(src, dst)][0].line_rate

    def send_end(self, src: int, dst: int) -> float:
        """When the connection's last send finished (send_at's `done`)."""
        return self._pairs[(src, dst)][1].last_active

    def least_step_s(self, src: int, dst: int, nbytes: float) -> tuple[float, float]:
        """(the fewest seconds a collective step's send of these bytes holds its connection, the fewest from
        its issue to its arrival). send_at starts a send no earlier than the connection's previous one has
        finished (one connection is one byte stream) and holds it at least the bytes' line time, less what a
        token bucket's full burst lets through at once, and, on a windowed flow, the bytes at the largest
        window per round trip (flow_time never exceeds it); the arrival adds the receiver's credit, the
        one-way latency and the message's fixed cost. The planner's ring floors (techniques/_floor.py)."""
        route = self._routes.get((src, dst)) or self.route(src, dst)
        rest = nbytes - route.burst_bytes
        hold = rest / route.line_rate if rest > 0 else 0.0
        if route.windowed:
            window = nbytes * route.rtt_s / route.max_window
            if window > hold:
                hold = window
        return hold, route.credit_s + hold + route.one_way_s + route.overhead_s

    vector_min_senders = _rounds.MIN_SENDERS  # a round of fewer senders is walked send by send

    def lockstep(self, group: tuple[int, ...], rounds: list[tuple], arrivals: dict[int, float]) -> dict[int, float]:
        """A lockstep collective's rounds, each priced for all its senders at once (_rounds.py): the
        scalar walk's times and state to the bit, where every hop has one sender."""
        if type(rounds) is _rounds.Plan:  # ring_plan's
            return _rounds.lockstep_ends(self, rounds, arrivals, Connection)
        plans = self.__dict__.setdefault("_plans", {})
        plan = plans.get(id(rounds), 0)
        if plan == 0:
            plan = plans[id(rounds)] = _rounds.plan_for(self, group, rounds)
        if plan is None or plan.ranks != group:
            return lockstep_ends(group, rounds, arrivals, self.send_at)
        return _rounds.lockstep_ends(self, plan, arrivals, Connection)

    def ring_plan(self, coll, group: tuple[int, ...]):
        """A ring collective's rounds for arrays, straight from its rings (_rounds.ring_plan)."""
        return _rounds.ring_plan(self, coll, group, self.hosts)

    def shift_connections(self, src: int, since: float, delta: float) -> None:
        """Repetitions of a block were skipped: src's connections stayed busy through them."""
        # asked for every rank after every skip: each sender's connections indexed once, again only when
        # connections were opened since (a walk over all of them per rank was 7 s of a 1,024-GPU Shard row)
        connections = self.connections
        if self._by_sender_count != len(connections):
            by_sender: dict[int, list[tuple[int, int]]] = {}
            for key in connections:
                by_sender.setdefault(key[0], []).append(key)
            self._by_sender, self._by_sender_count = by_sender, len(connections)
        for key in self._by_sender.get(src, ()):
            conn = connections[key]
            if conn.last_active >= since:
                conn.last_active += delta

    def send_at(self, src: int, dst: int, nbytes: float, p2p: bool, label: str, now: float) -> float:
        """send() started at `now` (collective_ends times a collective's steps ahead of the clock):
        the time the transfer has arrived."""
        # count(src, nbytes), written out: a call per transfer was 2% of a run
        self.transfers += 1
        self.bytes_sent += nbytes
        mine = self._sent[src]
        mine[0] += nbytes
        mine[1] += 1
        p, key = self.settings, (src, dst)
        pair = self._pairs.get(key)  # one look-up for the route and the connection
        if pair is None:
            conn = self.connections.get(key)
            if conn is None:
                conn = self.connections[key] = Connection(cwnd=p.initial_window_bytes)
            pair = self._pairs[key] = (self.route(src, dst), conn)
        route, conn = pair
        # a p2p send waits for its rendezvous; a collective step over TCP for NCCL's flow
        # control (the receiver's credit for the step's buffer)
        ready = now + (route.handshake_s if p2p else route.credit_s)
        last_active = conn.last_active
        start = ready if ready >= last_active else last_active  # one connection is one byte stream
        serialize = nbytes / route.line_rate
        if route.burst_bytes:
            # a token bucket refills at its rate while its hop idles, up to the burst: that many bytes
            # leave at once (the probes of live/wan/measure.py see it: 1 MiB at 50 Mbit/s takes ~11 ms
            # less than the rate's arithmetic with the emulator's 67 KiB bucket)
            idle = start - self.free_at[route.shaped_hop]
            if idle > 0:
                tokens = min(route.burst_bytes, idle * route.line_rate, nbytes)
                serialize = (nbytes - tokens) / route.line_rate
        # Each hop serves its backlog first come, first served, at line rate. The backlog grows
        # by line time counted from the request, never from a later start, so a send waiting
        # for its rendezvous or its connection does not hold the line for anyone else.
        free_at = self.free_at
        done = start + serialize
        for h in route.hops:
            busy = free_at[h]
            busy = (busy if busy > now else now) + serialize
            free_at[h] = busy
            if busy > done:
                done = busy
        if route.windowed:
            # a window-limited flow trickles on after its line time without holding the line
            flow_done = start + self.flow_time(route, conn, nbytes, start)
            if flow_done > done:
                done = flow_done
        conn.last_active = done
        arrival = done + route.one_way_s + route.overhead_s
        if self.trace is not None:
            self.trace.append(("link", route.name, str(label), start, arrival, nbytes))
        return arrival


@dataclass(frozen=True)
class WindowLimit:
    """A link whose TCP flows the window, not the line, limits: streams x window / RTT < bandwidth."""

    between: tuple[str, str]
    rtt_ms: float
    bandwidth_gbps: float
    window_mib: float
    streams: int
    window_gbps: float  # what streams x window / RTT lets through
    setting: str  # what to change, where

    def describe(self, alike: int = 0) -> str:
        """The note; `alike`: how many more links the same window limits the same way (named once)."""
        more = f" (and {alike:,} more link{'s' if alike > 1 else ''} alike)" if alike else ""
        return (f"the TCP window limits {self.between[0]}-{self.between[1]}{more} to {self.window_gbps:.3g} Gbit/s "
                f"of its {self.bandwidth_gbps:g} Gbit/s ({self.streams} stream(s) x {self.window_mib:.3g} MiB / "
                f"{self.rtt_ms:g} ms): {self.setting}")

    def alike_key(self) -> tuple:
        return (self.rtt_ms, self.bandwidth_gbps, self.window_mib, self.streams, self.window_gbps, self.setting)


def host_window(host, settings: Settings) -> float | None:
    """bytes a socket of this host opens, where the host decides it: its tcp_window_mib, else its kernel's
    autotuning limit (transport.kernel_window_mib) where it is no FABRIC VM (Host.kernel_window); None: the
    parameters' transport.window_mib, FABRIC's fitted figure (the study's VMs), which calibrate fits."""
    if host.tcp_window_bytes:
        return host.tcp_window_bytes
    return settings.kernel_window_bytes if host.kernel_window else None


def _decider(host) -> str:
    return "stated" if host.tcp_window_bytes else "kernel" if host.kernel_window else "fitted"


def window_limits(cluster: Cluster, params: Params) -> list[WindowLimit]:
    """The cluster's socket links (transport tcp) whose flows the window limits below the line rate, and
    the setting that raises it: the link's window_mib where it set one, else the smallest of its hosts' windows
    (host_window: a stated tcp_window_mib, the kernel's default, or FABRIC's fitted [transport] window_mib);
    more streams do as much (NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS)."""
    p = params.network(NAME)
    found = []
    for link in cluster.links:
        if link.transport != "tcp" or link.rtt_s <= 0:
            continue
        ends = [h for h in cluster.hosts if h.name in (link.a, link.b) or h.site in (link.a, link.b)]
        # the smallest window of the link's hosts, and who decided it
        window, decider = min(((host_window(h, p) or p.window_bytes, _decider(h)) for h in ends),
                              default=(p.window_bytes, "fitted"))
        if link.window_bytes:
            window, setting = link.window_bytes, "raise the link's window_mib (or its streams)"
        elif decider == "stated":
            setting = ("raise the hosts' tcp_window_mib (Linux: net.ipv4.tcp_rmem's maximum, twice the window) or the "
                       "link's streams")
        elif decider == "kernel":
            setting = ("the hosts' kernel default (Linux advertises half of net.ipv4.tcp_rmem's maximum, 6 MiB): raise "
                       "tcp_rmem and set the hosts' tcp_window_mib, or the link's streams "
                       "(NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS)")
        else:
            setting = ("set the hosts' tcp_window_mib (Linux advertises half of net.ipv4.tcp_rmem's maximum) or "
                       "[transport] window_mib in --params, or the link's streams (NCCL_NSOCKS_PERTHREAD x "
                       "NCCL_SOCKET_NTHREADS)")
        streams = link.streams or p.streams
        allowed = streams * window / link.rtt_s * 8
        if allowed < link.bandwidth_bps:
            found.append(WindowLimit((link.a, link.b), link.rtt_s * 1e3, link.bandwidth_bps / 1e9, window / 2**20,
                                     streams, allowed / 1e9, setting))
    return found




BACKEND = TCPNetwork
