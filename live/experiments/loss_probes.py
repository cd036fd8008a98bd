"""The TCP model's loss pricing against the WAN emulator: one TCP stream through a lossy,
rate-capped emulated link, measured, beside what geosim predicts for the same link.

    sudo python -m geosim.live.experiments.loss_probes [--rtt-ms 20,50] [--loss 0.005,0.02]
                                                       [--congestion reno,bbr] [--seconds 20] [--json]

Each setting brings up a 2-host slice (emulator.up: the forwarder drops each frame with
probability `loss`, a tbf on each host's egress caps the rate), sets the namespaces' congestion
control, moves one stream for `seconds` (measure.measure_throughput) and takes the slice down.
The prediction is the emulated slice in scenario form (wan_runs.wan_cluster: the link's RTT,
rate, the tbf as a shaper at the sender, the loss) and what the TCP model moves over it in the
same seconds from a fresh connection (calibrate/wan_public.iperf_mbps). `reno` is predicted by
the default CUBIC response function: at these RTTs and losses CUBIC is in its Reno-friendly
region, whose average window is Reno's by construction (RFC 9438 section 4.3). `bbr` is
predicted with transport.bbr. A namespace may only choose the congestion controls the host
allows (net.ipv4.tcp_allowed_congestion_control; here reno and bbr).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from geosim.calibrate.wan_public import iperf_mbps, iperf_params
from geosim.base.errors import GeosimError
from geosim.inputs.scenario import scenario_from_doc

BANDWIDTH_MBIT = 200.0


def predicted_mbps(wan, congestion: str, seconds: float) -> float:
    from geosim.live.experiments.wan_runs import wan_cluster

    link = scenario_from_doc(wan_cluster(wan, [1, 1]), "emulated slice").cluster.links[0]
    params = iperf_params().with_network("tcp", bbr=congestion == "bbr")
    return iperf_mbps(link, params, seconds)


def set_congestion(wan, congestion: str) -> None:
    for i in range(len(wan.hosts)):
        done = subprocess.run(wan.exec_argv(i, ["sysctl", "-qw", f"net.ipv4.tcp_congestion_control={congestion}"]),
                              capture_output=True, text=True)
        if done.returncode:
            raise GeosimError(f"cannot set {congestion} in the namespace: {done.stderr.strip()}",
                              key="--congestion")


def probe(rtt_ms: float, loss: float, congestion: str, seconds: float) -> dict:
    from geosim.live.wan import emulator
    from geosim.live.wan.measure import measure_throughput

    with emulator.up(rtt_ms, bandwidth_mbit=BANDWIDTH_MBIT, loss=loss, seed=1) as wan:
        set_congestion(wan, congestion)
        measured = measure_throughput(wan, seconds=seconds)
        predicted = predicted_mbps(wan, congestion, seconds)
    return {"rtt_ms": rtt_ms, "loss": loss, "congestion": congestion, "seconds": seconds,
            "measured_mbps": measured["mbit_total"], "predicted_mbps": predicted,
            "error": predicted / measured["mbit_total"] - 1}


def numbers(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rtt-ms", type=numbers, default=[20.0, 50.0])
    parser.add_argument("--loss", type=numbers, default=[0.005, 0.02])
    parser.add_argument("--congestion", type=lambda s: s.split(","), default=["reno", "bbr"])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for congestion in args.congestion:
        for rtt in args.rtt_ms:
            for loss in args.loss:
                row = probe(rtt, loss, congestion, args.seconds)
                rows.append(row)
                if not args.json:
                    print(f"{congestion:5} RTT {rtt:5g} ms loss {loss:6.2%}: measured {row['measured_mbps']:7.2f} "
                          f"Mbit/s, predicted {row['predicted_mbps']:7.2f} ({row['error']:+.0%})", flush=True)
    if args.json:
        print(json.dumps({"bandwidth_mbit": BANDWIDTH_MBIT, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except GeosimError as e:
        print(f"loss_probes: {e}", file=sys.stderr)
        sys.exit(2)
