"""`geosim fabric calibrate`: install geosim on every VM of a slice, start Ray over the data plane,
probe the network, run each technique, and bring the run records home.

Every step records what it finished in a state file next to the work directory, so a
re-run skips what is done and picks up where a failure stopped it (`--redo STEP` forces
one again). Each step only uses a node's execute/upload/download (geosim.fabric.nodes), so
the emulated slice in the tests runs the same commands a FABRIC VM would.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from geosim.base.errors import GeosimError, require
from geosim.base.fileio import write_atomic
from geosim.base.input_limits import read_json_file
from geosim.fabric.nodes import Node, Result
from geosim.techniques import STUDY_ORDER

STEPS = ("bootstrap", "install", "ray", "probe", "runs", "fetch")
TECHNIQUES = STUDY_ORDER  # what a calibration runs by default: the study's four
RAY_PORT = 6379
REMOTE_DIR = "~/geosim"  # on every node: dist/ (the wheel), lib/ (geosim), run/ (probe, records, logs)
# Ray >= 2.5x authenticates with a token each joining node would need; the cluster binds the
# data-plane addresses only (a private L2 network between the slice's VMs), so it is turned off
RAY_ENV = "RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0"


@dataclass
class CalibrateOptions:
    model: str = "tiny"
    steps: int = 20
    batch: int = 8
    techniques: tuple[str, ...] = TECHNIQUES
    ray_port: int = RAY_PORT
    cpu_devices: int | None = None  # per process, for VMs without GPUs (the emulator)
    probe_seconds: float = 3.0
    run_timeout_s: float = 3600.0
    wheel: str | None = None  # a geosim wheel to install (default: built from this checkout)
    extra_run_args: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class Calibration:
    """The steps, run against `nodes` (node 0 is Ray's head and runs the probe and the runs)."""

    nodes: list[Node]
    workdir: Path  # here: the state file, the wheel, and what is brought home
    options: CalibrateOptions = field(default_factory=CalibrateOptions)
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
    dry_run: bool = False
    name: str = "slice"  # the slice's name: the probed scenario takes it
    planned: list[tuple[str, str]] = field(default_factory=list)  # (node, command) in a dry run

    def __post_init__(self):
        self.workdir = Path(self.workdir)
        if not self.nodes:
            raise GeosimError("the slice has no nodes", key="nodes")

    # -- state ------------------------------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.workdir / "calibrate-state.json"

    def load_state(self) -> dict:
        if not self.state_path.exists():  # the first run (the one reader calls a missing file an error)
            return {"done": {}}
        try:
            return read_json_file(self.state_path)
        except json.JSONDecodeError as exc:
            raise GeosimError(f"not valid JSON ({exc}); delete it to start over", source=str(self.state_path)) from None

    def save_state(self, state: dict) -> None:
        try:  # the work directory itself, never its missing parents
            self.workdir.mkdir(exist_ok=True)
        except FileNotFoundError:
            raise GeosimError(f"no such directory {str(self.workdir.parent)!r}", source="--workdir") from None
        write_atomic(self.state_path, json.dumps(state, indent=2, allow_nan=False))

    # -- running commands -------------------------------------------------------------------------
    def run(self, node: Node, command: str, what: str, timeout: float | None = 600, check: bool = True) -> Result:
        if self.dry_run:
            self.planned.append((node.name, command))
            return Result(0, "", "")
        self.log(f"[{node.name}] {what}")
        result = node.execute(command, timeout=timeout)
        if check and not result.ok:
            tail = (result.stderr.strip() or result.stdout.strip())[-1500:]
            raise StepFailed(f"{node.name}: {what} failed (exit {result.returncode}): {tail}")
        return result

    def geosim(self, node: Node, args: str) -> str:
        return f"{RAY_ENV} PYTHONPATH={REMOTE_DIR}/lib {node.python} -m geosim {args}"

    # -- the steps --------------------------------------------------------------------------------
    def calibrate(self, redo: tuple[str, ...] = (), only: tuple[str, ...] | None = None) -> dict:
        for name in (*redo, *(only or ())):
            if name not in STEPS:
                raise GeosimError(f"unknown step {name!r} (steps: {', '.join(STEPS)})", source="--redo/--only")
        state = self.load_state() if not self.dry_run else {"done": {}}
        for name in redo:
            state["done"].pop(name, None)
            if name == "runs":
                state.pop("runs", None)
        for name in STEPS:
            if only and name not in only:
                continue
            if name == "ray" and name in state["done"] and not self.dry_run and self.ray_nodes_alive() < len(self.nodes):
                self.log("step ray: done before, but Ray is not up on every node now: starting it again")
                state["done"].pop("ray")
            if name in state["done"] and not self.dry_run:
                self.log(f"step {name}: done at {state['done'][name]['when']}, skipped (--redo {name} runs it again)")
                continue
            started = time.time()
            outcome = getattr(self, f"step_{name}")(state) or {}
            if not self.dry_run:
                state["done"][name] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                       "seconds": round(time.time() - started, 1), **outcome}
                self.save_state(state)
        return state

    def step_bootstrap(self, state: dict) -> dict:
        for node in self.nodes:
            if node.bootstrap:
                self.run(node, node.bootstrap, "bootstrap: a Python for geosim", timeout=1200)
        return {}

    def step_install(self, state: dict) -> dict:
        wheel = Path(self.options.wheel) if self.options.wheel else build_wheel(self.workdir, dry_run=self.dry_run)
        requirements = wheel_requirements(wheel, extra="live") if not self.dry_run else ["<geosim's [live] deps>"]
        remote_wheel = f"{REMOTE_DIR}/dist/{wheel.name}"
        for node in self.nodes:
            self.run(node, f"mkdir -p {REMOTE_DIR}/dist {REMOTE_DIR}/run", "make directories")
            if self.dry_run:
                self.planned.append((node.name, f"upload {wheel} -> {remote_wheel}"))
            else:
                self.log(f"[{node.name}] upload {wheel.name}")
                node.upload(wheel, remote_wheel)
            reqs = requirements + (["jax[cuda12]"] if node.gpus else [])
            self.run(node, f"{node.python} -m pip install -q {' '.join(shlex.quote(r) for r in reqs)}",
                     "install geosim's dependencies", timeout=3600)
            self.run(node, f"{node.python} -m pip install -q --no-deps --upgrade --target {REMOTE_DIR}/lib "
                           f"{remote_wheel}", f"install {wheel.name}", timeout=600)
            self.run(node, self.geosim(node, "--version"), "check the install")
        return {"wheel": wheel.name}

    @property
    def tag(self) -> str:
        import hashlib

        return hashlib.sha1(str(self.workdir.resolve()).encode()).hexdigest()[:6]

    def head(self) -> str:
        return f"{self.nodes[0].address}:{self.options.ray_port}"

    def _ray(self, node: Node, args: str) -> str:
        return f"{RAY_ENV} PYTHONPATH={REMOTE_DIR}/lib {node.python} -m ray.scripts.scripts {args}"

    def ray_nodes_alive(self) -> int:
        code = f"import ray; ray.init(address={self.head()!r}, logging_level='ERROR'); print(sum(n['Alive'] for n in ray.nodes()))"
        result = self.run(self.nodes[0], f"{RAY_ENV} timeout 60 {self.nodes[0].python} -c {shlex.quote(code)}",
                          "count Ray's nodes", timeout=90, check=False)
        lines = result.stdout.strip().splitlines()
        return int(lines[-1]) if result.ok and lines and lines[-1].isdigit() else 0

    def step_ray(self, state: dict) -> dict:
        n = len(self.nodes)
        if not self.dry_run and self.ray_nodes_alive() == n:
            self.log(f"Ray: {n} nodes already up at {self.head()}")
            return {"head": self.head()}
        head = self.nodes[0]
        cpus = "--num-cpus 1 " if not head.gpus else ""
        for i, node in enumerate(self.nodes):
            # nodes sharing a machine keep their Ray session apart, each in a directory only this user can
            # enter (mkdtemp: Ray makes its own temp directory world-writable, so it goes inside one);
            # short: Ray's socket paths have a length limit
            temp = f"--temp-dir {self._private_temp(i)} " if not node.owns_machine else ""
            if node.owns_machine:  # a VM of its own: a clean start (never on a shared machine: see nodes.Node)
                self.run(node, self._ray(node, "stop"), "stop an old Ray", check=False)
            if i == 0:
                args = (f"start --head --node-ip-address {node.address} --port {self.options.ray_port} {cpus}{temp}"
                        "--include-dashboard false --disable-usage-stats")
            else:
                args = f"start --address {self.head()} --node-ip-address {node.address} {cpus}--disable-usage-stats"
            self.run(node, self._ray(node, args), f"start Ray ({'head' if i == 0 else 'join ' + self.head()})",
                     timeout=180)
        if self.dry_run:
            return {}
        deadline = time.time() + 120
        while (alive := self.ray_nodes_alive()) < n:
            if time.time() > deadline:
                raise StepFailed(f"Ray: {alive} of {n} nodes joined {self.head()} within 2 minutes")
            time.sleep(2)
        return {"head": self.head()}

    def _private_temp(self, i: int) -> str:
        if self.dry_run:
            return f"/tmp/gray-{self.tag}-{i}-XXXXXXXX/r"
        return os.path.join(tempfile.mkdtemp(prefix=f"gray-{self.tag}-{i}-", dir="/tmp"), "r")

    def step_probe(self, state: dict) -> dict:
        head = self.nodes[0]
        remote = f"{REMOTE_DIR}/run/probed.toml"
        self.run(head, self.geosim(head, f"live probe --ray-address {self.head()} --out {remote} --name "
                                         f"{shlex.quote(self.name)} --seconds {self.options.probe_seconds}"),
                 "geosim live probe (RTT, throughput between the VMs)", timeout=600)
        if not self.dry_run:
            self._fetch(head, remote, self.workdir / "probed.toml")
        return {"scenario": "probed.toml"}

    def step_runs(self, state: dict) -> dict:
        head = self.nodes[0]
        done = state.setdefault("runs", {})
        o = self.options
        for technique in o.techniques:
            if technique in done and not self.dry_run:
                self.log(f"run {technique}: done ({done[technique]}), skipped")
                continue
            args = (f"live run --technique {technique} --model {o.model} --steps {o.steps} --global-batch {o.batch} "
                    f"--ray-address {self.head()} --scenario {REMOTE_DIR}/run/probed.toml "
                    f"--records-out {REMOTE_DIR}/run/runs-{technique}.jsonl --gloo-interface {head.interface} "
                    f"--timeout {o.run_timeout_s:g}"
                    + (f" --gpus-per-host {o.cpu_devices}" if o.cpu_devices else "")
                    + (f" --nccl-interface {head.interface}" if head.gpus else "")  # NCCL over the data plane
                    + "".join(f" {shlex.quote(a)}" for a in o.extra_run_args))
            log = f"{REMOTE_DIR}/run/{technique}.log"
            # a run that fails records its failure (status != ok) and exits 1: the record still counts
            result = self.run(head, f"{self.geosim(head, args)} > {log} 2>&1; rc=$?; tail -5 {log}; exit $rc",
                              f"geosim live run --technique {technique}", timeout=o.run_timeout_s + 300, check=False)
            if self.dry_run:
                continue
            local = self.workdir / "records" / f"runs-{technique}.jsonl"
            try:
                self._fetch(head, f"{REMOTE_DIR}/run/runs-{technique}.jsonl", local)
            except (FileNotFoundError, OSError, StepFailed) as exc:
                raise StepFailed(f"run {technique} left no record (exit {result.returncode}): "
                                 f"{(result.stdout + result.stderr).strip()[-1500:]}") from exc
            done[technique] = f"exit {result.returncode}"
            self.save_state(state)
        return {"techniques": list(o.techniques)}

    def step_fetch(self, state: dict) -> dict:
        """One records file for `geosim calibrate fit`: each technique's latest record, in order."""
        if self.dry_run:
            return {}
        lines = []
        for technique in self.options.techniques:
            path = self.workdir / "records" / f"runs-{technique}.jsonl"
            if path.exists():
                records = [line for line in path.read_text().splitlines() if line.strip()]
                lines += records[-1:]
        out = self.workdir / "runs.jsonl"
        write_atomic(out, "".join(line + "\n" for line in lines))
        self.log(f"{len(lines)} run record(s) in {out}")
        return {"records": "runs.jsonl", "count": len(lines)}

    def _fetch(self, node: Node, remote: str, local: Path) -> None:
        self.log(f"[{node.name}] download {remote}")
        node.download(remote, local)


