"""What the notebook tests share: a kernel spec of this Python, a JupyterLab server on 127.0.0.1.

Everything runs offline in a temporary home: the kernel spec (this interpreter, not whatever
``python`` is first on PATH), Jupyter's config, data, runtime and settings folders.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "attnscope.ipynb"


def jupyter_env(home: Path) -> dict[str, str]:
    """Environment for a kernel or a Jupyter server of this interpreter, isolated in ``home``."""
    spec = home / "share" / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (attnscope tests)",
                "language": "python",
            }
        )
    )
    env = dict(os.environ)
    env.update(
        HOME=str(home),
        JUPYTER_PATH=str(home / "share"),  # searched first: our kernel spec
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_DATA_DIR=str(home / "data"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "lab-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "lab-workspaces"),
        IPYTHONDIR=str(home / "ipython"),
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    )
    return env


@contextlib.contextmanager
def isolated_jupyter(home: Path):
    """This process's Jupyter paths point into ``home`` (for nbclient in this process)."""
    env = jupyter_env(home)
    keys = [k for k in env if k.startswith(("JUPYTER", "IPYTHON", "HF_", "TRANSFORMERS_")) or k == "PYTHONPATH"]
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: env[k] for k in keys})
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def on_a_thread_of_its_own(fn) -> None:
    """``fn()`` on a new thread, its exception re-raised here: Playwright's sync API refuses to
    start on a thread where an asyncio loop runs, and a kernel test (nbclient) can leave one."""
    outcome: dict[str, BaseException] = {}

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
            outcome["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyterlab(root: Path, home: Path, timeout: float = 90.0):
    """``jupyter lab`` serving ``root`` on 127.0.0.1, no token, no browser, no news or update checks."""
    port = free_port()
    env = jupyter_env(home)
    log = (home / "lab.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={root}",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            "--ServerApp.disable_check_xsrf=True",
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",  # no PyPI look-ups for the extension manager
            "--allow-root",  # CI runs as root
        ],
        env=env,
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"jupyter lab did not start: {(home / 'lab.log').read_text()[-3000:]}")
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
