"""Issue 35, item 6: `make lab` prints a URL that logs the user in, keeps the token out of argv
(/proc/PID/cmdline is world-readable), and binds 127.0.0.1 only (tools/lab.py)."""

from __future__ import annotations

import http.cookiejar
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psutil
import pytest

from tests.helpers import living

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytest.importorskip("jupyterlab")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_lab_recipe_calls_the_script_with_no_token():
    done = subprocess.run(["make", "-n", "-o", ".venv/.installed", "lab"], cwd=str(ROOT),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "tools/lab.py notebooks/" in done.stdout and "token" not in done.stdout.lower()


def test_lab_prints_a_url_that_logs_in_and_keeps_the_token_out_of_argv(tmp_path):
    port = _free_port()
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
    proc = subprocess.Popen(
        [sys.executable, "tools/lab.py", "notebooks/", "--no-browser", f"--ServerApp.port={port}",
         "--ServerApp.port_retries=0"], cwd=str(ROOT), env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    family = []
    try:
        url, log, deadline = None, [], time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            log.append(line)
            found = re.search(r"parlab lab: open (\S+)", line)
            url = found.group(1) if found else None
        assert url, "".join(log)
        assert re.fullmatch(rf"http://127\.0\.0\.1:{port}/lab\?token=[\w-]{{32,}}", url), url
        token = url.split("token=", 1)[1]

        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        for p in family:  # nobody's argv holds the token (what any local user can read)
            assert token not in open(f"/proc/{p.pid}/cmdline").read()
        server = psutil.Process(proc.pid).children()[0]
        cmdline = server.cmdline()
        assert "--ServerApp.ip=127.0.0.1" in cmdline
        assert ("--allow-root" in cmdline) == (os.geteuid() == 0)
        listening = [c.laddr for c in server.net_connections(kind="inet") if c.status == "LISTEN"]
        assert listening and all(a.ip == "127.0.0.1" for a in listening), listening

        # the printed URL logs in: its cookie then opens the API; without it, 403
        opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        assert opener.open(url, timeout=30).status == 200
        assert b"last_activity" in opener.open(f"http://127.0.0.1:{port}/api/status", timeout=30).read()
        with pytest.raises(urllib.error.HTTPError, match="403"):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=30)
        bad = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        try:
            bad.open(url.replace(token, "x" * len(token)), timeout=30)  # a wrong token: no login
        except urllib.error.HTTPError:
            pass
        with pytest.raises(urllib.error.HTTPError, match="403"):
            bad.open(f"http://127.0.0.1:{port}/api/status", timeout=30)
        # the server got the token from a 0600 file, deleted once it had started
        environ = dict(item.split("=", 1) for item in
                       open(f"/proc/{server.pid}/environ").read().split("\0") if "=" in item)
        assert "JUPYTER_TOKEN" not in environ and not os.path.exists(environ["JUPYTER_TOKEN_FILE"])
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        t0 = time.monotonic()
        while living(family[1:]) and time.monotonic() - t0 < 10:
            time.sleep(0.1)
        left = living(family[1:])
        for p in left:
            p.kill()
        assert not left, [p.cmdline() for p in left]
