"""The doc examples' script server runs a script as ``python script.py`` would: exit codes,
output, tracebacks, ``sys.argv``, worker processes that re-import ``__main__`` by its path (and
fail without the ``__main__`` guard, as a user's would), and timeouts that kill everything."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, wait_for
from tests.script_server import ScriptServer

SPAWNS = """
import multiprocessing
import sys


def square(queue, x):
    queue.put(x * x)


{guard}
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    worker = context.Process(target=square, args=(queue, 7))
    worker.start()
    worker.join()
    if worker.exitcode:
        sys.exit(f"the worker exited with {{worker.exitcode}}")
    print("child said", queue.get(timeout=60))
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptServer]:
    folder = tmp_path_factory.mktemp("scripts")
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    started = ScriptServer(folder, env, preload=("numpy",))
    yield started
    started.close()


def write(server: ScriptServer, name: str, code: str) -> Path:
    script = server.cwd / name
    script.write_text(textwrap.dedent(code))
    return script


def test_output_exit_code_and_argv_are_those_of_python_script(server: ScriptServer) -> None:
    script = write(
        server,
        "hello.py",
        """
        import sys
        print("out", sys.argv, __name__)
        print("err", file=sys.stderr)
        sys.exit(3)
        """,
    )
    done = server.run(script, timeout=60)
    assert done.returncode == 3
    assert done.stdout == f"out {[str(script)]} __main__\n"
    assert done.stderr == "err\n"


def test_an_exception_is_a_traceback_and_exit_code_1(server: ScriptServer) -> None:
    done = server.run(write(server, "fails.py", "raise ValueError('broken example')\n"), 60)
    assert done.returncode == 1
    assert "ValueError: broken example" in done.stderr


def test_spawned_workers_reimport_the_script_by_its_path(server: ScriptServer) -> None:
    guarded = write(server, "guarded.py", SPAWNS.format(guard='if __name__ == "__main__":'))
    done = server.run(guarded, timeout=120)
    assert (done.returncode, done.stdout) == (0, "child said 49\n"), done.stderr
    # without the guard the spawned child runs the script's body again: what a user sees
    unguarded = write(server, "unguarded.py", SPAWNS.format(guard="if True:"))
    done = server.run(unguarded, timeout=120)
    assert done.returncode != 0
    assert "bootstrapping phase" in done.stderr


def test_a_timeout_kills_the_script_and_what_it_started(server: ScriptServer) -> None:
    pid_file = server.cwd / "sleeper.pid"
    script = write(
        server,
        "hangs.py",
        f"""
        import subprocess
        import time
        sleeper = subprocess.Popen(["sleep", "600"])
        open({str(pid_file)!r}, "w").write(str(sleeper.pid))
        print("started", flush=True)
        time.sleep(600)
        """,
    )
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        server.run(script, timeout=5)
    assert caught.value.output == "started\n"
    sleeper = int(pid_file.read_text())
    status = Path(f"/proc/{sleeper}/stat")

    def gone() -> bool:  # or a zombie; SIGKILL ends a process asynchronously, so poll
        try:
            return status.read_text().split()[2] == "Z"
        except FileNotFoundError:
            return True

    wait_for(gone, 30, f"the killed script's child {sleeper} to end")
    # and the server runs the next script
    assert server.run(write(server, "next.py", "print(1)\n"), 60).stdout == "1\n"


ENDINGS = {
    "a-thread-joined": """
        import threading, time
        threading.Thread(target=lambda: (time.sleep(0.3), print("thread done"))).start()
        print("main done")
        """,
    "atexit-and-a-file-left-open": """
        import atexit, sys
        atexit.register(lambda: print("atexit ran"))
        log = open("left-open.txt", "w")
        log.write("written, never closed")
        print("buffered, never flushed", end="")
        """,
    "exit-with-text": "import sys\nsys.exit('stopped: a reason')\n",
    "exit-256": "import sys\nsys.exit(256)\n",
    "keyboard-interrupt": "raise KeyboardInterrupt\n",
}


@pytest.mark.parametrize("code", ENDINGS.values(), ids=ENDINGS.keys())
def test_a_script_ends_as_python_script_ends(server: ScriptServer, code: str) -> None:
    """Threads joined, atexit handlers run, files and streams flushed, the exit status, though
    the child skips tearing down what the server imported (tests.forked_child)."""
    script = write(server, "ending.py", code)
    spawned = subprocess.run(
        [sys.executable, script.name], cwd=server.cwd, capture_output=True, text=True, timeout=60
    )
    spawned_file = _take(server.cwd / "left-open.txt")
    forked = server.run(script, timeout=60)
    assert (forked.returncode, forked.stdout) == (spawned.returncode, spawned.stdout)
    assert forked.stderr.splitlines()[-1:] == spawned.stderr.splitlines()[-1:]
    assert _take(server.cwd / "left-open.txt") == spawned_file


def _take(path: Path) -> str | None:
    """The file's text, the file removed; None when there is none."""
    if not path.exists():
        return None
    text = path.read_text()
    path.unlink()
    return text