class StepFailed(GeosimError):
    """A step failed on a node: what ran, where, and its output's tail. Re-running resumes here."""


def checkout_root() -> Path | None:
    """The source checkout geosim runs from, if it is one (a pyproject.toml beside the package)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "geosim").is_dir() else None


def build_wheel(workdir: Path, dry_run: bool = False) -> Path:
    root = checkout_root()
    if root is None:
        raise GeosimError("geosim is not running from a source checkout: pass --wheel (a geosim wheel to install)",
                          source="--wheel")
    out = Path(workdir) / "dist"
    if dry_run:
        return out / "geosim-<version>-py3-none-any.whl"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp, str(root)],
                              capture_output=True, text=True)
        if done.returncode:
            raise GeosimError(f"could not build a wheel of {root}: {done.stderr.strip()[-800:]}", source="--wheel")
        (built,) = Path(tmp).glob("geosim-*.whl")
        target = out / built.name
        os.replace(built, target)
    return target


def wheel_requirements(wheel: Path, extra: str) -> list[str]:
    """The wheel's own Requires-Dist: its base dependencies and those of `extra`, markers resolved."""

    Requirement = require("packaging.requirements", extra="fabric", command="geosim fabric calibrate").Requirement

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    out = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is None or req.marker.evaluate({"extra": extra}):
            if req.name != "geosim":
                req.marker = None
                out.append(str(req))
    return out
