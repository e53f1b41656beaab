"""``python -m oodsim.cli ...`` as a process forked from one server that imported the heavy
third-party modules and oodsim's command line once, with :mod:`subprocess`'s interface
(:func:`popen`, :func:`run`).

A fresh interpreter spends about 1.2 CPU-s importing numpy, pandas, xarray, zarr, scipy,
distributed and oodsim before a command does anything (and 2.5 more on torch for a run that
computes in its own process); the suite runs the command some fifty
times, on a machine whose two cores are both busy for the whole run. The server imports them
once, then forks a child per command. The child is the command's interpreter, as a fresh one
would be: its own argv (``sys.argv[0]`` the module's file, as ``-m`` sets it), environment
(Dask's configuration read again from it), working folder and ``sys.path`` (the working
folder, then ``$PYTHONPATH``, then the interpreter's own), the standard streams the caller
passed, its own session with ``start_new_session``, Python's own signal handlers, and an
interpreter's end (:func:`tests.forked_child.run_as_main`: threads joined, atexit handlers run,
the same exit status). Everything the command starts
(a fork server, workers) is started by the child, exactly as by a fresh process. Modules
imported by the server read no configuration at import that a command could change, except
Dask's, which the child reads again.

Not for what depends on the interpreter's start itself (``-X`` options, ``PYTHONSAFEPATH``,
a folder that shadows the installed package, a fresh interpreter's imports): those tests run
``subprocess`` as before.

The server (``python -m tests.command_server SOCKET``) accepts one connection per command: a
JSON request with the caller's three standard streams (``SCM_RIGHTS``), answered by one JSON
line with the child's ``pid`` and, when the child ends, one with its ``returncode`` (negative:
killed by that signal, as :mod:`subprocess` reports it). It exits when its stdin closes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tests.forked_child import preload, run_as_main
from tests.script_server import stop_server

#: what ``oodsim``'s commands import, heaviest first (none of it reads the environment at
#: import in a way a command could change, except Dask's configuration)
PRELOAD = (
    "numpy",
    "scipy.special",
    "scipy.stats",
    "pandas",
    "xarray",
    "zarr",
    "distributed",
    "torch",  # imported by the commands that compute in their own process (one seed)
    "oodsim.cli.main",
    "oodsim.cli.run",
    "oodsim.engine.run",
    "oodsim.report.tables",
)
#: the command these processes run (``[sys.executable, "-m", MODULE, ...]``)
MODULE = "oodsim.cli"
#: the start of a command line that :func:`popen` and :func:`run` fork (any other is spawned)
COMMAND = (sys.executable, "-m", MODULE)


class _Server:
    """This process's server, started on first use; one per test process."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="oodsim-cli-server-"))
        self.path = str(self.folder / "socket")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.command_server", self.path],
            cwd=Path(__file__).resolve().parents[1],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        ready = self.process.stdout.readline()  # the server says when it listens
        if ready.strip() != b"ready":
            raise RuntimeError(f"the command server did not start: {ready!r}")

    def connect(self) -> socket.socket:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(self.path)
        return connection

    def close(self) -> None:
        stop_server(self.process)
        shutil.rmtree(self.folder, ignore_errors=True)


_server: _Server | None = None
_server_lock = threading.Lock()


def _the_server() -> _Server:
    global _server
    with _server_lock:
        if _server is None or _server.process.poll() is not None:
            _server = _Server()
        return _server


def close_server() -> None:
    """Stop this process's server (the test session's end)."""
    global _server
    with _server_lock:
        if _server is not None:
            _server.close()
            _server = None


#: the :class:`subprocess.Popen` options a forked command takes (any other, e.g. a
#: ``preexec_fn``, spawns the command)
OPTIONS = frozenset(
    {"stdin", "stdout", "stderr", "text", "universal_newlines", "env", "cwd", "start_new_session"}
)


def forked(args: Sequence[Any], options: Iterable[str] = ()) -> bool:
    """Whether ``args`` with these Popen ``options`` is a command this module forks:
    ``python -m oodsim.cli ...`` with no option beyond :data:`OPTIONS`."""
    return tuple(str(a) for a in args[:3]) == COMMAND and set(options) <= OPTIONS


