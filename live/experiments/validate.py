"""`geosim live validate`: the simulator checked against real runs on the emulated WAN.

For each RTT: bring up a 2-host WAN slice (live/wan), run every technique on it for a few
steps (live/experiments/wan_runs.py: one JAX process per host, gloo over the slice), write the run
records. Then calibrate the simulator on the runs at all RTTs but one (calibrate/fit.py)
and predict the held-out RTT's runs; print predicted vs measured with errors, write a
JSON report, the fitted parameters and a PNG plot (live/experiments/validate_report.py).

The fitted figure is the steady-state time per iteration (`time_per_iteration_s`): a
live record's `total_time_s` includes compilation and covers a few steps, not the
workload's epoch, so it is not what the simulator's total predicts.

Over 400 lines: the whole experiment (runs at each RTT, the fit, the held-out check, the report)
reads top to bottom in one place.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

from geosim.cli.vocabulary import CommaList, add_renamed, meaning
from geosim.base.errors import GeosimError
from geosim.live.experiments.validate_report import TARGET, TECHNIQUES, Report, Row, latency_costs, plot, print_report
from geosim.techniques import is_pipelined, on_request
from geosim.base.fileio import write_atomic
from geosim.inputs.params import load_params, write_params
from geosim.inputs.records import read_records
from geosim.inputs.scenario import get_model
from geosim.base.units import MIB

DEFAULT_RTTS = (0.1, 10.0, 40.0)
# What runs far apart in RTT identify: only costs that scale with the RTT. For CPU "GPUs" talking gloo
# over TCP (docs/guide/wan-emulator.md) those are the round trips each collective step waits (the
# runtime's collective_step_rtts; transport.collective_step_rtts for the study's runtime) and a
# point-to-point send's handshake (pipeshard's ppermute). Everything else comes shipped and measured:
# the jax runtime's per-step and per-collective costs and XLA:CPU's efficiency (geosim/data/runtimes.toml,
# live/train/collective_costs.py), Shard's collectives as XLA compiles them (compiled_collectives.py),
# the TCP window (measured on the slice, in the records' links) and the per-message cost (the TCP
# model's prior). Their ranges are the TCP model's own (geosim/sim/network/tcp.py PARAMETERS).
ROUND_TRIP_SCALARS = ("transport.collective_step_rtts", "transport.p2p_handshake_rtts")
START_POINTS = ({}, {"transport.collective_step_rtts": 3.0, "transport.p2p_handshake_rtts": 2.0,
                     "jax.collective_step_rtts": 3.0})
# The study's runtime (records naming `alpa`) has no compiled collective list: there Shard's
# all-reduces per layer are a whole number (a stepped residual a finite-difference fit cannot
# follow), profiled: fitted on a coarse grid, then refined around the best.
SHARD_GRID = (4, 8, 16, 32, 64, 128)
PROFILED = {"shard.collectives_per_layer": SHARD_GRID}  # whole-number settings fitted on a grid
# without --technique: the study's four (a technique that runs on request only, FSDP, when asked or with 'all')
DEFAULT_TECHNIQUES = tuple(t for t in TECHNIQUES if not on_request(t))


def run_time_s(record) -> float:
    """The figure of a run the simulator predicts: its fastest timed step. The simulator prices an
    uncontended machine, and another process's burst only ever adds time to a step, so the least
    disturbed step is the best estimate of it (as `timeit` takes the minimum); the same figure for
    every RTT. Records from before live recorded it (no fastest_iteration_s) give their median."""
    return record.measured.get("fastest_iteration_s") or record.measured["time_per_iteration_s"]


def busy_runs(records) -> list[str]:
    """'RTT technique load/cores' for every run whose 1-minute load went above the machine's cores."""
    out = []
    for r in records:
        m = r.measured
        load = max(m.get("load_before", 0.0), m.get("load_after", 0.0))
        cores = m.get("cores")
        if cores and load > cores:
            out.append(f"{requested_rtt(r):g} ms {r.technique} (load {load:.1f})")
    return out


