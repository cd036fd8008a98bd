"""`geosim live`: real training runs and network probes, feeding calibration.

Nothing heavy is imported here at module level: `geosim --help` must not load jax or ray.

Over 400 lines: live's subcommands (run, probe, validate, wan) with their flags and bounds, one module
as every command is one module.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from geosim.cli.common import LIVE_RUN_SIZE_BOUNDS, MAX_STEPS, WORKLOAD_BOUNDS
from geosim.cli.vocabulary import CommaList, add_renamed, deprecate
from geosim.base.errors import GeosimError, require
from geosim.live.registry import check_live, low_communication, synchronous
from geosim.inputs.records import append_record, validate
from geosim.inputs.scenario import get_model, load_scenario
from geosim.base.validate import Bound, count, positive

RENAMED_KEYS = {"cpu_devices": "--gpus-per-host", "hosts": "--host-count", "stages": "--pipeline-parallel"}  # a dest -> its flag, where they differ

HELP = "measure real training runs (data, zero2, shard, pipeshard) and probe a Ray cluster's network"
# the techniques live runs implement: the one registry's (geosim/live/registry.py)
TECHNIQUES = synchronous()
LOWCOMM = low_communication()  # low-communication techniques (docs/guide/low-communication.md)
DEFAULT_STEPS = 20  # live/train/loop.py's, when neither --steps nor --epochs is given
DEFAULT_WARMUP = 2  # a shorter run times what is left after the first step (live/train/loop.py)

DAY_S = 86_400.0
# every numeric flag's bound, checked before the command runs (geosim/base/validate.py check_flags)
LIVE_RUN_BOUNDS = {
    "--steps": LIVE_RUN_SIZE_BOUNDS["--steps"],
    "--epochs": count(100_000, "passes over the data set"),
    "--global-batch": LIVE_RUN_SIZE_BOUNDS["--global-batch"],
    "--microbatches": WORKLOAD_BOUNDS["--microbatches"],
    "--pipeline-parallel": count(1024, "pipeline stages: at most one per layer"),
    "--seq-len": WORKLOAD_BOUNDS["--seq-len"],
    "--seed": Bound(0, 2**32 - 1, integer=True, why="JAX and numpy seeds are 32-bit"),
    "--lr": positive(10.0, "an AdamW learning rate; above 10 diverges at once"),
    "--warmup": Bound(0, MAX_STEPS, integer=True, why="steps excluded from timing; fewer than --steps"),
    "--log-every": count(MAX_STEPS, "a progress line every N steps"),
    "--memory-limit-gib": positive(1e5, "per-device memory, as a GPU's memory_gib"),
    "--gpus-per-host": LIVE_RUN_SIZE_BOUNDS["--gpus-per-host"],
    "--host-count": count(4096, "Ray nodes to use"),
    "--replicas": count(1024, "low-communication replicas"),
    "--inner-steps": count(MAX_STEPS, "as --steps"),
    "--outer-lr": positive(100.0, "the outer SGD learning rate (0.7-1 in the papers)"),
    "--outer-momentum": Bound(0.0, 0.999, why="Nesterov momentum must stay below 1"),
    "--topk": positive(1.0, "a fraction of each chunk's values"),
    "--bits": Bound(1, 32, integer=True, why="bits per value sent (1, 2, 4, 8 or 32; checked by the technique)"),
    "--loss-curve-window": count(MAX_STEPS, "steps between loss-curve points"),
    "--num-processes": count(4096, "JAX processes in a hand-started run"),
    "--process-id": Bound(0, 4095, integer=True, why="this process's index, below --num-processes"),
    "--timeout": positive(7 * DAY_S, "seconds to wait for a Ray run; a week"),
}
FLAG_BOUNDS = {
    "live run": LIVE_RUN_BOUNDS,
    "live probe": {"--seconds": LIVE_RUN_SIZE_BOUNDS["--seconds"],
                   "--streams": count(256, "parallel TCP streams"),
                   "--pings": count(100_000, "round trips for the RTT")},
    "live validate": {"--hold-out": Bound(0.0, 1e5, why="an RTT in ms, as --rtt-ms"),
                      "--steps": count(100_000, "steps per run; a validate runs several techniques at several RTTs"),
                      "--warmup": Bound(0, 100_000, integer=True, why="fewer than --steps"),
                      "--global-batch": LIVE_RUN_BOUNDS["--global-batch"],
                      "--microbatches": LIVE_RUN_BOUNDS["--microbatches"],
                      "--gpus-per-host": count(64, "per emulated host; every host shares this machine's cores"),
                      "--bandwidth-gbps": Bound(0.0, 1e3, why="an emulated host's egress cap (0 = none)"),
                      "--tcp-window-kib": Bound(0.0, 1e7, why="a TCP buffer cap (0 = none)"),
                      "--seq-len": LIVE_RUN_BOUNDS["--seq-len"],
                      "--timeout": positive(7 * DAY_S, "seconds per run"),
                      "--max-evaluations": count(10_000, "least-squares iterations")},
    "live wan up": {"--rtt-ms": Bound(0.0, 10_000.0, why="a one-way delay the forwarder holds in memory"),
                    "--bandwidth-gbps": positive(100.0, "the forwarder is user space: ~1 Gbit/s at most"),
                    "--jitter-ms": Bound(0.0, 10_000.0, why="as --rtt-ms"),
                    "--loss": Bound(0.0, 0.999, why="a probability below 1"),
                    "--host-count": count(64, "network namespaces on this machine"),
                    "--ttl-s": positive(30 * DAY_S, "the slice tears itself down after this"),
                    "--mtu": Bound(576, 65535, integer=True, why="IPv4's least MTU .. the largest frame"),
                    "--tcp-window-kib": positive(1e7, "a TCP buffer cap")},
    "live wan measure": {"--src": Bound(0, 63, integer=True, why="a host of the slice"),
                         "--dst": Bound(0, 63, integer=True, why="a host of the slice"),
                         "--count": count(100_000, "RTT samples"),
                         "--seconds": Bound(0.0, 3600.0, why="length of the TCP transfer (0 skips it)")},
}


def add_arguments(parser):
    from geosim.live.train import lowcomm  # plain Python: the options' defaults, from the techniques' Settings

    sub = parser.add_subparsers(dest="live_command", metavar="{run,probe,wan,validate}")
    sub.required = True

    run = sub.add_parser("run", help="train a GPT-2 with one technique and record what was measured",
                         description="Train a GPT-2 with one technique and record what was measured. Without "
                                     "--ray-address or --coordinator it runs here, on this machine's CPU or GPUs.")
    run.add_argument("--technique", action=CommaList, metavar="NAME|all",
                     help=f"technique(s), run one after another, each its own record; repeatable and "
                          f"comma-separated; 'all': {','.join(TECHNIQUES + LOWCOMM)} (default: data)")
    run.add_argument("--model", default="tiny", help="a model from the catalog (`geosim models`) (default %(default)s)")
    run.add_argument("--backend", choices=("jax", "alpa"), default="jax", help="jax (default) or alpa (needs Alpa installed)")
    group = run.add_mutually_exclusive_group()
    group.add_argument("--steps", type=int, help="training steps (default 20 unless --epochs)")
    group.add_argument("--epochs", type=int, help="passes over the data set")
    run.add_argument("--global-batch", dest="batch", type=int, default=8,
                     help="sequences per optimizer step, summed over all GPUs (default %(default)s)")
    run.add_argument("--microbatches", type=int, default=1, help="microbatches per step (pipeline; accumulation elsewhere)")
    run.add_argument("--pipeline-parallel", dest="stages", type=int, metavar="N",
                     help="pipeshard stages (p; default: one per host; two on a single host)")
    add_renamed(run, "--stages", "--pipeline-parallel", dest="stages", type=int)
    run.add_argument("--precision", choices=("auto", "fp32", "bf16", "fp16"), default="auto",
                     help="compute precision (auto: fp32 on CPU, bf16 on Ampere+, fp16 on older GPUs)")
    run.add_argument("--seq-len", type=int, help="sequence length (default: the model's context)")
    run.add_argument("--seed", type=int, default=0, help="random seed of the initial weights and data order (default %(default)s)")
    run.add_argument("--lr", type=float, default=3e-4, help="AdamW learning rate")
    run.add_argument("--data", default="auto",
                     help="wikipedia (HF wikimedia/wikipedia 20231101.ace), generated (offline), a text file, "
                          "or auto: wikipedia when reachable, else generated")
    run.add_argument("--tokenizer", choices=("auto", "gpt2", "bytes"), default="auto",
                     help="auto: GPT-2's BPE when available, else bytes (default %(default)s)")
    run.add_argument("--warmup", type=int, help=f"steps after the first excluded from timing (default {DEFAULT_WARMUP}; "
                                                "fewer on a shorter run)")
    run.add_argument("--log-every", type=int, default=10, help="a progress line every N steps")
    run.add_argument("--memory-limit-gib", type=float, help="per-device memory to allow (default: the device's)")
    run.add_argument("--gpus-per-host", dest="cpu_devices", type=int,
                     help="devices per host: the virtual CPU devices of each process, standing for a host's GPUs "
                          "(default: this machine's cores)")
    add_renamed(run, "--cpu-devices", "--gpus-per-host", dest="cpu_devices", type=int)
    run.add_argument("--scenario", help="scenario file describing the cluster (e.g. from `geosim live probe`)")
    run.add_argument("--records-out", dest="record", metavar="RUNS.jsonl",
                     help="append the run record to this run-records file")
    add_renamed(run, "--records", "--records-out", dest="record")
    run.add_argument("--json", action="store_true", help="print the result as JSON")
    low = run.add_argument_group("low-communication techniques (diloco, sparseloco; docs/guide/low-communication.md)")
    low.add_argument("--replicas", type=int, help="replicas (default: one per host; 2 on a single host)")
    # the defaults shown are the techniques' Settings' (geosim/techniques/diloco.py, sparseloco.py), as live reads them
    diloco, sparse = lowcomm.defaults("diloco"), lowcomm.defaults("sparseloco")
    low.add_argument("--inner-steps", type=int, help="H, inner AdamW steps per synchronization "
                                                     f"(default {diloco['inner_steps']}, a live run's)")
    low.add_argument("--outer-lr", type=float, help=f"outer SGD learning rate (default: diloco {diloco['outer_lr']:g}, "
                                                    f"sparseloco {sparse['outer_lr']:g})")
    low.add_argument("--outer-momentum", type=float, help="outer Nesterov momentum, 0 for none (default: diloco "
                                                          f"{diloco['outer_momentum']:g}, sparseloco {sparse['outer_momentum']:g})")
    low.add_argument("--topk", dest="topk_fraction", type=float,
                     help=f"sparseloco: fraction of each chunk's values sent (default {sparse['topk_fraction']:g})")
    low.add_argument("--bits", type=int, help="sparseloco: bits per value sent, 1 2 4 8, or 32 unquantized "
                                              f"(default {sparse['bits']})")
    low.add_argument("--loss-curve-out", metavar="CURVES.jsonl",
                     help="append the loss-vs-tokens curve (any technique), for geosim predict --loss-curves")
    low.add_argument("--loss-curve-window", type=int,
                     help="steps between curve points (default: H for diloco/sparseloco, else 10; use one value for runs you compare)")
    dist = run.add_argument_group("multi-host")
    dist.add_argument("--ray-address", help="run one JAX process per node of this Ray cluster ('auto': the local one)")
    dist.add_argument("--host-count", dest="hosts", type=int, metavar="N", help="use only the first N Ray nodes")
    dist.add_argument("--hosts", dest="hosts", action=_HostsAction, metavar="wan",
                      help="'wan': one process per host of the emulated WAN slice (`geosim live wan up`; root), the "
                           "record carries the slice's RTT and bandwidth")
    add_renamed(dist, "--nodes", "--hosts", dest="hosts", type=_hosts_value)
    dist.add_argument("--coordinator", help="HOST:PORT of process 0, to start processes by hand")
    dist.add_argument("--num-processes", type=int, default=1,
                      help="processes in a hand-started run (with --coordinator; default %(default)s)")
    dist.add_argument("--process-id", type=int, default=0,
                      help="this process's index in a hand-started run (default %(default)s)")
    dist.add_argument("--gloo-interface", help="network interface for gloo (CPU collectives), e.g. enp7s0")
    dist.add_argument("--nccl-interface", help="sets NCCL_SOCKET_IFNAME on every host")
    dist.add_argument("--timeout", type=float, default=3600, help="seconds to wait for a Ray run (default %(default)s)")

    probe = sub.add_parser("probe", help="measure RTT and TCP throughput between Ray nodes -> a scenario file")
    probe.add_argument("--ray-address", default="auto", help="the Ray cluster to probe (default %(default)s: the local one)")
    probe.add_argument("--out", required=True, help="scenario file to write (TOML)")
    probe.add_argument("--name", help="scenario name (default: from the file name)")
    probe.add_argument("--seconds", type=float, default=3.0, help="seconds per throughput test (default %(default)s)")
    probe.add_argument("--streams", type=int, default=4, help="parallel streams for the multi-stream test (default %(default)s)")
    probe.add_argument("--pings", type=int, default=20, help="round trips for the RTT (default %(default)s)")
    probe.add_argument("--json", action="store_true", help="print the results as JSON")

    validate = sub.add_parser("validate", help="runs on the emulated WAN at several RTTs vs the simulator's predictions",
                              description="Run the techniques on an emulated 2-host WAN slice at several RTTs (root), "
                                          "calibrate the simulator on the runs at all RTTs but one, predict the held-out "
                                          "RTT, print predicted vs measured with errors; writes records, the fitted "
                                          "parameters, a JSON report and a PNG plot to --out.")
    from geosim.live.experiments import validate as validate_cmd

    validate_cmd.add_arguments(validate)

    from geosim.live.wan import cli as wan_cli

    wan = sub.add_parser("wan", help="emulate a WAN between local network namespaces")
    wan_cli.add_arguments(wan)


def run(args) -> int:
    if args.live_command == "wan":
        from geosim.live.wan import cli as wan_cli

        return wan_cli.run(args)
    if args.live_command == "probe":
        return _probe(args)
    if args.live_command == "validate":
        from geosim.live.experiments import validate

        return validate.run(args)
    return _run_each(args)


def live_techniques(names: list[str] | None) -> list[str]:
    """--technique's names in order ('all': every live technique); each checked before any run."""
    chosen = []
    for name in (n.lower() for n in names or ["data"]):
        chosen += list(TECHNIQUES + LOWCOMM) if name == "all" else [name]
    for name in chosen:
        check_live(name)  # the hybrid, say: one line saying it runs in the simulator only
    return list(dict.fromkeys(chosen))