def _stream(spec: Any, default: int, opened: list[int]) -> tuple[int, int | None]:
    """(the fd to pass the child, the read or write end kept here for a pipe) for one of
    :class:`subprocess.Popen`'s ``stdin``/``stdout``/``stderr`` values."""
    if spec is None:
        return default, None
    if spec == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        opened.append(fd)
        return fd, None
    if spec == subprocess.STDOUT:
        return -1, None  # the fd passed as stdout (see ForkedProcess)
    if spec == subprocess.PIPE:
        read, write = os.pipe()
        if default == 0:  # stdin: the child reads, we write
            opened.append(read)
            return read, write
        opened.append(write)
        return write, read
    return (spec if isinstance(spec, int) else spec.fileno()), None


class ForkedProcess:
    """:class:`subprocess.Popen` of ``python -m oodsim.cli ...``, the process forked from the
    server (see the module's docstring). Supports what the suite uses: the standard streams
    (``PIPE``, ``DEVNULL``, ``STDOUT``, files), ``text``, ``env``, ``cwd``,
    ``start_new_session``, and ``pid``, ``poll``, ``wait``, ``communicate``, ``send_signal``,
    ``terminate``, ``kill``, ``returncode``, use as a context manager."""

    def __init__(
        self,
        args: Sequence[Any],
        *,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        text: bool = False,
        universal_newlines: bool | None = None,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        start_new_session: bool = False,
    ) -> None:
        if not forked(args):
            raise ValueError(f"not a command of {MODULE}: {args!r}")
        self.args = list(args)
        self.returncode: int | None = None
        text = bool(text or universal_newlines)
        opened: list[int] = []
        fds, kept = [], []
        for spec, default in ((stdin, 0), (stdout, 1), (stderr, 2)):
            fd, mine = _stream(spec, default, opened)
            fds.append(fd)
            kept.append(mine)
        request = {
            "argv": [str(a) for a in args[3:]],
            "env": dict(os.environ if env is None else env),
            "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd()),
            "session": bool(start_new_session),
            "ignored": [int(s) for s in _SIGNALS if signal.getsignal(s) is signal.SIG_IGN],
        }
        passed = [fd if fd != -1 else fds[1] for fd in fds]
        self._connection = _the_server().connect()
        try:
            socket.send_fds(self._connection, [json.dumps(request).encode() + b"\n"], passed)
        finally:
            for fd in opened:
                os.close(fd)
        self._pending = b""
        self.pid = self._answer(None)["pid"]
        modes = ("w", "r", "r")
        self.stdin, self.stdout, self.stderr = (
            None if fd is None else _file(fd, mode, text) for fd, mode in zip(kept, modes)
        )

    def _answer(self, timeout: float | None) -> dict:
        """The server's next line for this process, waited for at most ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            self._connection.settimeout(left)
            try:
                chunk = self._connection.recv(4096)
            except (TimeoutError, BlockingIOError):
                raise subprocess.TimeoutExpired(self.args, timeout) from None
            if not chunk:
                raise RuntimeError("the command server closed the connection")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.wait(timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._answer(timeout)["returncode"]
            self._connection.close()
        return self.returncode

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        """Write ``input``, read both pipes to their end and wait, as Popen's does."""
        if not hasattr(self, "_readers"):
            self._output: dict[str, list] = {"stdout": [], "stderr": []}
            self._readers = []
            for name in ("stdout", "stderr"):
                stream = getattr(self, name)
                if stream is not None:
                    reader = threading.Thread(
                        target=lambda s=stream, out=self._output[name]: out.append(s.read()),
                        daemon=True,
                    )
                    reader.start()
                    self._readers.append(reader)
            if self.stdin is not None:
                with contextlib.suppress(BrokenPipeError):
                    if input:
                        self.stdin.write(input)
                    self.stdin.close()
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in self._readers:
            reader.join(None if deadline is None else max(deadline - time.monotonic(), 0.0))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0.0))
        results = []
        for name in ("stdout", "stderr"):
            stream = getattr(self, name)
            results.append(None if stream is None else self._output[name][0])
            if stream is not None:
                stream.close()
        return results[0], results[1]

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __enter__(self) -> ForkedProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.wait()


