"""Sockets bind only the address asked for: during a two-process run over loopback, every
listening TCP socket of both processes (the JAX coordinator, gloo's pairs) is on 127.0.0.1."""

import os
import socket
import subprocess
import sys
import time

import pytest

ENV = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, ENV.get("PYTHONPATH")) if p)


def _hex_address(text: str) -> str:
    """/proc/net/tcp's local address (little-endian hex) -> dotted or IPv6 text."""
    host, port = text.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return f"{socket.inet_ntop(socket.AF_INET, raw[::-1])}:{int(port, 16)}"
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    if words[:12] == b"\0" * 10 + b"\xff\xff":  # an IPv4 address on a dual-stack socket (gRPC's)
        return f"{socket.inet_ntop(socket.AF_INET, words[12:])}:{int(port, 16)}"
    return f"[{socket.inet_ntop(socket.AF_INET6, words)}]:{int(port, 16)}"


def listening(pid: int) -> set[str]:
    """Local addresses of the TCP sockets process `pid` holds in LISTEN state."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        found = set()
        for table in ("tcp", "tcp6"):
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                        found.add(_hex_address(cols[1]))
        return found
    except OSError:  # the process exited meanwhile
        return set()


def test_hex_address():
    assert _hex_address("0100007F:1F90") == "127.0.0.1:8080"
    assert _hex_address("00000000:0016") == "0.0.0.0:22"
    assert _hex_address("0000000000000000FFFF00000100007F:0050") == "127.0.0.1:80"
    assert _hex_address("00000000000000000000000000000000:0050") == "[::]:80"


@pytest.mark.slow
def test_two_process_run_listens_only_on_loopback(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    common = [sys.executable, "-m", "geosim", "live", "run", "--technique", "data", "--steps", "6", "--gpus-per-host",
              "1", "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"]
    procs = [subprocess.Popen(common + ["--process-id", str(i)], env=ENV, cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    seen: dict[int, set[str]] = {0: set(), 1: set()}
    try:
        deadline = time.time() + 240
        while any(p.poll() is None for p in procs) and time.time() < deadline:
            for i, p in enumerate(procs):
                seen[i] |= listening(p.pid)
            time.sleep(0.05)
        errs = [p.communicate(timeout=60)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], errs[0][-1500:] + errs[1][-1500:]
    assert f"127.0.0.1:{port}" in seen[0]  # the coordinator, on the address asked for
    everything = seen[0] | seen[1]
    assert everything and all(a.startswith("127.0.0.1:") for a in everything), everything
