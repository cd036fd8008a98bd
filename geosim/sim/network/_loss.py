"""What loss and a token bucket's drops do to a TCP flow's rate: published response functions.

A flow that loses packets does not keep its window: each loss halves it (Reno) or cuts it to
beta x its size (CUBIC), and it grows back. Its average rate is then a function of the loss rate p
and the round trip, the "response function":

- Reno (Mathis, Semke, Mahdavi, Ott 1997, "The macroscopic behavior of the TCP congestion
  avoidance algorithm"): an average window of sqrt(3 / (2 b p)) segments, b segments per ACK.
- CUBIC (RFC 9438 section 5.1, as RFC 8312 section 5.1): an average window of
  (C (3 + beta) / (4 (1 - beta)))^(1/4) x RTT^(3/4) / p^(3/4) segments; below Reno's it runs in
  its Reno-friendly region and has Reno's window.
- timeouts (Padhye, Firoiu, Towsley, Kurose 1998, "Modeling TCP throughput", eq. 31): a flow
  sends 1 / (RTT / W + T0 x min(1, 3 sqrt(3 b p / 8)) x p x (1 + 32 p^2)) segments per second;
  W is the window above, T0 the retransmission timeout. With Reno's W this is Padhye's formula.
- BBR (v1: Cardwell et al. 2016, "BBR: congestion-based congestion control") paces at the
  bottleneck rate it measures and does not answer random loss below ~20%: its rate is the path's
  less what it retransmits.

A token bucket (tc tbf, a provider's shaper) drops what overflows its queue, so a loss-based flow
that fills it saws: the windows of the flows through it add up to the bandwidth-delay product plus
the queue, then a loss cuts them to beta x that and they grow back (CUBIC's cubic, or its
Reno-friendly line, whichever is larger: RFC 9438 sections 4.2 and 4.3). While the sum is below
the bandwidth-delay product the bucket idles. `shaper_utilization` averages that saw over one
cycle; a queue of at least (1 - beta) / beta of the bandwidth-delay product never lets the bucket
idle (utilization exactly 1). Flows through one drop-tail queue lose together (synchronized), so
several streams saw like one whose window grows N times as fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# points of the midpoint rule over one sawtooth cycle: the integrand is smooth and monotonic, so
# 256 points are far inside 0.1% (tests/test_loss.py checks against the closed form of Reno's ramp)
CYCLE_POINTS = 256


@dataclass(frozen=True)
class Congestion:
    """The hosts' congestion control and the constants of its response function (the TCP model's
    Settings carry them: transport.cubic_c, cubic_beta, segments_per_ack, mss_bytes, bbr)."""

    mss_bytes: float  # payload per segment
    cubic_c: float  # CUBIC's scaling constant, segments / s^3
    cubic_beta: float  # CUBIC's multiplicative decrease
    segments_per_ack: int  # Padhye's b
    bbr: bool  # BBR instead of CUBIC
    timeouts: bool  # Padhye's timeout term (False: SACK and RACK-TLP recover every loss without one)

    @property
    def reno_friendly_alpha(self) -> float:
        """Segments per round trip CUBIC's Reno-friendly window grows by (RFC 9438 section 4.3)."""
        return 3 * (1 - self.cubic_beta) / (1 + self.cubic_beta)


def reno_window(p: float, b: int = 1) -> float:
    """Mathis et al.'s average window, in segments, of a Reno flow losing a fraction p of its segments."""
    return math.sqrt(3 / (2 * b * p))


def cubic_window(p: float, rtt_s: float, cc: Congestion) -> float:
    """CUBIC's average window in segments (RFC 9438 section 5.1), never below its Reno-friendly one."""
    c, beta = cc.cubic_c, cc.cubic_beta
    cubic = (c * (3 + beta) / (4 * (1 - beta))) ** 0.25 * rtt_s ** 0.75 / p ** 0.75
    return max(cubic, reno_window(p, cc.segments_per_ack))


def loss_limited_rate(p: float, rtt_s: float, rto_s: float, cc: Congestion) -> float:
    """Bytes per second one loss-based stream keeps on a path losing a fraction p of its segments,
    timeouts included (Padhye et al.'s denominator around the congestion control's window); inf for
    no loss, for BBR, or for a path without a round trip."""
    if p <= 0 or cc.bbr or rtt_s <= 0:
        return math.inf
    window = cubic_window(p, rtt_s, cc)
    b = cc.segments_per_ack
    timeouts = rto_s * min(1.0, 3 * math.sqrt(3 * b * p / 8)) * p * (1 + 32 * p * p) if cc.timeouts else 0.0
    return cc.mss_bytes / (rtt_s / window + timeouts)


def shaper_utilization(bdp_bytes: float, queue_bytes: float, streams: int, rtt_s: float, cc: Congestion) -> float:
    """The fraction of a token bucket's rate that loss-based flows through it keep on average: their
    windows saw between beta x (BDP + queue) and BDP + queue, and the bucket idles while they are
    below the BDP. 1.0 exactly where the saw never drops below it (or for BBR, which paces at the rate)."""
    top = bdp_bytes + queue_bytes
    if cc.bbr or bdp_bytes <= 0 or cc.cubic_beta * top >= bdp_bytes:
        return 1.0
    beta = cc.cubic_beta
    growth = streams * cc.cubic_c * cc.mss_bytes  # bytes / s^3 of the flows' summed cubic
    k = ((1 - beta) * top / growth) ** (1 / 3)  # seconds until the cubic is back at the top
    slope = streams * cc.reno_friendly_alpha * cc.mss_bytes / rtt_s  # bytes / s of the Reno-friendly line
    cycle = min(k, (1 - beta) * top / slope)
    step = cycle / CYCLE_POINTS
    total = 0.0
    for i in range(CYCLE_POINTS):
        t = (i + 0.5) * step
        window = max(growth * (t - k) ** 3 + top, beta * top + slope * t)
        total += min(window, bdp_bytes)
    return total / (CYCLE_POINTS * bdp_bytes)
