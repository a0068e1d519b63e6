"""`make lab`: JupyterLab on 127.0.0.1 only, with a fresh random token kept out of argv, and a
printed URL that logs you in.

    python tools/lab.py [NOTEBOOK_DIR] [extra jupyter lab arguments, e.g. --no-browser]

Why a script: a token given on Jupyter's command line is readable by every local user in
/proc/PID/cmdline, and Jupyter prints such a token as `?token=...` (it masks any token it did not
generate), so on a headless machine the printed URL cannot log anyone in. Here the token goes to
Jupyter through JUPYTER_TOKEN_FILE, a file only this user can read (0600, in a 0700 directory)
and deleted as soon as the server has started; once the server has written its runtime info file
(`jpserver-PID.json`, also 0600) this script prints the URL with the token the server really uses.
The server binds 127.0.0.1 only; as root (most containers) it needs --allow-root, given only then.
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

STARTUP_S = 120.0  # the first start builds JupyterLab's caches


def server_info(pid: int) -> dict | None:
    """The runtime info of the Jupyter server of process `pid`, once it has written it."""
    from jupyter_core.paths import jupyter_runtime_dir

    for path in pathlib.Path(jupyter_runtime_dir()).glob("jpserver-*.json"):
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being written
        if info.get("pid") == pid:
            return info
    return None


def login_url(info: dict) -> str:
    """http://127.0.0.1:PORT/BASE/lab?token=TOKEN: the URL that logs the user in."""
    base = info.get("base_url", "/") or "/"
    return f"http://127.0.0.1:{info['port']}{base}lab?token={info['token']}"


def main(argv: list[str]) -> int:
    notebooks = argv[0] if argv and not argv[0].startswith("-") else "notebooks"
    extra = argv[1:] if argv and not argv[0].startswith("-") else argv
    if any("token" in a.lower() for a in extra):
        print("lab: give no token on the command line (it would be readable in /proc)", file=sys.stderr)
        return 2
    private = tempfile.mkdtemp(prefix="parlab-lab-")  # 0700
    token_file = os.path.join(private, "token")
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(32))
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_TOKEN"}
    env["JUPYTER_TOKEN_FILE"] = token_file
    cmd = [sys.executable, "-m", "jupyterlab", notebooks, "--ServerApp.ip=127.0.0.1", *extra]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    proc = subprocess.Popen(cmd, env=env)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # run the finally
    try:
        deadline = time.monotonic() + STARTUP_S
        info = None
        while info is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            info = server_info(proc.pid)
        shutil.rmtree(private, ignore_errors=True)  # read at start-up: no longer needed
        if info is None:
            if proc.poll() is None:
                print(f"lab: the server wrote no runtime info within {STARTUP_S:g} s", file=sys.stderr)
        else:
            print(f"\n    parlab lab: open {login_url(info)}\n", flush=True)
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:  # Jupyter asks itself; wait for its answer
                continue
    finally:
        shutil.rmtree(private, ignore_errors=True)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