def _run_each(args) -> int:
    """One run per technique, one after another; the first that does not finish stops the rest."""
    import copy

    techniques = live_techniques(args.technique)
    if args.json and len(techniques) > 1:
        raise GeosimError("prints one run's result as JSON: give one technique, or read every run's record from "
                          "--records-out", key="--json")
    code = 0
    for technique in techniques:
        one = copy.copy(args)
        one.technique = technique
        code = _run(one)
        if code != 0:
            break
    return code


def _options(args):
    from geosim.live.train import lowcomm
    from geosim.live.train.loop import Options

    check_live(args.technique)
    options = lowcomm.given({k: getattr(args, k, None) for k in lowcomm.KEYS})

    get_model(args.model)
    for key in ("steps", "epochs", "batch", "microbatches", "stages", "seq_len", "cpu_devices", "num_processes", "hosts"):
        value = getattr(args, key)
        if value is not None and value != "wan" and value <= 0:
            raise GeosimError(f"must be > 0, got {value}", key=RENAMED_KEYS.get(key, "--" + key.replace("_", "-")))
    if args.memory_limit_gib is not None and not args.memory_limit_gib > 0:
        raise GeosimError(f"must be > 0, got {args.memory_limit_gib:g}", key="--memory-limit-gib")
    if args.batch % args.microbatches:
        raise GeosimError(f"global batch ({args.batch}) must be divisible by microbatches ({args.microbatches})", key="--global-batch")
    _check_combinations(args)
    if args.scenario:

        load_scenario(args.scenario)
    if args.data not in ("auto", "wikipedia", "generated"):  # a text file: a FIFO would block the run
        from geosim.base.validate import regular_input

        regular_input(args.data, "--data")
    for path, key in ((args.record, "--records-out"), (getattr(args, "loss_curve_out", None), "--loss-curve-out")):
        if path:
            check_appendable(path, key)
    check_reachable(args.ray_address, "--ray-address")
    return Options(technique=args.technique, model=args.model, steps=args.steps, epochs=args.epochs, batch=args.batch,
                   microbatches=args.microbatches, stages=args.stages, precision=args.precision, seq_len=args.seq_len,
                   seed=args.seed, learning_rate=args.lr, data=args.data, tokenizer=args.tokenizer,
                   warmup=DEFAULT_WARMUP if args.warmup is None else args.warmup,
                   log_every=args.log_every, memory_limit_gib=args.memory_limit_gib,
                   lowcomm=options if args.technique in LOWCOMM else {})


