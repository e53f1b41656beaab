"""Progress notes: what a long task is doing right now, for the driver's status line.

Between a run's opening line and its first finished seed there may be minutes of training.
The work says what it is doing: training calls :func:`note_progress` after every epoch, inference
every batch, and the engine names the task (:func:`working_on`). On a Dask worker a note is
a worker event on :data:`TOPIC`, to which the driver's client subscribes; in the driver's own
process (in-process runs) it goes straight to the listeners of :func:`listen_here`. Notes are
throttled to one per :data:`MIN_INTERVAL` seconds per thread, so they cost nothing
measurable, and they never fail the work: a note that cannot be sent is dropped.

This module imports nothing heavy; ``distributed`` only where it is loaded already.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

#: the Dask event topic of progress notes
TOPIC = "oodsim-progress"
#: least seconds between two notes of one thread (the rest are dropped)
MIN_INTERVAL = 1.0

Listener = Callable[[dict[str, Any]], None]

_state = threading.local()
_listeners: list[Listener] = []  # in-process runs: the driver's own listener


@contextlib.contextmanager
def working_on(label: str) -> Iterator[None]:
    """Name the task this thread works on (e.g. "seed 3: train"), for the notes inside."""
    before = getattr(_state, "label", "")
    _state.label, _state.last = label, -math.inf
    try:
        yield
    finally:
        _state.label = before


def note_progress(stage: str, step: int | None = None, total: int | None = None) -> None:
    """Say that the current task is at ``stage`` (e.g. "training"), ``step`` of ``total``
    (e.g. an epoch). Throttled; silent where nobody listens."""
    now = time.monotonic()
    if now - getattr(_state, "last", -math.inf) < MIN_INTERVAL:
        return
    _state.last = now
    message = {
        "task": getattr(_state, "label", ""),
        "stage": stage,
        "step": step,
        "total": total,
    }
    with contextlib.suppress(Exception):  # a status line must never fail the work
        for listener in list(_listeners):
            listener(message)
        worker = _current_worker()
        if worker is not None:
            worker.log_event(TOPIC, message)


def describe(message: dict[str, Any]) -> str:
    """A progress note as words: "seed 3: train: training, epoch 4/30"."""
    stage = str(message.get("stage", ""))
    step, total = message.get("step"), message.get("total")
    if step is not None:
        stage += f" {step}" + (f"/{total}" if total is not None else "")
    task = str(message.get("task", ""))
    return f"{task}: {stage}" if task else stage


def listen_here(listener: Listener) -> None:
    """Deliver the progress notes of this process's own threads to ``listener`` (an in-process run's
    stand-in for a Dask client's topic, :class:`oodsim.engine.inprocess.InProcess`)."""
    _listeners.append(listener)


def stop_listening_here(listener: Listener) -> None:
    """Undo :func:`listen_here` (a listener not listening is ignored)."""
    with contextlib.suppress(ValueError):
        _listeners.remove(listener)


def _current_worker() -> Any:
    """The Dask worker running this thread's task, or None (also where distributed is not
    loaded: a plain process never imports it for a note)."""
    if "distributed" not in sys.modules:
        return None
    from distributed import get_worker  # loaded already (checked above): costs nothing

    try:
        return get_worker()
    except ValueError:
        return None
