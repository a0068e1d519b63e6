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
_NOTEBOOK_STATE_JS = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return null;
  const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')]
      .map(e => e.textContent.trim());
  // JupyterLab shows an exception as red stderr text holding the traceback: that is what we look for.
  const stderr = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]';
  const errors = [...panel.querySelectorAll(stderr)]
      .map(e => e.innerText.trim()).filter(t => t.includes('Traceback (most recent call last)'))
      .map(t => t.split('\\n').filter(l => l.trim()).slice(-1)[0]);
  const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  return {prompts, errors, status: indicator ? indicator.getAttribute('data-status') : null};
}"""


def _wait(predicate, timeout: float, what: str, poll: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


def _menu(page, menu: str, item: str) -> None:
    """Click a main-menu entry the way a person does: open the menu, click the item."""
    import re

    page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(menu)}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


def _save(page, path: pathlib.Path, code_cells: int) -> dict:
    """File ▸ Save Notebook, then the saved notebook once every code cell on disk has run."""
    _menu(page, "File", "Save Notebook")

    def saved():
        try:
            nb = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):  # being written
            return None
        counts = [c.get("execution_count") for c in nb["cells"] if c["cell_type"] == "code"]
        return nb if len(counts) == code_cells and all(counts) else None

    return _wait(saved, 30, f"{path.name} to be saved with its outputs")


def output_text(cell: dict) -> str:
    """A cell's text outputs as nbval compares them: streams and text/plain, in order, each line
    stripped of trailing spaces (images, HTML and widget views are not compared)."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append("".join(out.get("text", "")))
        elif "text/plain" in out.get("data", {}):
            parts.append("".join(out["data"]["text/plain"]) + "\n")
    return "\n".join(line.rstrip() for line in "".join(parts).strip().splitlines())


def golden_mismatches(stored: dict, executed: dict) -> list[str]:
    """Golden cells (keep_output and `# NBVAL_CHECK_OUTPUT`) whose executed text differs from the
    stored one: what `pytest --nbval-lax` checks, read from the notebook the browser ran."""
    problems = []
    for index, (want, got) in enumerate(zip(stored["cells"], executed["cells"])):
        source = "".join(want.get("source", ""))
        if want["cell_type"] != "code" or not source.lstrip().startswith("# NBVAL_CHECK_OUTPUT"):
            continue
        if output_text(want) != output_text(got):
            problems.append(f"cell {index}: stored {output_text(want)[:300]!r}, "
                            f"ran {output_text(got)[:300]!r}")
    return problems


def _panel_text(output) -> str:
    return output.evaluate("""e => e.innerText.trim() + '\\n' +
        [...e.querySelectorAll('img')].map(i => i.src.length + ':' + i.src.slice(-64)).join('\\n')""")


def image_digests(locator) -> list[str]:
    """A digest of every <img> under `locator`: what a redrawn figure changes."""
    import hashlib

    return [hashlib.sha256(src.encode()).hexdigest()[:16]
            for src in locator.locator("img").evaluate_all("es => es.map(e => e.src)")]


def blank_images(locator) -> int:
    """How many of the <img> under `locator` are a single flat colour (a plot that drew nothing)."""
    import base64
    import io

    from PIL import Image

    blank = 0
    for src in locator.locator("img").evaluate_all("es => es.map(e => e.src)"):
        if src.startswith("data:image/png;base64,"):
            image = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).convert("RGBA")
            blank += all(low == high for low, high in image.getextrema())
    return blank


def _open_with_idle_kernel(page, lab: Lab, relpath: str, code_cells: int, timeout: float = 120.0,
                           tries: int = 2) -> None:
    """Open `relpath` and wait until every code cell is on the page and its kernel is idle.

    On a machine busy with other tests a page has been seen to never settle (CI: 120 s with no
    idle kernel, on the second chapter of a half). A person reloads the tab: so does this, once,
    after shutting down the kernel the first try started. The error names what was last seen.
    """
    seen: dict = {}

    def ready():
        state = page.evaluate(_NOTEBOOK_STATE_JS)
        try:
            sessions = lab.api("sessions")
        except OSError as error:  # the server is busy: not ready yet
            sessions, seen["api"] = [], repr(error)
        kernels = [s["kernel"]["execution_state"] for s in sessions if s["path"] == relpath]
        dialogs = page.evaluate("() => [...document.querySelectorAll('.jp-Dialog')]"
                                ".map(e => e.innerText.trim().slice(0, 200))")
        seen.update(cells_on_page=state and len(state["prompts"]), code_cells=code_cells,
                    indicator=state and state["status"], kernels=kernels, dialogs=dialogs)
        return (state and len(state["prompts"]) == code_cells and state["status"] == "idle"
                and kernels == ["idle"])

    for attempt in range(1, tries + 1):
        page.goto(lab.url(relpath))
        try:
            # Every code cell on the page and the kernel started (the indicator reads idle before
            # it connects).
            _wait(ready, timeout, "the notebook to open with an idle kernel")
            return
        except TimeoutError:
            print(f"{relpath}: try {attempt} of {tries} did not settle in {timeout:.0f} s; "
                  f"last seen {seen}", file=sys.stderr)
            if attempt == tries:
                raise TimeoutError(f"{relpath}: timed out {tries} times after {timeout:.0f} s waiting "
                                   f"for the notebook to open with an idle kernel; last seen {seen}; "
                                   f"JupyterLab's log ends: {lab.log_tail()!r}") from None
            with contextlib.suppress(OSError):
                lab.shutdown_kernels()