def _check_combinations(args) -> None:
    """What the flags' own bounds (geosim/base/validate.py) cannot see: values checked against each other,
    here, before JAX starts (a refusal after compiling costs 10-16 s)."""
    from geosim.base.validate import check_number

    if isinstance(args.hosts, int):
        check_number(args.hosts, "--host-count", None, 1, 4096, integer=True)
    steps = args.steps if args.steps is not None else (None if args.epochs else DEFAULT_STEPS)
    if args.warmup is not None and steps is not None and args.warmup >= steps:  # asked for: no step left to time
        raise GeosimError(f"must be fewer than the steps ({steps}): no step would be timed, got {args.warmup}",
                          key="--warmup")
    if not args.coordinator and (args.process_id != 0 or args.num_processes != 1):
        # without a coordinator there is no run to join: this process would train alone and, not
        # being process 0, write no record
        raise GeosimError("--process-id and --num-processes start processes by hand: they need --coordinator "
                          "HOST:PORT (process 0's address)", key="--process-id" if args.process_id else "--num-processes")
    if args.coordinator and not 0 <= args.process_id < args.num_processes:
        raise GeosimError(f"must be in 0..{args.num_processes - 1}, got {args.process_id}", key="--process-id")


def check_reachable(address: str | None, key: str, timeout_s: float = 5.0) -> None:
    """A Ray address given as HOST:PORT (or ray://HOST:PORT) must accept a connection now: Ray itself
    retries an address that does not answer for minutes, and may fall back to another cluster."""
    import socket

    if not address or address in ("auto", "local"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise GeosimError(f"expected HOST:PORT, 'auto' or ray://HOST:PORT, got {address!r}", key=key)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise GeosimError(f"nothing answers at {address} ({exc.strerror or exc}): is the Ray head running there?",
                          key=key) from None


def check_appendable(path: str, key: str) -> None:
    """Before the run: can a line be appended to `path`? Tried for real (a temporary file in its
    directory; the file itself opened for appending), as root passes every permission check."""
    import tempfile

    import stat

    where = os.path.dirname(os.path.abspath(path))
    try:
        mode = os.stat(path).st_mode if os.path.exists(path) else 0
        if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):  # written through at the end (geosim.base.fileio); opening
            return  # a FIFO here would wait for its reader, and a temporary file beside /dev/null is not wanted
        if os.path.isdir(path):
            raise IsADirectoryError(21, "is a directory")
        fd, tmp = tempfile.mkstemp(prefix=".geosim-check-", dir=where)
        os.close(fd)
        os.unlink(tmp)
        if os.path.exists(path):
            with open(path, "a"):
                pass
    except OSError as exc:
        raise GeosimError(f"cannot append here ({exc.strerror or exc}): nothing was run", source=path, key=key) from None


