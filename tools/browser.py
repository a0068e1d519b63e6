"""Headless Debian Chromium and a private JupyterLab, for testing the chapters as a person uses them.

    with chromium() as context:                  # a Playwright BrowserContext on /usr/bin/chromium
        page = context.new_page()
    with jupyterlab(root_dir) as lab:            # lab.url("notebooks/00_x.ipynb"), lab.token
        ...

The browser is Debian's `chromium` package (`ensure_chromium()` installs it with apt when it is
missing and we are root, as on CI); Playwright only drives it — it never downloads a browser of
its own. JupyterLab listens on a free port of 127.0.0.1 behind a random token, with user settings
of its own: no autosave (a test never writes back into a notebook), every cell kept in the DOM
(no windowing, so the test sees every output), no news or update checks (no network).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
# This workplace's notes: what headless Chromium needs in a container with no GPU and no network.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
}


def ensure_debian(command: str, package: str) -> str:
    """Path of `command`, installing Debian's `package` with apt-get when it is missing (root only)."""
    found = shutil.which(command)
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError(f"{command} is missing: install Debian's {package} package "
                           f"(apt-get install {package})")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", package], check=True, env=env)
    return shutil.which(command)


def ensure_chromium() -> str:
    """Debian's Chromium (never a browser downloaded by Playwright)."""
    if not os.access(CHROMIUM, os.X_OK):
        ensure_debian(CHROMIUM, "chromium")
    return CHROMIUM


@contextlib.contextmanager
def chromium(viewport=(1280, 900)):
    """A Playwright BrowserContext on Debian's Chromium with a fresh profile directory."""
    from playwright.sync_api import sync_playwright

    executable = ensure_chromium()
    with tempfile.TemporaryDirectory(prefix="parlab-chromium-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=executable, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": viewport[0], "height": viewport[1]})
        try:
            yield context
        finally:
            context.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    def __init__(self, port: int, token: str, root_dir: pathlib.Path, log: pathlib.Path | None = None):
        self.port, self.token, self.root_dir, self.log = port, token, root_dir, log
        self.base = f"http://127.0.0.1:{port}"

    def url(self, path: str) -> str:
        """The JupyterLab page that opens `path` (relative to root_dir) in a fresh workspace."""
        return f"{self.base}/lab/tree/{path}?reset&token={self.token}"

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(f"{self.base}/api/{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of JupyterLab's log (what a failure message shows)."""
        if self.log is None:
            return ""
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def shutdown_kernels(self) -> None:
        for kernel in self.api("kernels"):
            self.api(f"kernels/{kernel['id']}", method="DELETE")


@contextlib.contextmanager
def jupyterlab(root_dir: pathlib.Path, startup_timeout: float = 120.0, log: pathlib.Path | None = None):
    """JupyterLab serving `root_dir` on 127.0.0.1 (free port, random token); kernels import this checkout."""
    port, token = free_port(), secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="parlab-lab-") as tmp:
        settings = pathlib.Path(tmp) / "settings"
        for name, values in LAB_SETTINGS.items():
            (settings / name).parent.mkdir(parents=True, exist_ok=True)
            (settings / name).write_text(json.dumps(values))
        env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings),
                   JUPYTERLAB_WORKSPACES_DIR=str(pathlib.Path(tmp) / "workspaces"),
                   PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in
                                              os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
                   "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
                   f"--ServerApp.root_dir={root_dir}"] + (["--allow-root"] if os.geteuid() == 0 else [])
        log_file = open(log or pathlib.Path(tmp) / "lab.log", "w")  # noqa: SIM115 - closed below
        process = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        lab = Lab(port, token, root_dir, pathlib.Path(log_file.name))
        try:
            deadline = time.monotonic() + startup_timeout
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"JupyterLab exited with {process.returncode}; log: {log_file.name}")
                with contextlib.suppress(OSError):
                    lab.api("status")
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not answer within {startup_timeout} s")
                time.sleep(0.5)
            yield lab
        finally:
            with contextlib.suppress(OSError):
                lab.shutdown_kernels()
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)  # its own session: only JupyterLab and its kernels
                process.wait()
            log_file.close()


# --- driving one chapter in JupyterLab ---------------------------------------------------------

# What a person sees: the prompts of the code cells, error outputs, the kernel's busy/idle state.


if __name__ == "__main__":  # `make browser-deps`: what the browser and site tests need from Debian
    print(ensure_chromium(), ensure_debian("npm", "npm"))
