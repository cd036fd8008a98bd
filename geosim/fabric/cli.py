"""`geosim fabric`: turn a scenario into a FABRIC slice, calibrate on it, delete it.

    geosim fabric slice create --scenario SCENARIO [--dry-run]   request -> submit -> configure -> realised scenario + slice file
    geosim fabric slice emulate --scenario SCENARIO --wan-state F a slice file for the WAN emulator's namespaces (a rehearsal)
    geosim fabric calibrate SLICE [--dry-run]         install, Ray, probe, one run per technique, records home
    geosim fabric slice delete SLICE [--dry-run]

fablib (the `fabric` extra) is imported only inside run(): `geosim --help` never loads it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from geosim.cli.common import LIVE_RUN_SIZE_BOUNDS, add_json_argument, add_technique_argument
from geosim.cli.vocabulary import add_renamed, deprecate
from geosim.base.errors import GeosimError, require
from geosim.techniques import is_low_communication, is_pipelined, technique_names

HELP = "provision a FABRIC slice from a scenario (fablib), calibrate on it, bring the run records home"

# every numeric flag's bound, checked before the command runs (geosim/base/validate.py check_flags): a calibration
# on a slice is live runs and probes, bounded as theirs
FLAG_BOUNDS = {"fabric calibrate": {"--steps": LIVE_RUN_SIZE_BOUNDS["--steps"],
                                    "--global-batch": LIVE_RUN_SIZE_BOUNDS["--global-batch"],
                                    "--gpus-per-host": LIVE_RUN_SIZE_BOUNDS["--gpus-per-host"],
                                    "--probe-seconds": LIVE_RUN_SIZE_BOUNDS["--seconds"]}}


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="fabric_command", metavar="{slice,calibrate}")
    sub.required = True
    slice_p = sub.add_parser("slice", help="create, emulate or delete a slice")
    slice_sub = slice_p.add_subparsers(dest="slice_command", metavar="{create,emulate,delete}")
    slice_sub.required = True

    create = slice_sub.add_parser("create", help="a scenario as a FABRIC slice: request, submit, configure, measure",
                                  description="Build the slice request with fablib (one VM per scenario host at its "
                                              "site, GPUs as components, L2Bridge/L2STS/FABNetv4), submit it, wait, "
                                              "address the data plane, ping between the VMs, and write the realised "
                                              "scenario (OUT.toml) and the slice file (OUT.slice.json). Re-running "
                                              "reuses the slice.")
    create.add_argument("--scenario", metavar="NAME|FILE",
                        help="scenario file or built-in name (hosts name FABRIC sites; required)")
    create.add_argument("old_scenario", nargs="?", metavar="SCENARIO", help=argparse.SUPPRESS)  # the old positional
    _request_arguments(create)
    create.add_argument("--dry-run", action="store_true", help="print the request fablib would submit; submit nothing")
    create.add_argument("--graphml", metavar="FILE", help="also write the request as FABRIC's GraphML (dry run too)")
    add_json_argument(create)

    emulate = slice_sub.add_parser("emulate", help="a slice file for the WAN emulator's hosts (rehearse calibrate)",
                                   description="Write a slice file whose VMs are the hosts of an emulated WAN "
                                               "(`geosim live wan up --host-count N --rtt-ms R`, root), so `geosim fabric "
                                               "calibrate` runs its steps there, command for command.")
    emulate.add_argument("--scenario", metavar="NAME|FILE",
                         help="scenario file or built-in name the emulated slice stands for (required)")
    emulate.add_argument("old_scenario", nargs="?", metavar="SCENARIO", help=argparse.SUPPRESS)  # the old positional
    _request_arguments(emulate)
    emulate.add_argument("--wan-state", default="/run/geosim-wan/state.json",
                         help="the emulator's state file (default: %(default)s)")
    emulate.add_argument("--homes", help="directory for the emulated VMs' home directories (default: OUT.homes)")
    add_json_argument(emulate)

    delete = slice_sub.add_parser("delete", help="delete a slice (by slice file or name)")
    delete.add_argument("slice", metavar="SLICE", help="slice file, realised scenario, or the slice's name")
    delete.add_argument("--dry-run", action="store_true", help="print what would be deleted; delete nothing")

    cal = sub.add_parser("calibrate", help="install geosim on the slice, start Ray, probe, run each technique, "
                                           "bring the records home",
                         description="Steps (each resumable; a re-run skips what is done): " +
                                     "bootstrap, install, ray, probe, runs, fetch. The records end in "
                                     "WORKDIR/runs.jsonl, ready for `geosim calibrate fit`.")
    cal.add_argument("slice", metavar="SLICE", nargs="?", help="slice file (or the realised scenario beside it)")
    cal.add_argument("--scenario", metavar="FILE",
                     help="the realised scenario `fabric slice create` wrote (the slice file beside it is used), "
                          "instead of SLICE")
    cal.add_argument("--workdir", help="where state and records go (default: SLICE's directory/<slice>-calibrate)")
    cal.add_argument("--model", default="tiny", help="model for the runs (default: %(default)s; gpt2m on real GPUs)")
    cal.add_argument("--steps", type=int, default=20, help="training steps per run (default: %(default)s)")
    cal.add_argument("--global-batch", type=int, default=8, help="sequences per step (default: %(default)s)")
    add_technique_argument(cal, "data,zero2,shard,pipeshard")
    cal.add_argument("--gpus-per-host", dest="cpu_devices", type=int,
                     help="devices per host: JAX CPU devices per process, standing for its GPUs (VMs without GPUs)")
    add_renamed(cal, "--cpu-devices", "--gpus-per-host", dest="cpu_devices", type=int)
    cal.add_argument("--probe-seconds", type=float, default=3.0, help="seconds per throughput test (default: %(default)s)")
    cal.add_argument("--wheel", help="geosim wheel to install (default: built from this checkout)")
    cal.add_argument("--redo", action="append", default=[], metavar="STEP", help="run STEP again even if done")
    cal.add_argument("--only", action="append", metavar="STEP", help="run only these steps")
    cal.add_argument("--dry-run", action="store_true", help="print every command each node would run; run nothing")
    add_json_argument(cal)


def _request_arguments(p) -> None:
    p.add_argument("--name", help="slice name (default geosim-<scenario name>)")
    p.add_argument("--model", default="gpt2m", help="the model the VMs are sized for (default: %(default)s)")
    p.add_argument("--image", help="VM image (default default_ubuntu_24: Python 3.12)")
    p.add_argument("--out", help="realised scenario to write (default ./<slice name>.toml; the slice file beside it)")


def _log(line: str) -> None:
    print(line, file=sys.stderr)


UNTESTED = ("note: this talks to the FABRIC testbed through fablib; geosim's submit/SSH path has not yet been run "
            "against the real testbed (docs/guide/fabric.md, 'What has run where')")


def run(args) -> int:
    if args.fabric_command == "calibrate":
        return _calibrate(args)
    if args.slice_command == "delete":
        return _delete(args)
    from geosim.fabric.request import DEFAULT_IMAGE, request_from_scenario

    from geosim.base.fileio import check_output_path
    from geosim.base.validate import inside

    if args.old_scenario is not None:
        deprecate(args, "the positional SCENARIO is deprecated; use --scenario SCENARIO")
        args.scenario = args.scenario or args.old_scenario
    if not args.scenario:
        raise GeosimError("required: the scenario to provision", source="--scenario")
    if args.name is not None:
        from geosim.base.input_limits import check_name

        check_name(args.name, "--name", "slice name")
    request = request_from_scenario(args.scenario, args.model, args.name, args.image or DEFAULT_IMAGE)
    # the default file is named after the slice, whose name comes from the scenario: it must stay here
    out = check_output_path(args.out, "--out") if args.out else inside(".", f"{request.name}.toml", "the slice name",
                                                                        "--name")
    if getattr(args, "graphml", None):
        check_output_path(args.graphml, "--graphml")
    if args.slice_command == "emulate":
        return _emulate(args, request, out)
    if args.dry_run:
        return _dry_run_create(args, request, out)
    from geosim.fabric import provision
    from geosim.fabric.request import online_fablib

    _log(UNTESTED)
    doc = provision.create(request, online_fablib(), out, _log)
    _print_slice(doc, args.json)
    return 0


def _dry_run_create(args, request, out: Path) -> int:
    from geosim.fabric.request import build_slice, offline_fablib, read_back, request_graphml

    with offline_fablib() as fablib:  # fablib's own classes build the request; nothing leaves this machine
        fslice = build_slice(request, fablib)
        held = read_back(fslice)
        graphml = request_graphml(fslice)
    if args.graphml:
        from geosim.fabric.provision import write_atomic

        write_atomic(Path(args.graphml), graphml)
    if args.json:
        print(json.dumps({"dry_run": True, "request": held, "plan": request.to_dict(), "out": str(out)}, indent=2))
        return 0
    print(f"dry run: slice {held['slice']} as fablib would submit it (nothing submitted)")
    for n in held["nodes"]:
        comps = ", ".join(f"{c['model']} ({c['name']})" for c in n["components"])
        print(f"  VM {n['name']} at {n['site']}: {n['cores']} cores, {n['ram_gb']} GB RAM, {n['disk_gb']} GB disk, "
              f"{n['image']}; components: {comps}")
    for net in held["networks"]:
        print(f"  network {net['name']}: {net['type']} between {', '.join(net['interfaces'])}")
    addresses = ", ".join(f"{n.name} {n.address}" for n in request.nodes if n.address)
    print(f"  then: data-plane addresses {addresses or 'from FABNetv4'}" + (f" ({request.subnet})" if request.subnet else "")
          + f"; ping between the VMs; write {out} and {out.with_name(out.stem + '.slice.json')}")
    print(f"  sizing: {request.sizing}")
    return 0


def _emulate(args, request, out: Path) -> int:
    from geosim.fabric.provision import write_emulated_slice

    from geosim.base.validate import regular_input

    if not Path(args.wan_state).exists():
        raise GeosimError("no emulated WAN is up (`geosim live wan up --host-count N --rtt-ms R`, as root)",
                          source=args.wan_state)
    try:
        from geosim.base.input_limits import read_json_file

        wan = read_json_file(regular_input(args.wan_state, "--wan-state"), args.wan_state)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GeosimError(f"not valid JSON ({exc})", source=args.wan_state) from None
    homes = Path(args.homes) if args.homes else out.with_name(out.stem + ".homes")
    doc = write_emulated_slice(request, wan, out, sys.executable, homes.resolve())
    _print_slice(doc, args.json)
    return 0


def _print_slice(doc: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps({k: v for k, v in doc.items() if not k.startswith("_")} |
                         {"slice_file": doc["_path"], "scenario_file": doc["_scenario"]}, indent=2))
        return
    print(f"slice {doc['slice']} ({doc['kind']}, {doc['service']}):")
    for n in doc["nodes"]:
        print(f"  {n['name']} at {n['site']}: {n['address']} on {n['interface']}")
    for link in doc["links"]:
        print(f"  {link['a']} <-> {link['b']}: {link['rtt_ms']:.2f} ms ({link.get('how', 'measured')})")
    print(f"wrote {doc['_scenario']} and {doc['_path']}")


def _delete(args) -> int:
    from geosim.fabric import provision

    path = Path(args.slice)
    from geosim.base.input_limits import check_name

    name = provision.read_slice_file(path)["slice"] if path.exists() else args.slice
    # a name geosim would not have made (too long, invisible or control characters) names no slice of
    # its own: refused before a dry run prints it or a real one asks FABRIC for it
    check_name(name, str(path) if path.exists() else "SLICE", "slice name")
    if args.dry_run:
        # a dry run contacts nothing, so it cannot know whether the slice exists: it says so
        print(f"dry run: would look up slice {name!r} and delete it if it exists (fablib: get_slice(name={name!r})"
              f".delete()); not looked up")
        return 0
    from geosim.fabric.request import online_fablib

    _log(UNTESTED)
    provision.delete(online_fablib(), name, _log)
    return 0


def _techniques(values) -> tuple[str, ...]:
    from geosim.fabric.steps import TECHNIQUES

    if not values:
        return TECHNIQUES
    names = tuple(t.strip().lower() for v in values for t in v.split(",") if t.strip())
    if "all" in names:  # the calibration's own and every low-communication technique without a pipeline
        every = TECHNIQUES + tuple(t for t in technique_names() if is_low_communication(t) and not is_pipelined(t))
        names = tuple(dict.fromkeys(n for t in names for n in (every if t == "all" else (t,))))
    for t in names:
        if t not in technique_names():  # the one registry: a technique found by its module
            raise GeosimError(f"unknown technique {t!r} (known: {', '.join(technique_names())})", source="--technique")
    return names


def _calibrate(args) -> int:
    from geosim.fabric.provision import nodes_from_slice_file, read_slice_file
    from geosim.fabric.steps import Calibration, CalibrateOptions

    for key in ("steps", "global_batch", "cpu_devices"):
        value = getattr(args, key)
        if value is not None and value <= 0:
            raise GeosimError(f"must be > 0, got {value}", source="--gpus-per-host" if key == "cpu_devices"
                              else "--" + key.replace("_", "-"))
    if bool(args.slice) == bool(args.scenario):
        raise GeosimError("give the slice file (SLICE) or the realised scenario (--scenario), one of them",
                          source="--scenario")
    args.slice = args.slice or args.scenario
    doc = read_slice_file(args.slice)
    fablib = None
    if doc["kind"] == "fablib" and not args.dry_run:
        from geosim.fabric.request import online_fablib

        _log(UNTESTED)
        fablib = online_fablib()
    elif doc["kind"] == "fablib":

        require("fabrictestbed_extensions", extra="fabric", command="geosim fabric calibrate")
    nodes = nodes_from_slice_file(doc, fablib)
    workdir = Path(args.workdir) if args.workdir else Path(doc["_path"]).with_name(f"{doc['slice']}-calibrate")
    options = CalibrateOptions(model=args.model, steps=args.steps, batch=args.global_batch,
                               techniques=_techniques(args.technique), cpu_devices=args.cpu_devices,
                               probe_seconds=args.probe_seconds, wheel=args.wheel)
    calibration = Calibration(nodes, workdir, options, log=_log, dry_run=args.dry_run, name=doc["slice"])
    state = calibration.calibrate(redo=tuple(args.redo), only=tuple(args.only) if args.only else None)
    if args.dry_run:
        if args.json:
            print(json.dumps({"dry_run": True, "commands": [{"node": n, "command": c} for n, c in calibration.planned]},
                             indent=2))
        else:
            print(f"dry run: {len(calibration.planned)} commands on {len(nodes)} node(s) ({doc['kind']} slice "
                  f"{doc['slice']}); nothing run")
            for node, command in calibration.planned:
                print(f"  [{node}] {command}")
        return 0
    records = workdir / "runs.jsonl"
    if args.json:
        print(json.dumps({"workdir": str(workdir), "records": str(records), "state": state}, indent=2))
    else:
        print(f"records: {records} ({state['done'].get('fetch', {}).get('count', 0)} runs); "
              f"next: geosim calibrate fit --records {records} --out params.toml")
    return 0
