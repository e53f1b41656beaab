"""Run Python scripts as ``python script.py`` runs them, each in a child forked from one server
that imported the heavy third-party modules and oodsim once.

A fresh interpreter per doc example paid 2-4 s of imports (torch, distributed, xarray, scipy,
matplotlib) for every one of some thirty examples, most of which then run for under a second.
The server imports those modules and nothing else (no cluster, no thread, no oodsim state), then
forks a child per script. The child is the script's interpreter: its own session (a timeout
kills it and every process it started), stdin from ``/dev/null``, stdout and stderr into files,
``sys.argv`` and ``sys.path[0]`` as ``python script.py`` sets them, the script run as
``__main__`` (so Dask's worker processes re-import it by its path, exactly as they re-import a
user's script, and an example without the ``__main__`` guard fails as it would for a user), and
an interpreter's end (:func:`tests.forked_child.run_as_main`: threads joined, atexit handlers
run, the exit status of ``python script.py``).

The server: ``python -m tests.script_server MODULE...`` reads one JSON request per line on
stdin (``script``, ``stdout``, ``stderr``: paths) and answers two JSON lines per request, the
child's ``pid`` when it starts and its ``returncode`` when it ends (negative: killed by that
signal, as :mod:`subprocess` reports it). :class:`ScriptServer` is the client.
"""

from __future__ import annotations

import json
import os
import runpy
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.forked_child import preload, run_as_main

#: what the doc examples import, in the order a script would import it
PRELOAD = (
    "numpy",
    "scipy.stats",
    "pandas",
    "xarray",
    "zarr",
    "matplotlib.pyplot",
    "torch",
    "torch.optim",
    "distributed",
    "attrs",
    "oodsim",
    "oodsim.stats",
    "oodsim.engine",
    "oodsim.report",
)


class ScriptServer:
    """A running server in ``cwd`` with environment ``env``; :meth:`run` runs one script."""

    def __init__(self, cwd: Path, env: dict[str, str], preload: tuple[str, ...] = PRELOAD):
        self.cwd = Path(cwd)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.script_server", *preload],
            cwd=self.cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        self._pending = b""

    def run(self, script: Path, timeout: float) -> subprocess.CompletedProcess:
        """Run ``script`` (a path under ``cwd``) to its end, as ``python script`` would; raise
        :class:`subprocess.TimeoutExpired` (the child and its processes killed) after
        ``timeout`` seconds."""
        script = self.cwd / script
        out, err = script.with_suffix(".stdout"), script.with_suffix(".stderr")
        request = {"script": str(script), "stdout": str(out), "stderr": str(err)}
        self._process.stdin.write(json.dumps(request).encode() + b"\n")
        deadline = time.monotonic() + timeout
        pid = self._answer(deadline)["pid"]
        try:
            returncode = self._answer(deadline)["returncode"]
        except TimeoutError:
            os.killpg(pid, signal.SIGKILL)
            self._answer(time.monotonic() + 30)
            raise subprocess.TimeoutExpired(
                [sys.executable, script.name], timeout, out.read_text(), err.read_text()
            ) from None
        return subprocess.CompletedProcess(
            [sys.executable, script.name], returncode, out.read_text(), err.read_text()
        )

    def _answer(self, deadline: float) -> dict:
        """The server's next line, waited for until ``deadline``."""
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._process.stdout], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(self._process.stdout.fileno(), 65536)
            if not chunk:
                code = self._process.wait()
                raise RuntimeError(f"the script server exited with {code} (its stderr is above)")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        """Stop the server (it exits when its stdin closes)."""
        stop_server(self._process)


def stop_server(process: subprocess.Popen) -> None:
    """Stop a server that exits when its stdin closes (killed after 30 s)."""
    process.stdin.close()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _run_child(request: dict) -> None:
    """In the forked child: become ``python script`` and run it as ``__main__``."""
    os.setsid()
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        target = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    script = request["script"]
    sys.argv = [script]
    sys.path[0] = str(Path(script).parent)
    runpy.run_path(script, run_name="__main__")


def serve(modules: list[str]) -> int:
    """Import ``modules``, then fork a child per request on stdin until stdin closes."""
    preload(modules)
    answers = sys.stdout.buffer
    for line in sys.stdin.buffer:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            run_as_main(_run_child, request)  # ends the child as the script's end
        answers.write(json.dumps({"pid": pid}).encode() + b"\n")
        answers.flush()
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
        answers.write(b"\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