def exercise_chapter(page, lab: Lab, relpath: str, screenshot: pathlib.Path,
                     run_timeout: float = 450.0, rerun_timeout: float = 300.0) -> dict:
    """Open a notebook, Run All Cells, then move the first panel's world size to the smallest other
    value of 2 or more.

    Returns what happened: {"seconds", "errors": [...], "prompts", "panels", "before", "after",
    "clicked", "images" and "blank_plots" (all and flat images in the panel after the click),
    "figures_before" and "figures_after" (digests of the panel's images around the click),
    "figures_outside" (images in the panel's cell outside the panel, after the click),
    "screenshot"}.
    Raises TimeoutError when the notebook or the panel never settles.
    """
    started = time.monotonic()
    cells = json.loads((lab.root_dir / relpath).read_text())["cells"]
    code_cells = sum(c["cell_type"] == "code" for c in cells)
    _open_with_idle_kernel(page, lab, relpath, code_cells)
    _menu(page, "Run", "Run All Cells")
    # Run All marks every code cell [*] at once; done when none is pending and the kernel is idle
    # (after an error JupyterLab clears the queue, leaving the later cells unexecuted).
    _wait(lambda: any(p != "[ ]:" for p in page.evaluate(_NOTEBOOK_STATE_JS)["prompts"]), 30,
          "Run All to start")
    state = _wait(lambda: (s := page.evaluate(_NOTEBOOK_STATE_JS))["status"] == "idle"
                  and "[*]:" not in s["prompts"] and s, run_timeout, "all cells to run")
    report = {"errors": list(state["errors"]), "prompts": state["prompts"], "panels": 0,
              "before": None, "after": None, "clicked": None, "images": 0, "blank_plots": 0,
              "figures_before": [], "figures_after": [], "figures_outside": 0,
              "screenshot": str(screenshot), "executed": None}
    if not report["errors"]:  # save what Run All produced: its golden cells are checked from it
        report["executed"] = _save(page, lab.root_dir / relpath, code_cells)
    notebook = ".jp-NotebookPanel:not(.lm-mod-hidden)"
    panels = page.locator(f"{notebook} .parlab-panel:has(.parlab-control-world_size)")
    report["panels"] = panels.count()
    if report["panels"]:
        panel = panels.first
        panel.scroll_into_view_if_needed()
        buttons = panel.locator(".parlab-control-world_size button")
        labels = [b.strip() for b in buttons.all_inner_texts()]
        active = panel.locator(".parlab-control-world_size button.mod-active").inner_text().strip()
        output = panel.locator(".parlab-output")
        report["before"] = _panel_text(output)
        report["figures_before"] = image_digests(output)
        # the smallest other world size of 2 or more: a real re-run with other values that shows
        # several ranks at work (world size 1 sends nothing), and the cheapest such one (four ranks
        # on two cores can take minutes in a chapter that is light at two)
        others = sorted((label for label in labels if label != active
                         and not (label.isdigit() and int(label) < 2)),
                        key=lambda label: (not label.isdigit(), int(label) if label.isdigit() else 0))
        target = others[0] if others else None
        if target is not None:
            report["clicked"] = target
            buttons.nth(labels.index(target)).click()
            header = f"world_size={target}"

            def settled():
                text = _panel_text(output)
                state = page.evaluate(_NOTEBOOK_STATE_JS)
                if not (text.startswith(header) and state["status"] == "idle"):
                    return None
                time.sleep(0.5)  # the output may still be arriving: take it once it holds still
                return text if _panel_text(output) == text else None

            report["after"] = _wait(settled, rerun_timeout, f"the panel to show {header}")
            report["images"] = output.locator("img").count()
            report["figures_after"] = image_digests(output)
            report["blank_plots"] = blank_images(output)
            # a figure drawn outside the panel's output stays behind, stale, after the click
            report["figures_outside"] = panel.evaluate(
                """e => [...e.closest('.jp-Cell').querySelectorAll('.jp-OutputArea img')]
                       .filter(i => !i.closest('.parlab-panel')).length""")
            report["errors"] += page.evaluate(_NOTEBOOK_STATE_JS)["errors"][len(state["errors"]):]
        panel.evaluate("e => e.closest('.jp-Cell').scrollIntoView({block: 'start'})")  # its code, then it
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(screenshot))
    report["seconds"] = time.monotonic() - started
    return report


if __name__ == "__main__":  # `make browser-deps`: what the browser and site tests need from Debian
    print(ensure_chromium(), ensure_debian("npm", "npm"))
