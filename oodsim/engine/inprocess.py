"""The engine's tasks run in the calling process, without Dask.

A local cluster costs its start (about 2.5 s) and a torch import per worker; with one worker it
buys nothing, so ``oodsim run --workers 1`` (and a run of one seed) runs here instead:
:class:`InProcess` is the part of ``distributed.Client`` the engine uses (``submit``,
``cancel``, ``subscribe_topic`` for progress notes), and its futures are computed one at a time,
in the order the engine collects them. The tasks, the store and the results are the same as
on a cluster, bit for bit (a test checks it); only the process differs. torch's thread count
and deterministic mode, which the tasks set as on a worker, are restored when the run ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from oodsim.engine.work import set_deterministic
from oodsim.progress_notes import TOPIC, Listener, listen_here, stop_listening_here


class Deferred:
    """A task submitted in-process: computed by :meth:`compute` (which
    :func:`oodsim.engine.waiting.as_landed` calls in submission order) or on first
    :meth:`result`, with the results of the deferred tasks among its arguments."""

    def __init__(self, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.function, self.args = function, args
        self.status = "pending"  # then "finished", "error" or "cancelled", like a Dask future
        self._value: Any = None
        self._error: BaseException | None = None

    def compute(self) -> None:
        """Run the task unless it ran (its upstream tasks first); an exception is kept for
        :meth:`result`, as a Dask future keeps it; Ctrl-C is not caught."""
        if self.status != "pending":
            return
        try:
            args = [arg.result() if isinstance(arg, Deferred) else arg for arg in self.args]
            self._value = self.function(*args)
            self.status = "finished"
        except Exception as error:
            self._error, self.status = error, "error"

    def result(self, timeout: float | None = None) -> Any:
        """The task's result, computed here (``timeout``: as a Dask future takes it)."""
        self.compute()
        if self.status == "cancelled":
            raise RuntimeError("the task was cancelled")
        if self._error is not None:
            raise self._error
        return self._value


class InProcess:
    """What the engine asks of a Dask client, done in this process (a context manager that
    restores torch's settings, and stops its topic subscriptions, on exit)."""

    def __init__(self) -> None:
        self._torch_state: tuple[int, bool, bool] | None = None
        self._progress_listener: Listener | None = None  # the listener of the subscribed handler

    def subscribe_topic(self, topic: str, handler: Callable[[tuple[float, Any]], None]) -> None:
        """Hand the progress notes of this process's tasks to ``handler`` as ``(time, message)``
        events, as a Dask client hands its workers' (progress notes are the only topic here)."""
        if topic != TOPIC:
            raise ValueError(f"an in-process run has events of {TOPIC!r} only, not {topic!r}")
        self.unsubscribe_topic(topic)
        self._progress_listener = lambda message: handler((time.time(), message))
        listen_here(self._progress_listener)

    def unsubscribe_topic(self, topic: str) -> None:
        if topic == TOPIC and self._progress_listener is not None:
            stop_listening_here(self._progress_listener)
            self._progress_listener = None

    def submit(self, function: Callable[..., Any], *args: Any, **_: Any) -> Deferred:
        """A deferred call of ``function(*args)`` (Dask's ``key``/``pure`` are not needed)."""
        self._remember_torch()
        return Deferred(function, args)

    def cancel(self, futures: Iterable[Deferred]) -> None:
        for future in futures:
            if future.status == "pending":
                future.status = "cancelled"

    def __enter__(self) -> InProcess:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.unsubscribe_topic(TOPIC)
        if self._torch_state is None:
            return
        # torch is loaded: the tasks imported it
        import torch

        threads, deterministic, warn_only = self._torch_state
        torch.set_num_threads(threads)
        if torch.are_deterministic_algorithms_enabled() != deterministic:
            set_deterministic(deterministic, warn_only=warn_only)

    def _remember_torch(self) -> None:
        """torch's settings before the first task changes them."""
        if self._torch_state is None:
            # the tasks need torch anyway: every task trains, infers or scores with it
            import torch

            self._torch_state = (
                torch.get_num_threads(),
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            )


def is_deferred(futures: Iterable[Any]) -> bool:
    """Whether ``futures`` are in-process tasks (or there are none)."""
    return all(isinstance(future, Deferred) for future in futures)
