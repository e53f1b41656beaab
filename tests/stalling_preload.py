"""A Dask worker preload for the tests of stalled workers: a worker process stops itself
(SIGSTOP) as it starts, before it registers with the scheduler, and so stands in for a worker
process that hangs as it starts (a stuck file system, a swapped-out process).

``$OODSIM_TEST_STALL`` names a folder (unset: the preload does nothing). The first worker
that starts stops itself when the folder holds a file ``first``; every worker stops itself
while it holds a file ``all``. Each worker that stops writes its pid to ``stopped-PID``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

VARIABLE = "OODSIM_TEST_STALL"
#: this module, as Dask's ``preload`` option names it
PRELOAD = __name__


def dask_setup(worker: Any) -> None:
    """Dask's preload hook, run in the worker process before it registers."""
    folder = os.environ.get(VARIABLE)
    if not folder:
        return
    folder_path = Path(folder)
    first = folder_path / "first"
    if not (folder_path / "all").exists():
        if not first.exists():
            return
        try:  # the first worker only: whoever renames the file
            first.rename(folder_path / "first-taken")
        except FileNotFoundError:
            return
    (folder_path / f"stopped-{os.getpid()}").touch()
    os.kill(os.getpid(), signal.SIGSTOP)
