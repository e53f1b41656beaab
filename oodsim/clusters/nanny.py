"""A Dask nanny preload that keeps glibc's default memory trimming in the workers it spawns.

Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_=65536`` in the environment of every worker it starts
(``distributed.nanny.pre-spawn-environ``), so that a worker returns freed memory to the OS at
once. For torch that is a loss: setting the variable also turns off glibc's adaptive thresholds,
so every tensor larger than 128 KiB is mapped fresh and faulted in page by page. Measured on
digits, a worker took 29 M minor page faults instead of 0.5 M, spent ~40% of its CPU time in the
kernel and trained 2.4 times slower than the same code in one process; without the variable the
50-seed main job took about half the time, with workers ~8% larger.

Every cluster oodsim starts loads this module into its nannies (``preload_nanny``; job
clusters pass ``--preload-nanny oodsim.clusters.nanny``). For a cluster you start yourself::

    dask worker tls://scheduler:8786 --preload-nanny oodsim.clusters.nanny

A value you set yourself in the nanny's environment is kept (unless it is Dask's own, 65536,
which an earlier Dask nanny of the same process may have left in it). One case stays out of
reach: a worker that an oodsim nanny restarts after another, plain Dask cluster was started in
the same process inherits the value that cluster's nanny left in the environment.
"""

from __future__ import annotations

import os
from typing import Any

#: The variable dropped from what a nanny sets before it spawns a worker.
TRIM_VARIABLE = "MALLOC_TRIM_THRESHOLD_"
#: This module, as Dask's ``preload_nanny`` option names it.
PRELOAD = __name__


def keep_default_trimming(nanny: Any) -> None:
    """Drop Dask's ``MALLOC_TRIM_THRESHOLD_`` from what ``nanny`` sets for its workers, and from
    this process's environment when it holds Dask's own value: a nanny copies what it sets into
    its process's ``os.environ`` and never takes it back, so any Dask cluster started here
    before leaves it behind for every later worker to inherit. A value of your own (any other)
    is kept."""
    if TRIM_VARIABLE in os.environ and not dasks_trim_in_environ():
        return
    for environment in (nanny.pre_spawn_env, nanny.env):
        environment.pop(TRIM_VARIABLE, None)
    os.environ.pop(TRIM_VARIABLE, None)


def dasks_trim_in_environ() -> bool:
    """Whether this process's environment holds Dask's own ``MALLOC_TRIM_THRESHOLD_`` (one an
    earlier Dask nanny left behind), rather than none or a value of the user's."""
    # distributed is loaded: this runs where a cluster starts
    import dask.config

    dasks = dask.config.get("distributed.nanny.pre-spawn-environ", {}).get(TRIM_VARIABLE)
    return dasks is not None and os.environ.get(TRIM_VARIABLE) == str(dasks)


def dask_setup(nanny: Any) -> None:
    """Dask's preload hook: runs in the nanny before it spawns its first worker."""
    keep_default_trimming(nanny)