class _HostsAction(argparse.Action):
    """--hosts wan; a number, as --hosts took before --host-count, still works with a deprecation line."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            value = _hosts_value(values)
        except argparse.ArgumentTypeError:
            parser.error(f"argument {option_string}: must be 'wan' (a number of Ray nodes is --host-count), "
                         f"got {values!r}")
        if value != "wan":
            deprecate(namespace, "--hosts N (a number of Ray nodes) is deprecated; use --host-count N")
        setattr(namespace, self.dest, value)


def _hosts_value(text: str):
    if text == "wan":
        return text
    try:
        return int(text)
    except ValueError:
        import argparse

        raise argparse.ArgumentTypeError(f"must be a number of Ray nodes or 'wan', got {text!r}") from None


def _run(args) -> int:
    from geosim.live.train import interrupts

    with interrupts.handling():  # SIGINT/SIGTERM stop the run at a safe point, with a record
        return _run_handled(args, interrupts)


def _run_handled(args, interrupts) -> int:
    opts = _options(args)
    if args.hosts == "wan":
        return _run_wan(args, opts)
    with _stdout_to_stderr():  # libraries (gloo, Ray) print to fd 1: keep stdout for the result
        result, impl, hosts, backend = _execute(args, opts)
    if result is None:  # a process other than 0 of a hand-started run: process 0 reports
        if interrupts.hard_exit_needed():
            interrupts.hard_exit(interrupts.exit_code())
        return 0
    from geosim.live.train import lowcomm
    from geosim.live.train.record import build_record

    record = build_record(result, opts, backend=backend, collective_impl=impl, scenario=args.scenario, host_names=hosts,
                          extra_note=lowcomm.note(opts.technique, opts.lowcomm))
    _report(result, record, args)  # first: an unwritable file must not lose what was measured
    with interrupts.writing_record():
        _save(record, result, args, opts)
        interrupts.mark_recorded()
    code = {"ok": 0, "interrupted": interrupts.exit_code()}.get(result.status, 1)
    if interrupts.hard_exit_needed():  # a compilation still runs in its thread: no interpreter teardown
        interrupts.hard_exit(code)
    return code


def _save(record, result, args, opts) -> None:
    """Append the record (and the loss curve); a failure here is one line, the result is printed above."""
    try:
        if getattr(args, "loss_curve_out", None) and result.losses:
            from geosim.live.experiments import token_efficiency

            token_efficiency.append_curve(args.loss_curve_out, token_efficiency.curve_doc(
                record, result.losses, result.step_times, args.loss_curve_window, opts.lowcomm))
        if args.record:

            append_record(args.record, record)
            print(f"  record          appended to {args.record} (run {record.run_id})",
                  file=sys.stderr if args.json else sys.stdout)
    except OSError as exc:
        raise GeosimError(f"could not append the record ({exc.strerror or exc}); the result is printed above",
                          source=args.record or args.loss_curve_out) from None


def _execute(args, opts):
    if args.backend == "alpa":
        from geosim.live.train.alpa_backend import run_alpa

        return run_alpa(opts, args.ray_address), "nccl", None, "alpa"
    if args.ray_address:
        return _run_ray(args, opts)
    return _run_here(args, opts)


class _stdout_to_stderr:
    def __enter__(self):
        sys.stdout.flush()
        self.saved = os.dup(1)
        os.dup2(2, 1)

    def __exit__(self, *exc):
        sys.stdout.flush()
        os.dup2(self.saved, 1)
        os.close(self.saved)


def _run_wan(args, opts) -> int:
    """--hosts wan: one process per emulated host (live/experiments/wan_runs.py); process 0's record, on the slice."""
    if args.ray_address or args.coordinator or args.backend != "jax":
        raise GeosimError("--hosts wan starts its own processes: no --ray-address, --coordinator or --backend alpa",
                          key="--hosts")
    if args.scenario:
        raise GeosimError("--hosts wan records the emulated slice itself: drop --scenario", key="--scenario")
    from geosim.live.experiments import wan_runs

    try:
        run = wan_runs.run_on_wan(opts, cpu_devices=args.cpu_devices or 1, timeout_s=args.timeout,
                                  log=lambda line: print(line, file=sys.stderr))
    except KeyboardInterrupt:  # nothing is half-written: process 0's record never reached us
        from geosim.live.train import interrupts

        print("interrupted: the processes on the WAN slice were stopped; no record written", file=sys.stderr)
        return interrupts.exit_code()
    from geosim.live.train.loop import Result

    record = validate(run.record, "geosim live run --hosts wan")
    per_host = [len(h["gpus"]) for h in record.cluster["hosts"]]
    result = Result(status=record.status, error=record.error, losses=run.losses, step_times=run.step_times,
                    devices={"platform": "cpu", "count": sum(per_host), "processes": len(per_host), "per_host": per_host})
    _report(result, record, args)
    from geosim.live.train import interrupts

    with interrupts.writing_record():
        _save(record, result, args, opts)
        interrupts.mark_recorded()
    return {"ok": 0, "interrupted": interrupts.exit_code()}.get(record.status, 1)