#: the signals whose disposition a child takes from its caller where the caller ignores them
#: (an ignored signal stays ignored across ``exec``; a handler does not)
_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGQUIT)


def popen(args: Sequence[Any], **kwargs: Any) -> ForkedProcess | subprocess.Popen:
    """:class:`ForkedProcess` for ``python -m oodsim.cli ...``, :class:`subprocess.Popen`
    for any other command."""
    if forked(args, kwargs):
        return ForkedProcess(args, **kwargs)
    return subprocess.Popen(args, **kwargs)


def _file(fd: int, mode: str, text: bool) -> io.IOBase:
    if text:
        return open(fd, mode, encoding="utf-8", errors="strict")  # noqa: SIM115
    return open(fd, mode + "b", buffering=0 if mode == "w" else -1)  # noqa: SIM115


def run(
    args: Sequence[Any],
    *,
    input: Any = None,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess:
    """:func:`subprocess.run` of ``python -m oodsim.cli ...`` forked from the server; any
    other command is :func:`subprocess.run` itself."""
    if not forked(args, kwargs):
        return subprocess.run(
            args,
            input=input,
            capture_output=capture_output,
            timeout=timeout,
            check=check,
            **kwargs,
        )
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with ForkedProcess(args, **kwargs) as process:
        try:
            out, err = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            if kwargs.get("start_new_session"):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            process.kill()
            process.communicate()
            raise
    done = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    if check:
        done.check_returncode()
    return done


# ----------------------------------------------------------------------------- the server


def _pythonpath() -> list[str]:
    """The folders ``$PYTHONPATH`` puts on ``sys.path`` (after the script's, before the rest)."""
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def _child(request: dict, fds: list[int], base_path: list[str]) -> None:
    """In the forked child: become ``python -m oodsim.cli ARGV`` and run it."""
    if request["session"]:
        os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[:] = [request["cwd"], *_pythonpath(), *base_path]
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    raw = [open(fd, mode, closefd=False) for fd, mode in ((0, "rb"), (1, "wb"), (2, "wb"))]  # noqa: SIM115
    sys.stdin = io.TextIOWrapper(raw[0], encoding="utf-8")
    sys.stdout = io.TextIOWrapper(raw[1], encoding="utf-8", write_through=unbuffered)
    sys.stderr = io.TextIOWrapper(
        raw[2], encoding="utf-8", errors="backslashreplace", line_buffering=True
    )
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    import dask.config  # already imported by distributed: read again from this environment

    dask.config.refresh()
    for number in _SIGNALS:
        if number in request["ignored"]:
            signal.signal(number, signal.SIG_IGN)
        elif number == signal.SIGINT:
            signal.signal(number, signal.default_int_handler)
        else:
            signal.signal(number, signal.SIG_DFL)
    sys.argv = ["-m", *request["argv"]]
    runpy.run_module(MODULE, run_name="__main__", alter_sys=True)


def serve(path: str) -> int:
    """Import :data:`PRELOAD`, listen at ``path``, fork a child per command until stdin
    closes."""
    preload(PRELOAD)
    base_path = [p for p in sys.path[1:] if p not in _pythonpath()]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(sys.stdin.buffer, selectors.EVENT_READ, "stdin")
    sys.stdout.buffer.write(b"ready\n")
    sys.stdout.buffer.flush()
    waiting: dict[int, socket.socket] = {}
    while True:
        for key, _ in selector.select(timeout=0.05):
            if key.data == "stdin":
                if not sys.stdin.buffer.read1(4096):
                    return 0
            elif key.data == "accept":
                connection, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
                request = json.loads(message)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    for other in waiting.values():
                        other.close()
                    connection.close()
                    run_as_main(_child, request, fds, base_path)  # never returns
                for fd in fds:
                    os.close(fd)
                connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
                waiting[pid] = connection
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            connection = waiting.pop(pid, None)
            if connection is not None:
                answer = {"returncode": os.waitstatus_to_exitcode(status)}
                with contextlib.suppress(OSError):
                    connection.sendall(json.dumps(answer).encode() + b"\n")
                connection.close()


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