def load_warning(records) -> str | None:
    """One line when any run shared a machine loaded beyond its cores (its steps waited for the CPU)."""
    busy = busy_runs(records)
    if not busy:
        return None
    cores = next(r.measured["cores"] for r in records if r.measured.get("cores"))
    return (f"warning: the 1-minute load was above the {cores} cores during {len(busy)} of {len(records)} runs "
            f"({', '.join(busy[:4])}{', ...' if len(busy) > 4 else ''}): their steps waited for the CPU; the "
            f"fastest step stands for each, and predictions price an uncontended machine")


def add_arguments(parser) -> None:
    parser.add_argument("--rtt-ms", default=",".join(f"{r:g}" for r in DEFAULT_RTTS),
                        help="RTTs of the emulated WAN, ms: a list or range (default %(default)s)")
    parser.add_argument("--technique", dest="techniques", action=CommaList, metavar="NAME|all",
                        help=f"techniques to run; repeatable and comma-separated; 'all': {','.join(TECHNIQUES)} "
                             f"(default: {','.join(DEFAULT_TECHNIQUES)})")
    parser.add_argument("--hold-out", type=float,
                        help="the RTT predicted from a fit on the others (default: the middle one); "
                             "every other RTT is also held out in turn and reported")
    # The defaults reproduce the study's mechanism: a model whose gradients outweigh its
    # activations (as gpt2m's do) behind TCP windows smaller than those gradients.
    from geosim.inputs.scenario import get_model

    small = get_model("small-wan")  # the help quotes the catalog's count, as `geosim models` prints it
    parser.add_argument("--model", default="small-wan",
                        help=f"a model from the catalog (default %(default)s: {small.num_params / 1e6:.0f}M parameters "
                             f"as `geosim models` counts them, most in the token embedding)")
    parser.add_argument("--steps", type=int, default=12, help="training steps per run (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=2, help="steps after the first excluded from timing (default %(default)s)")
    parser.add_argument("--global-batch", dest="batch", type=int, default=8,
                        help="sequences per optimizer step, summed over all GPUs (default %(default)s)")
    parser.add_argument("--microbatches", type=int, default=1, help="microbatches per step (default %(default)s)")
    parser.add_argument("--gpus-per-host", dest="cpu_devices", type=int, default=1,
                        help="devices per emulated host: virtual CPU devices standing for its GPUs (default %(default)s)")
    add_renamed(parser, "--cpu-devices", "--gpus-per-host", dest="cpu_devices", type=int)
    parser.add_argument("--bandwidth-gbps", type=float, default=1.0,
                        help="egress cap of every emulated host, Gbit/s (default %(default)s; 0 = none)")
    parser.add_argument("--tcp-window-kib", type=float, default=128.0, metavar="N",
                        help="cap TCP buffers in the emulated hosts at N KiB (geosim live wan up --tcp-window-kib); each "
                             "run's link gets the window its own connections had (read with ss while it ran; a "
                             "transfer on a 40 ms slice measures the fallback) as window_mib "
                             "(default %(default)s; 0 = no cap, BDP-sized buffers)")
    parser.add_argument("--seq-len", type=int, default=None, help="sequence length (default: the model's n_ctx)")
    parser.add_argument("--data", default="generated", help="training data (default %(default)s: offline)")
    parser.add_argument("--out-dir", dest="out", default="live-validate",
                        help="directory to write the runs, the fit and the plot into (default ./%(default)s)")
    add_renamed(parser, "--out", "--out-dir", dest="out")
    parser.add_argument("--records", help="fit and predict these run records instead of running (a runs.jsonl "
                                          "written by an earlier validate)")
    parser.add_argument("--quick", action="store_true",
                        help="CI size: 6 steps, 1 warm-up step (the RTTs and techniques as given)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run before it is stopped (default %(default)s)")
    parser.add_argument("--params", metavar="FILE", help=meaning("--params"))
    parser.add_argument("--max-evaluations", type=int, default=40, help="least-squares iterations per fit (default %(default)s)")
    parser.add_argument("--plot", help="PNG to write (default OUT/validate.png; '' for none)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _csv_floats(text: str, key: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise GeosimError(f"must be comma-separated numbers, got {text!r}", key=key) from None
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise GeosimError(f"must be >= 0, got {text!r}", key=key)
    return values


# ----------------------------------------------------------------------------- running

def run_all(rtts: list[float], techniques: list[str], opts_for, *, out: Path, bandwidth_mbit: float | None,
            cpu_devices: int, timeout_s: float, log=print, tcp_window_kib: float | None = None) -> Path:
    """One slice per RTT (brought up, used, torn down), every technique on it; records appended to
    OUT/runs.jsonl (with the RTT measured on the slice). Returns the records' path."""
    from geosim.live.experiments import wan_runs
    from geosim.live.wan import netns
    from geosim.live.wan.emulator import up
    from geosim.live.wan.measure import measure_rtt

    netns.check_host()  # root, /dev/net/tun, ip: one line and exit 2 otherwise
    runs = out / "runs.jsonl"
    state = str(out / "wan-state.json")  # a private state file: a slice someone else has up is left alone
    ttl = len(techniques) * timeout_s + 300
    window_mib = None
    if tcp_window_kib:
        window_mib = effective_window_mib(tcp_window_kib, bandwidth_mbit, state, log)
    for rtt in rtts:
        log(f"RTT {rtt:g} ms: bringing up a 2-host slice"
            + (f" ({bandwidth_mbit:g} Mbit/s per host)" if bandwidth_mbit else "")
            + (f", TCP window {tcp_window_kib:g} KiB" if tcp_window_kib else ""))
        wan = up(rtt_ms=rtt, bandwidth_mbit=bandwidth_mbit, hosts=2, ttl_s=ttl, state=state,
                 tcp_window_kib=tcp_window_kib or None)
        try:
            measured = measure_rtt(wan, count=20, interval_s=0.01)
            log(f"  measured RTT ({measured['method'].upper()} echo): median {measured['median_ms']:.3f} ms "
                f"(min {measured['min_ms']:.3f})")
            for technique in techniques:
                started = time.monotonic()
                try:
                    result = wan_runs.run_on_wan(opts_for(technique), wan=wan, cpu_devices=cpu_devices,
                                                 timeout_s=timeout_s)
                    doc = result.record
                except GeosimError as exc:
                    log(f"  {technique:<10} failed: {exc}")
                    continue
                doc = with_measured_rtt(doc, measured["median_ms"], rtt, window_mib, method=measured["method"])
                wan_runs.append(str(runs), doc)
                m = doc.get("measured", {})
                t, fastest = m.get("time_per_iteration_s"), m.get("fastest_iteration_s")
                log(f"  {technique:<10} {doc['status']:<6} " + (f"{t * 1e3:8.1f} ms/step" if t else "")
                    + (f" (fastest {fastest * 1e3:.1f})" if fastest else "")
                    + (f", load {m['load_before']:.1f}-{m['load_after']:.1f} on {m['cores']} cores" if "cores" in m
                       and "load_after" in m else "") + f"  ({time.monotonic() - started:.0f} s)")
        finally:
            wan.down()
    return runs


def effective_window_mib(tcp_window_kib: float, bandwidth_mbit: float | None, state: str, log=print,
                         rtt_ms: float = 40.0, seconds: float = 3.0) -> float:
    """The TCP window a flow really gets under the emulator's buffer cap, in MiB, measured once:
    a slice at rtt_ms with the cap, one TCP transfer, window = steady throughput x measured RTT.
    The kernel spends part of each buffer on skb overhead (the advertised window is the buffer x
    payload/truesize), so a 128 KiB cap gives ~93 KiB in flight here; the records' links carry this
    figure as window_mib, the window the simulator limits each flow to."""
    from geosim.live.wan.emulator import up
    from geosim.live.wan.measure import measure_rtt, measure_throughput

    wan = up(rtt_ms=rtt_ms, bandwidth_mbit=bandwidth_mbit, hosts=2, ttl_s=120, state=state,
             tcp_window_kib=tcp_window_kib)
    try:
        rtt = measure_rtt(wan, count=10, interval_s=0.01)["median_ms"]
        tput = measure_throughput(wan, seconds=seconds)
    finally:
        wan.down()
    window = tput["mbit_steady"] * 1e6 / 8 * rtt / 1e3
    if bandwidth_mbit and tput["mbit_steady"] > 0.8 * bandwidth_mbit:
        raise GeosimError(f"a {tcp_window_kib:g} KiB window is not the bottleneck at {rtt_ms:g} ms and "
                          f"{bandwidth_mbit:g} Mbit/s: use a smaller --tcp-window-kib", key="--tcp-window-kib")
    log(f"TCP window cap {tcp_window_kib:g} KiB: {tput['mbit_steady']:.1f} Mbit/s at RTT {rtt:.2f} ms, "
        f"an effective window of {window / 1024:.1f} KiB ({window / 1024 / tcp_window_kib:.0%} of the cap)")
    return window / MIB


def with_measured_rtt(doc: dict, measured_ms: float, requested_ms: float, window_mib: float | None = None,
                      method: str | None = None) -> dict:
    """The link's RTT as measured on the slice (at 0.1 ms the path's own ~0.1 ms is not negligible);
    the requested one stays in the note and the slice's name; method: how it was measured (icmp, udp).
    window_mib: the effective TCP window measured under the slice's buffer cap (effective_window_mib),
    for a record without its own connections' window (measured.tcp_window_kib, live/wan/connections.py)."""
    doc = json.loads(json.dumps(doc))
    own = "tcp_window_kib" in (doc.get("measured") or {})  # the run's own connections' window
    for link in doc["cluster"]["links"]:
        link["rtt_ms"] = round(max(measured_ms, 1e-3), 4)
        if window_mib and not own:
            link["window_mib"] = round(window_mib, 5)
    doc["cluster"]["name"] = f"wan-rtt{requested_ms:g}ms"
    doc["note"] = (doc.get("note") or "") + f"; RTT requested {requested_ms:g} ms, measured {measured_ms:.3f} ms" + (
        f" ({method.upper()} echo)" if method else "")
    if window_mib and not own:
        doc["note"] += f"; effective TCP window {window_mib * 1024:.1f} KiB (measured)"
    return doc


# ----------------------------------------------------------------------------- fitting

def requested_rtt(record) -> float:
    name = (record.cluster or {}).get("name", "")
    if name.startswith("wan-rtt") and "ms" in name:
        return float(name.removeprefix("wan-rtt").split("ms")[0])
    return float(record.cluster["links"][0]["rtt_ms"])


def per_iteration_cases(records, source: str):
    """Cases fitted to each run's figure (run_time_s; see the module's docstring)."""
    from geosim.calibrate.cases import cases_from_records

    trimmed = []
    for r in records:
        measured = {"time_per_iteration_s": run_time_s(r), **({"steps": r.measured["steps"]} if "steps" in r.measured
                                                                else {})}
        trimmed.append(replace(r, measured=measured))
    return cases_from_records(trimmed, source)


# a live run's CPU devices are outside the datasheet kernel timer: they run at a flat fraction of their
# peak ([compute.flat_fraction]), fitted here from this start when no runtime declares it
FLAT_EFFICIENCY_START = 0.1


def free_params(cases, base):
    """What the fit moves: the round trips RTTs identify (ROUND_TRIP_SCALARS, the runtime's own
    collective round trips), and, for the study's runtime, one overhead per technique."""
    from geosim.calibrate.free import FreeParam
    from geosim.inputs.params import fittable
    from geosim.inputs.runtime import shipped_runtimes

    free = []
    runtimes = sorted({c.workload.runtime for c in cases if c.metric})
    # a runtime that measured its devices' speed (jax: XLA:CPU here, live/experiments/cpu_compute.py) brings it
    declared = {d for name in runtimes for d, _ in shipped_runtimes()[name].device_compute}
    for gpu in sorted({g for c in cases if c.metric for g in c.gpus} - declared - set(base.flat_fraction)):
        free.append(FreeParam("flat_fraction", gpu, base.flat_fraction.get(gpu, FLAT_EFFICIENCY_START), 1e-4, 0.9, ""))
    tcp = base.network("tcp")  # the live runs' collectives go over TCP (gloo, NCCL's socket transport)
    techniques = sorted({c.technique for c in cases if c.metric})
    declared_scalars = fittable()
    for key in ROUND_TRIP_SCALARS:
        if key == "transport.p2p_handshake_rtts" and not any(is_pipelined(t) for t in techniques):
            continue
        if key == "transport.collective_step_rtts" and runtimes != ["alpa"]:
            continue  # the runtime's collective library's round trips, fitted below
        lo, hi = declared_scalars[key].fit
        value = getattr(tcp, declared_scalars[key].field)
        free.append(FreeParam("scalar", key, min(max(value, 0.5), hi), lo, hi, ""))
    for name in runtimes:
        if name == "alpa":
            for t in sorted({c.technique for c in cases if c.metric and c.workload.runtime == "alpa"}):
                free.append(FreeParam("iteration_overhead", t, 0.01, 1e-5, 30.0, "s"))
            continue
        lo, hi = declared_scalars["transport.collective_step_rtts"].fit
        free.append(FreeParam("runtime", f"{name}.collective_step_rtts",
                              shipped_runtimes()[name].collective_step_rtts or 1.0, lo, hi, ""))
    timed = sum(1 for c in cases if c.metric)
    if len(free) > timed:  # never more parameters than records: the efficiency goes first (a runtime brings it)
        free = [p for p in free if p.kind != "flat_fraction"]
    return free


def profiled_settings(cases) -> dict:
    """The whole-number settings profiled on a grid: Shard's per-layer count, only for runs of a runtime
    without Shard's compiled collectives (the study's); jax's come from its compiled step."""
    from geosim.inputs.runtime import shipped_runtimes

    out = {}
    for key, grid in PROFILED.items():
        technique = key.partition(".")[0]
        if any(c.metric and c.technique == technique and not shipped_runtimes()[c.workload.runtime].shard_layer_collectives
               for c in cases):
            out[key] = grid
    return out


def live_settings(base, records):
    """What live's compiled programs fix, set rather than fitted: its ZeRO-2 all-gathers the parameters at
    the run's own precision (compiled: an f32 all-gather of every parameter for fp32 runs,
    tests/test_compiled_collectives.py), where the study's Alpa gathered fp16 casts (2 bytes)."""
    precisions = {r.workload.get("precision") for r in records if r.workload.get("runtime") == "jax"}
    if len(precisions) == 1 and None not in precisions:
        base = base.with_settings("zero2", gather_bytes_per_param=4.0 if precisions.pop() == "fp32" else 2.0)
    return base


def fit_and_predict(records, held_out: float, *, base=None, max_nfev: int = 40):
    """Fit on the records at every RTT but held_out; (fit result, [(record, predicted, role)])."""
    from geosim.calibrate.fit import fit, predict_with

    base = live_settings(base or load_params(None), records)
    ok = [r for r in records if r.status == "ok" and "time_per_iteration_s" in r.measured]
    train = [r for r in ok if not math.isclose(requested_rtt(r), held_out)]
    test = [r for r in ok if math.isclose(requested_rtt(r), held_out)]
    if not train or not test:
        raise GeosimError(f"need ok runs at the held-out RTT ({held_out:g} ms) and at others to fit on",
                          key="--hold-out")
    train_cases = per_iteration_cases(train, "fit")
    free = free_params(train_cases, base)

    def best_fit(params):
        # A few starting points: the per-RTT costs trade off against each other and against the
        # CPU's efficiency, so one trust-region run from the defaults can stop in a poor minimum.
        best = None
        for start in START_POINTS:
            trial = [replace(p, initial=min(max(start.get(p.target, p.initial), p.lower), p.upper)) for p in free]
            candidate = fit(train_cases, trial, params, max_nfev=max_nfev)
            if best is None or candidate.rms_log_error < best.rms_log_error - 1e-9:
                best = candidate
        return best

    profiled = list(profiled_settings(train_cases))
    if not profiled:
        result = best_fit(base)
    else:
        technique, _, leaf = profiled[0].partition(".")
        tried = {}
        for k in PROFILED[profiled[0]]:
            tried[k] = best_fit(base.with_settings(technique, **{leaf: k}))
        k0 = min(tried, key=lambda k: tried[k].rms_log_error)
        for k in sorted({max(1, round(k0 / 1.4)), max(1, round(k0 * 1.4)), max(1, round(k0 / 1.18)),
                         max(1, round(k0 * 1.18))} - set(tried)):
            tried[k] = best_fit(base.with_settings(technique, **{leaf: k}))
        result = min(tried.values(), key=lambda r: r.rms_log_error)
    out = [(c.case.record, c.predicted, "fit") for c in result.cases]
    out += [(c.case.record, c.predicted, "held out") for c in predict_with(result, per_iteration_cases(test, "test"))]
    return result, out


def validate_records(records, held_out: float, *, max_nfev: int = 40, base=None):
    """(report, fit result) for one held-out RTT; base: the parameters to start from (default: shipped)."""
    started = time.perf_counter()
    result, predictions = fit_and_predict(records, held_out, max_nfev=max_nfev, base=base)
    rows = []
    for r, predicted, role in predictions:
        rows.append(Row(requested_rtt(r), r.technique, run_time_s(r), predicted, role,
                        measured_rtt_ms=r.cluster["links"][0]["rtt_ms"]))
    for r in records:
        if r.status != "ok":
            rows.append(Row(requested_rtt(r), r.technique, None, None, "not timed", status=r.status))
    rows.sort(key=lambda x: (x.rtt_ms, TECHNIQUES.index(x.technique) if x.technique in TECHNIQUES else 9))
    held = [x for x in rows if x.role == "held out"]
    within = all(abs(x.error) <= TARGET for x in held) if held else None
    fitted = {f.param.name: {"value": f.value, "unit": f.param.unit, "sigma_log": None if not math.isfinite(f.sigma_log)
                             else f.sigma_log, "note": f.note} for f in result.fitted}
    slowdown, round_trips, qualitative = latency_costs(rows)
    for key in profiled_settings(per_iteration_cases([r for r in records if r.status == "ok"], "fit")):
        technique, _, leaf = key.partition(".")
        if any(r.technique == technique for r in records):
            fitted[key] = {"value": float(getattr(result.params.settings(technique), leaf)), "unit": "",
                           "sigma_log": None, "note": "profiled on a grid"}
    warning = load_warning([r for r in records if r.status == "ok"])
    report = Report(rows, held_out, fitted, list(result.warnings) + ([warning] if warning else []), slowdown,
                    qualitative, within,
                    round_trips=round_trips)
    report.fit_seconds = time.perf_counter() - started
    return report, result


def other_holdouts(records, held_out: float, max_nfev: int, base=None) -> dict:
    """Every other RTT held out in turn: {rtt: {technique: signed error}}."""
    out = {}
    for rtt in sorted({requested_rtt(r) for r in records if r.status == "ok"}):
        if math.isclose(rtt, held_out):
            continue
        try:
            _, predictions = fit_and_predict(records, rtt, max_nfev=max_nfev, base=base)
        except GeosimError as exc:
            out[f"{rtt:g}"] = {"error": exc.problem}
            continue
        out[f"{rtt:g}"] = {r.technique: p / run_time_s(r) - 1 for r, p, role in predictions
                           if role == "held out"}
    return out


# ----------------------------------------------------------------------------- command

def run(args) -> int:
    from geosim.live.train.loop import Options

    rtts = _csv_floats(args.rtt_ms, "--rtt-ms")
    techniques = list(dict.fromkeys(t for n in args.techniques or DEFAULT_TECHNIQUES
                                    for t in (TECHNIQUES if n.lower() == "all" else [n.lower()])))
    for t in techniques:
        if t not in TECHNIQUES:
            raise GeosimError(f"unknown technique {t!r} (known: {', '.join(TECHNIQUES)})", key="--technique")
    if args.records is None and len(set(rtts)) < 2:
        raise GeosimError("give at least two RTTs: one to fit on, one to predict", key="--rtt-ms")
    steps, warmup = (6, 1) if args.quick else (args.steps, args.warmup)
    for key, value in (("--steps", steps), ("--global-batch", args.batch), ("--gpus-per-host", args.cpu_devices),
                       ("--microbatches", args.microbatches), ("--timeout", args.timeout)):
        if value <= 0:
            raise GeosimError(f"must be > 0, got {value}", key=key)
    for key, value in (("--seq-len", args.seq_len), ("--tcp-window-kib", args.tcp_window_kib)):
        if value is not None and not value > 0:
            raise GeosimError(f"must be > 0, got {value}", key=key)

    get_model(args.model)
    base = load_params(args.params)  # a bad file is one line before any run starts
    from geosim.base.fileio import check_output_path, make_output_dir

    out = make_output_dir(args.out, "--out-dir")
    for name in ("fitted.toml", "validate.json"):  # every output checked before minutes of runs
        check_output_path(out / name, "--out-dir")
    if args.plot != "":
        check_output_path(args.plot if args.plot is not None else out / "validate.png", "--plot")
    log = (lambda line: print(line, file=sys.stderr, flush=True))
    started = time.monotonic()
    if args.records:
        runs = Path(args.records)
    else:
        def opts_for(technique):
            return Options(technique=technique, model=args.model, steps=steps, batch=args.batch,
                           microbatches=args.microbatches, data=args.data, tokenizer="bytes" if args.data == "generated"
                           else "auto", warmup=warmup, log_every=max(steps, 1),
                           seq_len=args.seq_len)

        runs = out / "runs.jsonl"
        if runs.exists():
            runs.rename(runs.with_name(f"runs.{int(time.time())}.jsonl"))  # a fresh file per validate run
        previous = signal.signal(signal.SIGTERM, _sigterm)
        try:
            run_all(rtts, techniques, opts_for, out=out, bandwidth_mbit=args.bandwidth_gbps * 1000 or None,
                    cpu_devices=args.cpu_devices, timeout_s=args.timeout, log=log,
                    tcp_window_kib=args.tcp_window_kib)
        except KeyboardInterrupt:
            log("interrupted: slices torn down, processes stopped")
            return 130
        finally:
            signal.signal(signal.SIGTERM, previous)
    run_seconds = time.monotonic() - started

    records = [r for r in read_records(runs) if r.technique in techniques]
    rtts_seen = sorted({requested_rtt(r) for r in records})
    held_out = args.hold_out if args.hold_out is not None else rtts_seen[len(rtts_seen) // 2]
    if not any(math.isclose(held_out, r) for r in rtts_seen):
        raise GeosimError(f"no runs at RTT {held_out:g} ms (runs at {', '.join(f'{r:g}' for r in rtts_seen)})",
                          key="--hold-out")
    warning = load_warning([r for r in records if r.status == "ok"])
    if warning:
        log(warning)
    log(f"fitting on RTT {', '.join(f'{r:g}' for r in rtts_seen if not math.isclose(r, held_out))} ms, "
        f"predicting {held_out:g} ms")
    rep, result = validate_records(records, held_out, max_nfev=args.max_evaluations, base=base)
    rep.other_holdouts = other_holdouts(records, held_out, args.max_evaluations, base=base)
    rep.runs_path, rep.run_seconds = str(runs), run_seconds

    rep.params_path = str(out / "fitted.toml")
    write_params(result.params, rep.params_path, fitted={"on": sorted({f"live:wan-rtt{requested_rtt(r):g}ms/{r.technique}"
                                                                       for r in records if r.status == "ok"
                                                                       and not math.isclose(requested_rtt(r), held_out)})})
    plot_path = args.plot if args.plot is not None else str(out / "validate.png")
    if plot_path:
        plot(rep, Path(plot_path))
        rep.plot_path = plot_path

    write_atomic(out / "validate.json", json.dumps(rep.to_dict(), indent=2, allow_nan=False))
    if args.json:
        print(json.dumps(rep.to_dict(), indent=2))
    else:
        print_report(rep)
    return 0


def _sigterm(signum, frame):
    raise KeyboardInterrupt