def _run_here(args, opts):
    from geosim.live.train import distributed

    cpu_devices = args.cpu_devices
    if cpu_devices is None and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        cpu_devices = os.cpu_count() or 1

    require("jax", extra="live", command="geosim live run")
    distributed.configure_cpu_devices(cpu_devices)
    if args.coordinator:
        if not 0 <= args.process_id < args.num_processes:
            raise GeosimError(f"must be in 0..{args.num_processes - 1}", key="--process-id")
        distributed.initialize(args.coordinator, args.num_processes, args.process_id, args.gloo_interface)
    from geosim.live.train.loop import run

    log = (lambda line: print(line, file=sys.stderr)) if args.process_id == 0 else None
    result = run(opts, log=log)
    from geosim.live.train import interrupts

    if args.coordinator and not interrupts.hard_exit_needed():  # (an abandoned compilation: the process just ends)
        import jax

        jax.distributed.shutdown()
    impl = distributed.collective_impl(result.devices["platform"], result.devices["processes"])
    return (result if args.process_id == 0 else None), impl, None, "jax"


def _run_ray(args, opts):
    from geosim.live.train import distributed
    from geosim.live.train.loop import UNKNOWN_DEVICES, Result

    env = {"NCCL_SOCKET_IFNAME": args.nccl_interface} if args.nccl_interface else {}
    try:
        result_dict, hosts = distributed.run_on_ray(args.ray_address, opts, args.hosts, args.cpu_devices,
                                                    args.gloo_interface, env, args.timeout)
    except KeyboardInterrupt:
        # the workers are gone with their partial measurements; record that the run was cut short
        return Result(status="interrupted", error="interrupted before the workers reported",
                      devices=dict(UNKNOWN_DEVICES)), None, None, "jax"
    except GeosimError:
        raise
    except Exception as exc:  # a worker died (out of host memory, a lost node): record it
        from geosim.live.train.loop import is_out_of_memory

        status = "out-of-memory" if is_out_of_memory(exc) else "failed"
        first = (str(exc).strip().splitlines() or [""])[-1]
        return Result(status=status, error=f"{type(exc).__name__}: {first}"[:500],
                      devices=dict(UNKNOWN_DEVICES)), None, None, "jax"
    result = Result(**result_dict)
    impl = distributed.collective_impl(result.devices["platform"], result.devices["processes"])
    return result, impl, hosts, "jax"


