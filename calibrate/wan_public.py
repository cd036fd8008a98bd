"""The public check of the TCP model: hivemind-multi-cloud's iperf profiles as geosim links.

Erben et al., "How can we train deep learning models across clouds and continents? An experimental
study" (VLDB 2024), published their network profiles (github.com/cirquit/hivemind-multi-cloud,
artifacts/networking, MIT licence): `iperf -c HOST -t 10 -P STREAMS` and a 5-ping average between
VMs of Google Cloud, AWS, Azure and Lambda in the US, EU, Asia and Australia, and from on-premise
hosts at TUM over the public internet, 1 to 80 parallel streams. An extract of every row ships in
geosim/data/hivemind-iperf.csv (with its source and licence beside it).

Each (experiment set, sending host, receiving host, streams) becomes a geosim link: its RTT is the
measured ping, its rate the slower end's NIC, its window what the hosts' kernel autotunes a
socket to (HostTCP), its streams iperf's -P. The prediction is what geosim's TCP model moves in
iperf's 10 seconds from a fresh connection (slow start included), divided by 10 s. A path from an
on-premise host crosses the public internet, whose other traffic shares its bottleneck: the pair's
one-stream profile says how much, as competing flows (Link.competing_flows; that row is then an input,
no check), and the pair's N-stream profiles are predicted with them.
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from dataclasses import dataclass, replace
from functools import partial
from importlib import resources
from pathlib import Path

from geosim.base.errors import GeosimError
from geosim.base.input_limits import SMALL_TEXT_MAX_BYTES, read_input
from geosim.inputs.params import default_params
from geosim.inputs.scenario import gpu_catalog
from geosim.sim.network.tcp import TCPNetwork
from geosim.inputs.specs import Cluster, Host, Link, Params
from geosim.techniques._base import devices_of
from geosim.base.units import MIB

SOURCE = ("github.com/cirquit/hivemind-multi-cloud, artifacts/networking/logs, commit "
          "f385276e94b80b5cebb2f2be952716b7b2372b70 (MIT licence)")
IPERF_SECONDS = 10.0  # network-stats.sh: IPERF_TIME_S=10
UNITS_MBPS = {"Gbits/sec": 1e3, "Mbits/sec": 1.0, "Kbits/sec": 1e-3, "bits/sec": 1e-6}
LAN_RTT_MS = 2.0  # pairs under this ping are within one zone: their rate is the VMs' NIC, not a WAN check


@dataclass(frozen=True)
class HostTCP:
    """The TCP settings that bound a Linux socket's window when the application sets no buffer
    (iperf without -w, NCCL's sockets): the kernel autotunes the receive buffer up to rmem_max and
    advertises 1 - 2^-adv_win_scale of it as window; the sender keeps at most wmem_max in flight."""

    rmem_max_bytes: float = 6 * MIB  # net.ipv4.tcp_rmem's maximum, Linux's default (ip-sysctl.rst)
    wmem_max_bytes: float = 4 * MIB  # net.ipv4.tcp_wmem's maximum, Linux's default
    adv_win_scale: int = 1  # net.ipv4.tcp_adv_win_scale, Linux's default before 6.6

    @property
    def window_bytes(self) -> float:
        advertised = self.rmem_max_bytes * (1 - 2.0 ** -self.adv_win_scale)
        return min(advertised, self.wmem_max_bytes)


LINUX_DEFAULT = HostTCP()


@dataclass(frozen=True)
class Profile:
    """One host pair at one stream count: every measured row of it."""

    experiment: str  # experiment-set-N/run as the repository names it
    local: str
    target: str
    streams: int
    mbps: tuple[float, ...]
    ping_ms: tuple[float, ...]

    @property
    def measured_mbps(self) -> float:
        return statistics.median(self.mbps)

    @property
    def rtt_ms(self) -> float:
        return statistics.median(self.ping_ms)

    @property
    def provider_pair(self) -> tuple[str, str]:
        return provider(self.local), provider(self.target)


def provider(host: str) -> str:
    """The cloud a profile's host name says it ran in; on-premise for TUM's own machines."""
    for prefix, name in (("gc-", "gcp"), ("t4-gc", "gcp"), ("aws-", "aws"), ("azure-", "azure"), ("lambda-", "lambda")):
        if host.startswith(prefix):
            return name
    return "on-premise"


MAX_ROWS = 20_000  # the extract has 530; each profile costs a bisection of the TCP model (~5 ms)
MAX_PROFILES = 2_000
_THREADS = re.compile(r"(.*)-([0-9]{1,4})thread")  # bounded digits: never an integer of thousands of digits


def read_profiles(path: str | Path | None = None) -> tuple[list[Profile], int]:
    """The extract's rows grouped by experiment set, hosts and streams; and how many rows were left
    out as not the streams' sum (the profiles of which a row could not be read). A row that is no
    measurement at all (too few cells, a path without an experiment, a rate or ping that is not a
    positive finite number, 0 streams) is one line naming the file and the row: never a traceback
    and never a rate that makes the check say +99900%."""
    if path is None:
        text = resources.files("geosim.data").joinpath("hivemind-iperf.csv").read_text()
        source = "geosim/data/hivemind-iperf.csv"
    else:
        source = str(path)
        text = read_input(path, SMALL_TEXT_MAX_BYTES, "iperf profiles CSV", source)
    lines = text.splitlines()
    if len(lines) > MAX_ROWS + 1:
        raise GeosimError(f"{len(lines) - 1:,} rows, more than the {MAX_ROWS:,} this check reads (the extract has "
                          "530); not read", source=source)
    reader = csv.DictReader(lines)
    try:
        fields = reader.fieldnames or ()
    except csv.Error as exc:
        raise GeosimError(f"not CSV ({exc})", source=source) from None
    missing = {"file", "local_hostname", "target_hostname", "bandwidth", "bandwidth_metric", "avg_ping_ms"} - set(
        fields)
    if missing:
        raise GeosimError(f"not an extract of hivemind-multi-cloud's iperf profiles: no column {sorted(missing)[0]!r}",
                          source=source)
    groups: dict[tuple[str, str, str, int], tuple[list[float], list[float]]] = {}
    broken: dict[tuple[str, str, str, int], int] = {}
    for row in _rows(reader, source):
        where = f"{source}:{reader.line_num}"
        if any(row.get(k) is None for k in ("file", "local_hostname", "target_hostname", "bandwidth",
                                            "bandwidth_metric", "avg_ping_ms")):
            cells = sum(v is not None for k, v in row.items() if k is not None)
            raise GeosimError(f"a row of {cells} cells; every row has {len(fields)}", source=where)
        # a profile's file is named after its sending host, which some rows leave blank
        local = row["local_hostname"] or Path(row["file"]).stem.removeprefix("iperf-profile-")
        match = _THREADS.fullmatch(local)
        host, streams = (match.group(1), int(match.group(2))) if match else (local, 1)
        if streams < 1:
            raise GeosimError(f"{streams} streams in the host name {local[:60]!r}: at least 1", source=where,
                              key="local_hostname")
        parts = Path(row["file"]).parts
        if len(parts) < 4:  # artifacts/networking/logs/<experiment set>/...
            raise GeosimError("the file column names no experiment set (artifacts/networking/logs/SET/...)",
                              source=where, key="file")
        experiment = "/".join(parts[3:5]) if len(parts) > 5 else parts[3]
        key = (experiment, host, row["target_hostname"], streams)
        rates, pings = groups.setdefault(key, ([], []))
        try:
            rate = float(row["bandwidth"]) * UNITS_MBPS[row["bandwidth_metric"]]
            ping = float(row["avg_ping_ms"])
        except (KeyError, TypeError, ValueError):
            broken[key] = broken.get(key, 0) + 1
            continue
        for name, value in (("bandwidth", rate), ("avg_ping_ms", ping)):
            if not math.isfinite(value) or value <= 0:
                raise GeosimError(f"must be a positive finite number, got {row[name][:40]!r}", source=where, key=name)
        rates.append(rate)
        pings.append(ping)
        if len(groups) > MAX_PROFILES:
            raise GeosimError(f"more than {MAX_PROFILES:,} profiles (host pairs x streams), more than this check "
                              "predicts (the extract has 103); not compared", source=source)
    # the script keeps iperf's last line: with -P it is the streams' sum, unless a stream's own line
    # came last (every 160-stream run: rows in MBytes, the rest one stream's rate): a profile with
    # any such row is dropped whole, its readable rows being no sum either
    profiles = [Profile(e, a, b, n, tuple(r), tuple(p)) for (e, a, b, n), (r, p) in sorted(groups.items())
                if (e, a, b, n) not in broken]
    dropped = sum(len(groups[k][0]) + broken[k] for k in broken)
    return profiles, dropped


def _rows(reader: csv.DictReader, source: str):
    try:
        yield from reader
    except csv.Error as exc:
        raise GeosimError(f"not CSV ({exc})", source=f"{source}:{reader.line_num}") from None


def nic_mbps(profiles: list[Profile]) -> dict[str, float]:
    """Each cloud's VM line rate: the median of its own hosts' same-zone profiles (one stream under
    LAN_RTT_MS), the one input the check takes from the measurements themselves. On-premise hosts
    have no same-zone profile: their rate is left to the cloud end."""
    rates: dict[str, list[float]] = {}
    for p in profiles:
        a, b = p.provider_pair
        if a == b and a != "on-premise" and p.rtt_ms < LAN_RTT_MS and p.streams == 1:
            rates.setdefault(a, []).extend(p.mbps)
    return {cloud: statistics.median(r) for cloud, r in rates.items()}


def link_of(profile: Profile, nics: dict[str, float], tcp: HostTCP = LINUX_DEFAULT, competing: float = 0.0) -> Link:
    """The geosim link a profile measured: its ping, the slower end's NIC, the hosts' window, -P streams,
    and the public internet's other traffic at the bottleneck (`competing` flows)."""
    ends = [nics[c] for c in profile.provider_pair if c in nics]
    if not ends:
        raise GeosimError(f"no NIC rate for either end of {profile.local[:60]} -> {profile.target[:60]} (no same-zone "
                          "profile of its clouds)", key="nic")
    return Link("a", "b", profile.rtt_ms / 1e3, min(ends) * 1e6, window_bytes=tcp.window_bytes,
                streams=profile.streams, competing_flows=competing)


def iperf_params(params: Params | None = None) -> Params:
    """iperf is not NCCL: no flow-control round trips per message and no proxy hand-off."""
    return (params or default_params()).with_network("tcp", collective_step_rtts=0.0, per_message_overhead_s=0.0)


def iperf_mbps(link: Link, params: Params, seconds: float = IPERF_SECONDS) -> float:
    """What geosim's TCP model moves over `link` in `seconds` from a fresh connection, in Mbit/s:
    the bytes whose transfer takes exactly that long (bisection; the time grows with the bytes)."""
    gpu = gpu_catalog()["T4"]
    link = replace(link, a="a", b="b")  # between the two hosts whatever the link's own ends are called
    cluster = Cluster("iperf", (Host("a", "a", (gpu,)), Host("b", "b", (gpu,))), (link,))
    devices = devices_of(cluster)
    clock = type("Clock", (), {"now": 0.0})()
    build = partial(TCPNetwork, clock, cluster, params, devices)

    def seconds_for(nbytes: float) -> float:
        net = build()
        return net.send_at(0, 1, nbytes, False, "iperf", 0.0) - net.route(0, 1).one_way_s

    low, high = 0.0, link.bandwidth_bps / 8 * seconds
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if seconds_for(mid) <= seconds else (low, mid)
    return low * 8 / seconds / 1e6


def steady_mbps(link: Link, window_bytes: float) -> float:
    """The model's rate before this check: streams x window / RTT up to the line, no slow start."""
    return min(link.bandwidth_bps, link.streams * window_bytes * 8 / link.rtt_s) / 1e6


def implied_competing(profile: Profile, nics: dict[str, float], params: Params,
                      tcp: HostTCP = LINUX_DEFAULT) -> float:
    """The competing flows under which the model moves what this profile measured (bisection on a log
    scale; the rate falls as they grow): 0 where the prediction without them is already below it."""
    measured = profile.measured_mbps
    if iperf_mbps(link_of(profile, nics, tcp), params) <= measured:
        return 0.0
    low, high = math.log(1e-3), math.log(1e6)
    for _ in range(40):
        mid = (low + high) / 2
        if iperf_mbps(link_of(profile, nics, tcp, competing=math.exp(mid)), params) > measured:
            low = mid
        else:
            high = mid
    return math.exp(high)


def same_region(a: Profile, b: Profile) -> bool:
    """Two on-premise profiles into one cloud region: the same provider at a round trip within 10%
    (light in fibre: a region elsewhere is further off)."""
    return a.provider_pair == b.provider_pair and abs(a.rtt_ms / b.rtt_ms - 1) <= 0.10


@dataclass(frozen=True)
class Row:
    profile: Profile
    lan: bool  # within one zone: the NIC rate came from these rows, so they are no check
    predicted_mbps: float
    bare_mbps: float  # the hosts' window alone, no competing traffic (the model before the public path's)
    shipped_mbps: float  # streams x the shipped 1.43 MiB window / RTT, steady
    competing: float = 0.0  # on-premise pairs: the other traffic their one-stream profile implies
    input_row: bool = False  # that one-stream profile: the competing flows came from it, so it is no check
    # on-premise one-stream rows: predicted with the competing flows of other hosts' profiles into the region
    cross_host_mbps: float | None = None

    @property
    def checked(self) -> bool:
        return not self.lan and not self.input_row

    @property
    def error(self) -> float:
        return self.predicted_mbps / self.profile.measured_mbps - 1

    @property
    def bare_error(self) -> float:
        return self.bare_mbps / self.profile.measured_mbps - 1

    @property
    def shipped_error(self) -> float:
        return self.shipped_mbps / self.profile.measured_mbps - 1

    @property
    def cross_host_error(self) -> float | None:
        return None if self.cross_host_mbps is None else self.cross_host_mbps / self.profile.measured_mbps - 1


def compare(profiles: list[Profile], params: Params | None = None, tcp: HostTCP = LINUX_DEFAULT) -> list[Row]:
    """Predicted against measured throughput for every profile. An on-premise pair's path carries the
    public internet's other traffic: its one-stream profile says how much (as competing flows), which
    then predicts the pair's N-stream profiles; the one-stream row itself is predicted from the other
    hosts' one-stream profiles into the same region, where there are any."""
    params = iperf_params(params)
    nics = nic_mbps(profiles)
    shipped_window = params.network("tcp").window_bytes
    single = [p for p in profiles if p.streams == 1 and "on-premise" in p.provider_pair]
    competing = {(p.experiment, p.local, p.target): implied_competing(p, nics, params, tcp) for p in single}
    rows = []
    for p in profiles:
        link = link_of(p, nics, tcp)
        bare = iperf_mbps(link, params)
        row = Row(p, p.rtt_ms < LAN_RTT_MS, bare, bare, steady_mbps(link, shipped_window))
        flows = competing.get((p.experiment, p.local, p.target))
        if flows is not None and p.streams > 1:
            row = replace(row, predicted_mbps=iperf_mbps(link_of(p, nics, tcp, flows), params), competing=flows)
        elif flows is not None:
            others = [competing[(q.experiment, q.local, q.target)] for q in single
                      if q.local != p.local and same_region(p, q)]
            cross = iperf_mbps(link_of(p, nics, tcp, statistics.median(others)), params) if others else None
            row = replace(row, predicted_mbps=p.measured_mbps, competing=flows, input_row=True, cross_host_mbps=cross)
        rows.append(row)
    return rows


def _stats(errors: list[float]) -> dict[str, float]:
    return {"rows": len(errors), "median_abs_error": statistics.median(abs(e) for e in errors),
            "worst_error": max(errors, key=abs)} if errors else {"rows": 0}


def summary(rows: list[Row]) -> dict[str, dict[str, float]]:
    """Median and worst error of the rows that are a check: the WAN rows whose inputs did not come from
    them (the same-zone rows gave the NIC rates, the on-premise one-stream rows the competing flows); for
    the cloud pairs and the on-premise ones, with the hosts' window alone and with the shipped window."""
    wan = [r for r in rows if not r.lan]
    checked = [r for r in wan if r.checked]
    cloud = [r for r in checked if "on-premise" not in r.profile.provider_pair]
    onprem = [r for r in checked if "on-premise" in r.profile.provider_pair]
    cross = [r.cross_host_error for r in wan if r.cross_host_error is not None]
    return {
        "all": _stats([r.error for r in checked]),
        "cloud": _stats([r.error for r in cloud]),
        "on_premise": _stats([r.error for r in onprem]),
        "on_premise_one_stream_cross_host": _stats(cross),
        "all_with_cross_host": _stats([r.error for r in checked] + cross),
        "hosts_window_alone_all": _stats([r.bare_error for r in wan]),
        "hosts_window_alone_on_premise": _stats([r.bare_error for r in wan if "on-premise" in r.profile.provider_pair]),
        "shipped_window_all": _stats([r.shipped_error for r in wan]),
        "shipped_window_cloud": _stats([r.shipped_error for r in wan if "on-premise" not in r.profile.provider_pair]),
    }


def to_json(rows: list[Row], dropped: int) -> dict:
    """One JSON document: the source, every row and the summary."""
    return {"source": SOURCE, "iperf_seconds": IPERF_SECONDS, "window_mib": LINUX_DEFAULT.window_bytes / MIB,
            "rows_left_out": dropped, "summary": summary(rows),
            "profiles": [{"experiment": r.profile.experiment, "local": r.profile.local, "target": r.profile.target,
                          "providers": list(r.profile.provider_pair), "streams": r.profile.streams,
                          "rtt_ms": r.profile.rtt_ms, "measured_mbps": r.profile.measured_mbps,
                          "runs": len(r.profile.mbps), "same_zone": r.lan, "checked": r.checked,
                          "predicted_mbps": None if r.input_row else r.predicted_mbps,
                          "error": None if r.input_row else r.error, "hosts_window_alone_mbps": r.bare_mbps,
                          "shipped_window_mbps": r.shipped_mbps, "competing_flows": r.competing or None,
                          "cross_host_mbps": r.cross_host_mbps}
                         for r in rows]}


def table_lines(rows: list[Row], dropped: int) -> list[str]:
    """The comparison as text: one line per WAN profile, then the summary."""
    lines = [f"hivemind-multi-cloud iperf profiles ({SOURCE})",
             f"hosts' window {LINUX_DEFAULT.window_bytes / MIB:g} MiB (Linux's tcp_rmem maximum, adv_win_scale 1), "
             f"{IPERF_SECONDS:g}-s runs from a fresh connection; {sum(r.lan for r in rows)} same-zone profiles give "
             f"the NIC rates; {dropped} rows left out (not the streams' sum); an on-premise pair's one-stream "
             "profile gives its path's competing flows (error: input; cross-host: from other hosts' profiles)",
             "",
             f"{'experiment':32} {'from':12} {'to':14} {'streams':>7} {'RTT ms':>7} {'measured':>9} {'predicted':>9} "
             f"{'error':>7} {'window':>7} {'1.43 MiB':>8} {'flows':>6} {'cross-host':>10}"]
    for r in rows:
        if r.lan:
            continue
        p = r.profile
        predicted, error = ("", "input") if r.input_row else (f"{r.predicted_mbps:.1f}", f"{r.error:+.0%}")
        flows = f"{r.competing:.1f}" if r.competing else ""
        cross = "" if r.cross_host_error is None else f"{r.cross_host_error:+.0%}"
        lines.append(f"{p.experiment:32} {p.local:12} {p.target:14} {p.streams:7d} {p.rtt_ms:7.1f} "
                     f"{p.measured_mbps:9.1f} {predicted:>9} {error:>7} {r.bare_error:+7.0%} {r.shipped_error:+8.0%} "
                     f"{flows:>6} {cross:>10}")
    lines.append("")
    for name, stats in summary(rows).items():
        if stats["rows"]:
            lines.append(f"{name:32} {stats['rows']:3d} profiles: median |error| {stats['median_abs_error']:.1%}, "
                         f"worst {stats['worst_error']:+.0%}")
    return lines
