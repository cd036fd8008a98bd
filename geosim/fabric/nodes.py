"""The seam between the calibrate steps and a machine: run a command, copy a file in, copy one out.

Two implementations:
- FablibNode: a FABRIC VM, through fablib's Node (SSH via FABRIC's bastion).
- NetnsNode: a host of the WAN emulator (`geosim live wan`), through `ip netns exec`, each
  with its own home directory, standing in for a VM on this machine.

The steps (geosim.fabric.steps) only ever use `execute`, `upload` and `download`, so what
runs against the emulator is what would run on FABRIC, command for command.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from geosim.base.fileio import write_atomic


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class Node(Protocol):
    name: str  # the VM's name in the slice (the scenario's host name)
    site: str
    address: str  # data-plane address: Ray, gloo and the probe use it
    interface: str  # data-plane interface (gloo binds to it)
    python: str  # the interpreter that runs geosim there, after bootstrap
    bootstrap: str  # shell command that makes `python` exist (empty when it does)
    gpus: int
    # False where several nodes share one machine (the emulator): a machine-wide `ray stop`
    # there would end other nodes' (and other users') Ray processes
    owns_machine: bool

    def execute(self, command: str, timeout: float | None = None) -> Result: ...

    def upload(self, local: str | Path, remote: str) -> None: ...

    def download(self, remote: str, local: str | Path) -> None: ...


RC_MARK = "__geosim_rc="


@dataclass
class FablibNode:
    """A FABRIC VM. `fablib_node` is fablib's Node (slice.get_node(name)); needs the testbed."""

    fablib_node: object
    name: str
    site: str
    address: str
    interface: str
    gpus: int
    python: str = "~/geosim-venv/bin/python"
    # Ubuntu 24.04's Python 3.12 is externally managed: geosim goes into a venv of its own
    bootstrap: str = ("command -v python3 >/dev/null && python3 -m venv --help >/dev/null 2>&1 || "
                      "(sudo apt-get update -q && sudo apt-get install -y -q python3-venv python3-pip); "
                      "test -x ~/geosim-venv/bin/python || python3 -m venv ~/geosim-venv")
    owns_machine: bool = True

    def execute(self, command: str, timeout: float | None = None) -> Result:
        # fablib returns (stdout, stderr) and no exit status: the command reports it on its last line
        wrapped = f"bash -lc {shlex.quote(command)}; echo {RC_MARK}$?"
        stdout, stderr = self.fablib_node.execute(wrapped, quiet=True, timeout=timeout, retry=3)
        return _split_rc(stdout, stderr)

    def upload(self, local: str | Path, remote: str) -> None:
        self.fablib_node.upload_file(str(local), remote)

    def download(self, remote: str, local: str | Path) -> None:
        self.fablib_node.download_file(str(local), remote)


def _split_rc(stdout: str, stderr: str) -> Result:
    lines = stdout.rstrip("\n").split("\n")
    if lines and lines[-1].startswith(RC_MARK):
        return Result(int(lines[-1][len(RC_MARK):]), "\n".join(lines[:-1]) + "\n", stderr)
    return Result(255, stdout, stderr + "\n(no exit status: the connection dropped?)")


@dataclass
class NetnsNode:
    """A host of the WAN emulator: commands run in its namespace with HOME = its own directory.

    The namespaces share this machine's file system and Python, so `python` is this
    interpreter (it has geosim's dependencies) and `bootstrap` is empty; geosim itself is
    still installed from the wheel into the node's own home, as on a VM.
    """

    namespace: str
    name: str
    site: str
    address: str
    interface: str
    home: Path
    python: str
    gpus: int = 0
    bootstrap: str = ""
    owns_machine: bool = False
    extra_env: dict | None = None

    def __post_init__(self):
        self.home = Path(self.home)
        self.home.mkdir(parents=True, exist_ok=True)

    def _env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLA_FLAGS", "VIRTUAL_ENV")}
        env.update(HOME=str(self.home), **(self.extra_env or {}))
        return env

    def execute(self, command: str, timeout: float | None = None) -> Result:
        argv = ["ip", "netns", "exec", self.namespace, "bash", "-c", command]
        try:
            done = subprocess.run(argv, cwd=self.home, env=self._env(), capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            return Result(124, out, f"timed out after {timeout} s")
        return Result(done.returncode, done.stdout, done.stderr)

    def _path(self, remote: str) -> Path:
        path = Path(remote.replace("~", str(self.home), 1) if remote.startswith("~") else remote)
        return path if path.is_absolute() else self.home / path

    def upload(self, local: str | Path, remote: str) -> None:
        target = self._path(remote)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, Path(local).read_bytes())  # mkstemp, not a fixed name someone could plant

    def download(self, remote: str, local: str | Path) -> None:
        source = self._path(remote)
        if not source.is_file():
            raise FileNotFoundError(f"{self.name}: {remote}")
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(local, source.read_bytes())
