"""Progress on long work (issue 50, item 2): a bar on stderr where a person watches, nothing in CI
logs, nothing in a notebook that a batch executor (papermill, nbval) runs, never a byte on stdout."""

import os
import subprocess
import sys

import pytest

from parlab.core import progress as prog

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = [sys.executable, "-m", "parlab", "bench", "compression", "--world-size", "2", "--steps", "2",
         "--link", "loopback", "--schemes", "ddp-naive", "ddp-bucketed"]


class _Tty:
    def __init__(self, tty: bool):
        self.tty, self.text = tty, []

    def isatty(self):
        return self.tty

    def write(self, text):
        self.text.append(text)

    def flush(self):
        pass


class _Kernel:
    def __init__(self, metadata):
        self.metadata = metadata

    def get_parent(self, channel):
        return {"metadata": self.metadata}


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("CI", "PARLAB_PROGRESS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(prog, "_kernel", lambda: None)
    return monkeypatch


def test_terminal_shows_a_bar_and_ci_silences_it(clean_env):
    clean_env.setattr(sys, "stderr", _Tty(True))
    assert prog.mode() == "terminal"
    clean_env.setenv("CI", "true")
    assert prog.mode() is None
    clean_env.setenv("PARLAB_PROGRESS", "1")  # forced on, even in CI
    assert prog.mode() == "terminal"
    clean_env.setenv("PARLAB_PROGRESS", "0")
    clean_env.delenv("CI")
    assert prog.mode() is None


def test_a_pipe_is_silent_and_the_items_pass_unchanged(clean_env):
    clean_env.setattr(sys, "stderr", _Tty(False))
    items = [3, 1, 2]
    assert prog.mode() is None
    assert prog.progress(items, desc="x") is items


def test_notebooks_show_a_widget_only_to_a_front_end(clean_env):
    """A front end (JupyterLab, VS Code) names the cell it runs; papermill and nbval do not, so a
    golden cell executed by them gains no output."""
    clean_env.setattr(prog, "_kernel", lambda: _Kernel({}))
    assert prog.mode() is None
    clean_env.setattr(prog, "_kernel", lambda: _Kernel({"cellId": "abc"}))
    assert prog.mode() == "notebook"
    clean_env.setenv("CI", "true")
    assert prog.mode() is None


def test_a_forced_bar_writes_to_stderr_never_stdout(clean_env, capsys):
    clean_env.setenv("PARLAB_PROGRESS", "1")
    assert list(prog.progress(range(4), desc="plans")) == [0, 1, 2, 3]
    out, err = capsys.readouterr()
    assert out == ""
    assert "plans" in err and "/4" in err


# The bench command twice in one interpreter (one forkserver start, ~10 s on a loaded machine, for
# both): forced on, then in CI; each writes its stdout and stderr between markers.
_BOTH = """
import os, sys
from parlab.__main__ import main
for mode, env in (("forced", {"PARLAB_PROGRESS": "1"}), ("ci", {"CI": "true"})):
    for name in ("CI", "PARLAB_PROGRESS"):
        os.environ.pop(name, None)
    os.environ.update(env)
    for stream in (sys.stdout, sys.stderr):
        print(f"<<{mode}>>", file=stream, flush=True)
    code = main(sys.argv[1:])
    for stream in (sys.stdout, sys.stderr):
        print(f"<<end {mode} {code}>>", file=stream, flush=True)
"""


def _between(text: str, mode: str) -> tuple[str, str]:
    """(what `mode` wrote, its exit code) from the markers _BOTH writes."""
    body = text.split(f"<<{mode}>>\n", 1)[1]
    body, rest = body.split(f"<<end {mode} ", 1)
    return body, rest.split(">>", 1)[0]


def test_bench_command_bar_when_forced_silent_in_ci():
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PARLAB_PROGRESS")}
    done = subprocess.run([sys.executable, "-c", _BOTH, *BENCH[3:]], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (forced_out, code), (forced_err, _) = _between(done.stdout, "forced"), _between(done.stderr, "forced")
    assert code == "0", done.stderr
    assert "compression ×2 loopback" in forced_err and "2/2" in forced_err
    assert "%|" not in forced_out and "ddp-bucketed" in forced_out
    (ci_out, code), (ci_err, _) = _between(done.stdout, "ci"), _between(done.stderr, "ci")
    assert code == "0", done.stderr
    assert "compression ×2" not in ci_err and "%|" not in ci_err
    assert ci_out.splitlines()[:2] == forced_out.splitlines()[:2]  # the same table


def test_a_real_kernel_shows_the_widget_to_a_front_end_only():
    """In an ipykernel: an execute request without a cellId (nbclient, papermill, nbval) gets no
    output from a bar; one from a front end (JupyterLab sends the cell's id) gets a tqdm widget."""
    from jupyter_client.manager import start_new_kernel

    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PARLAB_PROGRESS")}
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    km, kc = start_new_kernel(kernel_name="python3", env=env)
    code = "from parlab.core.progress import progress\nfor _ in progress(range(3), desc='plans'): pass"

    def outputs(metadata):
        msg = kc.session.msg("execute_request", {"code": code, "silent": False, "store_history": False,
                                                 "user_expressions": {}, "allow_stdin": False,
                                                 "stop_on_error": True}, metadata=metadata)
        kc.shell_channel.send(msg)
        got = []
        while True:
            m = kc.get_iopub_msg(timeout=120)
            if m["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
                continue
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                return got
            if m["msg_type"] in ("stream", "display_data", "execute_result", "error"):
                got.append(m)

    try:
        assert outputs({}) == []  # what papermill and nbval send: a golden cell gains nothing
        shown = outputs({"cellId": "a-cell"})
        assert [m["msg_type"] for m in shown] == ["display_data"]
        assert "application/vnd.jupyter.widget-view+json" in shown[0]["content"]["data"]
        assert "plans" in shown[0]["content"]["data"]["text/plain"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
