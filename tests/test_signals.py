"""Ctrl-C held while a cluster starts or closes (:mod:`oodsim.clusters.signals`), with real
signals sent to this process and to a process started under :func:`signals.shielded`."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from oodsim.clusters import signals

#: Python's own Ctrl-C handler for every test here (conftest's ``python_handlers``)
pytestmark = pytest.mark.usefixtures("python_handlers")


def test_a_ctrl_c_in_a_held_block_is_raised_when_the_block_ends() -> None:
    steps = []
    with pytest.raises(KeyboardInterrupt), signals.held():
        signal.raise_signal(signal.SIGINT)
        steps.append("went on")  # the cluster finishes starting
    assert steps == ["went on"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_third_ctrl_c_in_a_held_block_acts_at_once() -> None:
    steps = []
    with pytest.raises(KeyboardInterrupt), signals.held():
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
        steps.append("two held")
        signal.raise_signal(signal.SIGINT)
        steps.append("not reached")
    assert steps == ["two held"]


def test_a_held_block_that_fails_raises_its_own_error() -> None:
    with pytest.raises(ValueError, match="did not start"), signals.held():
        signal.raise_signal(signal.SIGINT)
        raise ValueError("did not start")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_ctrl_c_stays_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with signals.held():
        signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_sigterm_is_held_like_ctrl_c() -> None:
    class Terminated(KeyboardInterrupt):
        pass

    def terminate(signum: int, frame: object) -> None:
        raise Terminated

    signal.signal(signal.SIGTERM, terminate)
    with pytest.raises(Terminated), signals.held():
        signal.raise_signal(signal.SIGTERM)


def test_a_ctrl_c_before_the_resume_line_waits_for_it_then_ends_the_run_at_once() -> None:
    """``holding``: once interrupted (``hold()``), another Ctrl-C waits until the run said how
    to resume (``told()``), and then ends the run at once: what the run registered to end
    (its local workers) is ended, and here, outside the ``oodsim`` command, Ctrl-C's own
    handler raises ``KeyboardInterrupt`` where the run was, before its close."""
    steps: list[str] = []
    with (
        pytest.raises(KeyboardInterrupt),
        signals.holding() as stopping,
        signals.ended_with(lambda: steps.append("workers killed")),
    ):
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            stopping.hold()
            signal.raise_signal(signal.SIGINT)  # impatient
            steps.append("resume line")
            stopping.told()
            steps.append("closed the cluster")
            raise
    assert steps == ["resume line", "workers killed"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_after_the_resume_line_ends_the_run_at_once() -> None:
    steps: list[str] = []
    with (
        pytest.raises(KeyboardInterrupt, match="^$"),
        signals.holding() as stopping,
        signals.ended_with(lambda: steps.append("workers killed")),
    ):
        stopping.hold()
        stopping.told()
        steps.append("closing")
        signal.raise_signal(signal.SIGINT)
        raise KeyboardInterrupt("the close went on")
    assert steps == ["closing", "workers killed"]


def test_a_third_ctrl_c_stops_a_count_that_hangs() -> None:
    """Before the resume line the run counts what is in the store: a count that hangs (a file
    system that does not answer) is cut short by a third Ctrl-C."""
    steps = []
    with pytest.raises(KeyboardInterrupt, match="hung"), signals.holding() as stopping:
        stopping.hold()
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            steps.append("stopped at once")
        raise KeyboardInterrupt("hung")
    assert steps == ["stopped at once"]


#: a stopped run in a process of the ``oodsim`` command's (``owned``), with a forkserver
#: queue whose semaphores the resource tracker would report as leaked after a plain _exit
_OWNED_RUN = """
import multiprocessing, signal, sys, time
from oodsim.clusters import signals
queue = multiprocessing.get_context("forkserver").Queue()
with signals.owned(), signals.holding() as stopping:
    with signals.ended_with(lambda: print("workers killed", flush=True)):
        stopping.hold()
        print("resume line", flush=True)
        stopping.told()
        signal.raise_signal(signal.SIGINT)
        print("closed the cluster")
"""


def test_a_ctrl_c_after_the_resume_line_ends_the_command_at_once() -> None:
    """In the ``oodsim`` command, the process exits at once, with 130 and nothing more to
    say; the semaphores of its queues are released (no resource tracker warning)."""
    ended = subprocess.run(
        [sys.executable, "-c", _OWNED_RUN], capture_output=True, text=True, timeout=60
    )
    assert ended.returncode == 130, ended.stderr
    assert ended.stdout.splitlines() == ["resume line", "workers killed"]
    assert ended.stderr == ""


def _sleeper(**options: object) -> subprocess.Popen:
    """A Python process that says ``ready``, sleeps 3 s and says ``survived``."""
    code = "import time; print('ready', flush=True); time.sleep(3); print('survived')"
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, **options
    )


def test_ctrl_c_never_reaches_a_process_started_shielded() -> None:
    """How the workers' fork server starts: Ctrl-C waits, undelivered, while it imports torch
    (a plain process dies of it)."""
    with signals.shielded():
        shielded = _sleeper()
    plain = _sleeper()
    for child in (shielded, plain):
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGINT)
    assert shielded.communicate(timeout=30)[0].strip() == "survived"
    assert shielded.returncode == 0
    plain.communicate(timeout=30)
    assert plain.returncode != 0


def test_a_ctrl_c_while_a_shielded_process_starts_is_not_lost() -> None:
    """The fork server used to start with Ctrl-C *ignored* in the driver too: one that came
    in those milliseconds was lost, and the run went on computing (the flaky
    ``test_ctrl_c_while_the_local_cluster_starts_is_one_resume_line`` under load)."""
    with pytest.raises(KeyboardInterrupt), signals.held():
        with signals.shielded():
            signal.raise_signal(signal.SIGINT)
            child = _sleeper()
        child.kill()
        child.communicate()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == set()
