"""The batch system's commands (``sbatch``, ``scancel``, ``qsub``, ``qdel``, ``squeue``,
``sacct``, ``qstat``), each in a session of its own and bounded in time.

A command runs in a session (and so a process group) of its own: a terminal's Ctrl-C is the
driver's, which stops its jobs itself. A command that has not ended after its time limit is
killed with every process of its group (a hung ``sbatch`` and the helpers it started), and the
caller gets no answer: :func:`run_bounded` returns None, :func:`call_bounded` raises. A run that
ends at once kills the commands still in flight (:func:`stop_in_flight`) and names them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence

#: Seconds a submission or a cancellation (``sbatch``, ``qsub``, ``scancel``, ``qdel``) may take:
#: a busy controller answers within seconds; one that takes a minute does not take jobs.
SUBMIT_TIMEOUT = 60.0

#: the commands running now, by process id (:func:`stop_in_flight`)
_IN_FLIGHT: dict[int, tuple[str, ...]] = {}


@contextlib.contextmanager
def _in_flight(pid: int, command: Sequence[str]) -> Iterator[None]:
    _IN_FLIGHT[pid] = tuple(command)
    try:
        yield
    finally:
        _IN_FLIGHT.pop(pid, None)


def stop_in_flight() -> list[tuple[str, ...]]:
    """Kill every batch command running now with its process group; the commands killed. It
    neither waits nor takes locks: a run that ends at once calls it from a signal handler."""
    stopped = []
    for pid, command in list(_IN_FLIGHT.items()):
        _kill_group(pid)
        stopped.append(command)
    return stopped


def _kill_group(pid: int) -> None:
    """SIGKILL to the process group of ``pid`` (the group of a command started in a session
    of its own), and to ``pid`` itself should it have left that group."""
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(target, signal.SIGKILL)


def run_bounded(
    command: Sequence[str], timeout: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess | None:
    """``command``'s answer (text), or None when it is missing, fails to start or takes over
    ``timeout`` seconds (then its process group is killed)."""
    try:
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env=None if env is None else dict(env),
        )
    except OSError:
        return None
    try:
        with _in_flight(process.pid, command):
            out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process.pid)
        process.communicate()
        return None
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


class Unanswered(RuntimeError):
    """A batch command killed before it answered (its time limit, or a run that ended)."""


async def call_bounded(
    cmd: Sequence[str], *, shell: bool = False, timeout: float | None = None, **kwargs
) -> str:
    """The standard output of ``cmd`` run in a session of its own, as dask-jobqueue's
    ``Job._call`` returns it (the same ``RuntimeError`` text for a non-zero exit code). A
    command that has not ended after ``timeout`` seconds (default :data:`SUBMIT_TIMEOUT`) is
    killed with its process group, and :class:`Unanswered` (a ``RuntimeError``) says so, as
    for a command killed meanwhile (:func:`stop_in_flight`)."""
    timeout = SUBMIT_TIMEOUT if timeout is None else timeout
    command = " ".join(cmd)
    start = asyncio.create_subprocess_shell if shell else asyncio.create_subprocess_exec
    process = await start(
        *cmd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        **kwargs,
    )
    try:
        with _in_flight(process.pid, cmd):
            out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        _kill_group(process.pid)
        await process.wait()
        raise Unanswered(
            f"`{command}` had not ended after {timeout:g} s and was killed (with every "
            "process it started): the batch system does not answer"
        ) from None
    if process.returncode is not None and process.returncode < 0:  # stop_in_flight()
        raise Unanswered(f"`{command}` was killed before it answered")
    stdout, stderr = out.decode(), err.decode()
    if process.returncode != 0:
        raise RuntimeError(
            "Command exited with non-zero exit code.\n"
            f"Exit code: {process.returncode}\nCommand:\n{command}\n"
            f"stdout:\n{stdout}\nstderr:\n{stderr}\n"
        )
    return stdout


def start_bounded(command: Sequence[str], timeout: float | None = None) -> None:
    """Start ``command`` in a session of its own and leave it to finish (a run that ends at
    once cancels its jobs so): coreutils' ``timeout`` kills its process group after
    ``timeout`` seconds (default :data:`SUBMIT_TIMEOUT`). Nothing is started where the
    command is missing."""
    timeout = SUBMIT_TIMEOUT if timeout is None else timeout
    bound = shutil.which("timeout")
    limit = [bound, "-s", "KILL", f"{timeout:g}"] if bound else []
    with contextlib.suppress(OSError):
        subprocess.Popen(
            [*limit, *command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
