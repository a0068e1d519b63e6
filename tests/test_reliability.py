"""Issue 22: no orphans after a hard kill, a rendezvous store only this machine can reach."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import psutil
import pytest

from parlab.core.launch import launch
from parlab.core.rendezvous import LoopbackStore
from tests import workers_reliability as workers
from tests.helpers import living

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("sig,start_method", [(signal.SIGKILL, "forkserver"),
                                              (signal.SIGTERM, "forkserver"),
                                              (signal.SIGKILL, "spawn")])
def test_a_hard_kill_of_the_launcher_leaves_no_process_behind(tmp_path, sig, start_method):
    """kill -9 / SIGTERM of the launching process: every rank, the forkserver and the resource
    tracker are gone within 5 s (before the fix they trained on until the run ended)."""
    base = str(tmp_path / "pid")
    code = ("from parlab.core.launch import launch\nfrom tests import workers_reliability as w\n"
            f"launch(w.pid_then_train, 2, {base!r}, timeout=300, start_method={start_method!r})\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=str(ROOT),
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not all(os.path.exists(f"{base}.{r}") for r in range(2)):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
        time.sleep(0.3)  # the ranks are inside their all-reduce loop
        descendants = psutil.Process(proc.pid).children(recursive=True)
        ranks = {int(open(f"{base}.{r}").read()) for r in range(2)}
        assert ranks <= {p.pid for p in descendants}
        proc.send_signal(sig)
        proc.wait(timeout=30)
        t0 = time.monotonic()
        while living(descendants) and time.monotonic() - t0 < 5:
            time.sleep(0.05)
        left = [(p.pid, " ".join(p.cmdline())[:80]) for p in living(descendants)]
        assert not left, f"still alive {time.monotonic() - t0:.1f} s after the kill: {left}"
    finally:
        for p in living(psutil.Process(proc.pid).children(recursive=True)
                         if proc.poll() is None else []):
            p.kill()
        if proc.poll() is None:
            proc.kill()


def _listening(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp{,6} writes them) in state LISTEN on `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                address, hex_port = fields[1].rsplit(":", 1)
                if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: TCP_LISTEN
                    found.append(address)
    return found


def test_the_rendezvous_store_listens_on_loopback_only():
    store = LoopbackStore(2, timeout=10)
    try:
        # 127.0.0.1 is 0100007F in /proc/net/tcp; '*' would be 00000000 (or :: in tcp6)
        assert _listening(store.port) == ["0100007F"]
    finally:
        store.close()


def test_a_running_launch_listens_on_loopback_only():
    for addresses in launch(workers.listening_addresses, 2, os.getpid(), timeout=120):
        assert addresses, "the launcher's store was not found listening"
        assert all(ip == "127.0.0.1" for ip, _ in addresses), addresses


# `make lab` (loopback only, --allow-root as root, a token that logs in and is never in argv):
# tests/test_lab.py, which starts the real server (issue 35 moved the token out of argv).