def _report(result, record, args):
    if args.json:
        doc = json.loads(record.to_json())
        doc["losses"] = result.losses
        doc["step_times_s"] = [round(t, 6) for t in result.step_times]
        print(json.dumps(doc, indent=2, allow_nan=False))
        sys.stdout.flush()
        return
    m = record.measured
    print(f"{record.technique} on {result.devices.get('count', '?')} {result.devices.get('platform', '?')} device(s), "
          f"model {record.model}: {record.status}" + (f" ({record.error})" if record.error else ""))
    if result.losses:
        print(f"  loss            {result.losses[0]:.4f} -> {result.losses[-1]:.4f} over {len(result.losses)} steps")
    for key, label, fmt in (("time_per_iteration_s", "step time", "{:.4f} s"), ("tokens_per_s", "tokens/s", "{:.0f}"),
                            ("tflops_per_gpu", "TFLOP/s/device", "{:.4f}"), ("compile_time_s", "compile", "{:.2f} s"),
                            ("peak_memory_gib", "peak memory", "{:.2f} GiB"), ("total_time_s", "total", "{:.2f} s")):
        if key in m:
            print(f"  {label:<15} {fmt.format(m[key])}")
    print(f"  collectives     {record.collective_impl}")
    sys.stdout.flush()


def _probe(args) -> int:
    from geosim.live.wan.agent import probe, write_scenario

    check_appendable(args.out, "--out")  # (--seconds, --streams, --pings: geosim/base/validate.py's bounds)
    check_reachable(args.ray_address, "--ray-address")
    result = probe(args.ray_address, seconds=args.seconds, streams=args.streams, pings=args.pings,
                   log=lambda line: print(line, file=sys.stderr))
    write_scenario(result, args.out, name=args.name)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for link in result["links"]:
            print(f"{link['a']} <-> {link['b']}: rtt {link['rtt_ms']:.3f} ms, 1 stream {link['single_gbps']:.2f} Gbit/s, "
                  f"{link['streams']} streams {link['multi_gbps']:.2f} Gbit/s")
        print(f"wrote {args.out} ({len(result['hosts'])} hosts, {len(result['links'])} links)")
    return 0
