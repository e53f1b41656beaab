"""Ctrl-C held while a cluster starts or closes (:mod:`oodsim.engine.signals`), with real
signals sent to this process and to a process started under :func:`signals.ignored`."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from oodsim.engine import signals


@pytest.fixture(autouse=True)
def python_handlers() -> Iterator[None]:
    """Python's own handlers, as in a terminal, put back after each test."""
    before = {s: signal.getsignal(s) for s in signals.STOPPING}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)


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


def test_a_stopping_run_closes_before_another_ctrl_c_acts() -> None:
    """``holding``: Ctrl-C acts at once until the run calls ``hold()`` (it is stopping); the
    next one waits for the block's end, where the run's own interrupt is on its way out."""
    steps = []
    with pytest.raises(KeyboardInterrupt), signals.holding() as stopping:
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            stopping.hold()
            signal.raise_signal(signal.SIGINT)  # impatient
            steps.append("closed the cluster")
            raise
    assert steps == ["closed the cluster"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_third_ctrl_c_stops_a_close_that_hangs() -> None:
    steps = []
    with pytest.raises(KeyboardInterrupt, match="hung"), signals.holding() as stopping:
        stopping.hold()
        signal.raise_signal(signal.SIGINT)
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            steps.append("stopped at once")
        raise KeyboardInterrupt("hung")
    assert steps == ["stopped at once"]


def test_a_process_started_under_ignored_ignores_ctrl_c() -> None:
    """How the workers' fork server starts: it ignores Ctrl-C while it imports torch."""
    show = "import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"
    with signals.ignored():
        child = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True)
    assert child.stdout.strip() == "True", child.stderr
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    plain = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True)
    assert plain.stdout.strip() == "False", plain.stderr
