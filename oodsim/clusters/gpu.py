"""Local clusters of CUDA workers, with one or several worker processes per GPU.

A worker process trains one seed at a time, and a small model leaves a large GPU idle much of
the time, so several worker processes per GPU (each training its own seed) can raise throughput
without changing any result: a seed computes the same thing whichever worker, and however many
neighbours, it has. Each worker is a ``distributed.Nanny`` whose process sees only its GPU
(``CUDA_VISIBLE_DEVICES``, set before torch starts in it, as dask-cuda does), so the worker's
GPU is ``cuda:0``; a killed worker is restarted by its nanny with the same device.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Sequence
from typing import Any

# cuBLAS is deterministic only with a fixed workspace configuration (torch's
# use_deterministic_algorithms on CUDA >= 10.2); it must be set before cuBLAS starts
CUBLAS_WORKSPACE_CONFIG = ":4096:8"
_logger = logging.getLogger(__name__)


def visible_gpus() -> list[str]:
    """The ids of the GPUs this process may use (``CUDA_VISIBLE_DEVICES`` when set, else
    ``0 .. n-1``); ``[]`` without CUDA."""
    # torch loads only when a cluster starts: the driver validates specs without it
    import torch

    if not torch.cuda.is_available():
        return []
    count = torch.cuda.device_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return [str(i) for i in range(count)]
    # CUDA stops at the first id it cannot use: torch's count says how many it took
    return [device.strip() for device in listed.split(",")][:count]


def worker_devices(gpus: Sequence[str], n_workers: int | None) -> list[str]:
    """The ``CUDA_VISIBLE_DEVICES`` value of each worker: one worker per GPU by default,
    else ``n_workers`` workers over the GPUs in turn (4 workers on ``["0", "1"]`` are
    ``["0", "1", "0", "1"]``: two per GPU)."""
    if not gpus:
        raise ValueError("no GPUs to place workers on")
    if n_workers is None:
        return list(gpus)
    if n_workers < 1:
        raise ValueError(f"n_workers must be at least 1, got {n_workers}")
    return [gpus[i % len(gpus)] for i in range(n_workers)]


def _worker_names(devices: Sequence[str]) -> list[str]:
    """A name per worker that says its GPU: ``gpu<id>-<k>`` for the k-th worker on GPU <id>."""
    seen: dict[str, int] = {}
    names = []
    for device in devices:
        k = seen.get(device, 0)
        names.append(f"gpu{device}-{k}")
        seen[device] = k + 1
    return names


def cuda_cluster(
    private: dict[str, Any],
    n_workers: int | None,
    gpus: Sequence[str] | None = None,
    *,
    nanny: type | None = None,
) -> Any | None:
    """A ``distributed.SpecCluster`` of CUDA workers (one thread each; one per GPU, or
    ``n_workers`` over the GPUs in turn), or None without a GPU or without dask-cuda (the
    optional extra ``[gpu]``) when ``gpus`` is not given.

    ``private`` are the ``LocalCluster`` options that keep oodsim's local cluster private
    (``security``, ``protocol``, ``host``, ``dashboard_address``, ``scheduler_kwargs``; see
    :func:`oodsim.clusters.cluster.private_options`); any other option in it (``preload_nanny``)
    goes to every worker's nanny, as ``LocalCluster`` passes it on. ``gpus`` (ids as in
    ``CUDA_VISIBLE_DEVICES``) defaults to :func:`visible_gpus`. ``nanny``: the class of the
    workers' nannies (default: distributed's ``Nanny``; oodsim's local cluster passes
    :class:`~oodsim.clusters.local_nanny.LocalNanny`).
    """
    if gpus is None:  # installing dask-cuda (the extra [gpu]) is how a user opts in
        if importlib.util.find_spec("dask_cuda") is None:
            return None
        gpus = visible_gpus()
    if not gpus:
        return None
    # distributed loads only when a cluster starts (cached runs start none)
    from distributed import Nanny, Scheduler, SpecCluster
    from distributed.worker_memory import parse_memory_limit

    devices = worker_devices(gpus, n_workers)
    security, host, protocol = private["security"], private["host"], private["protocol"]
    dashboard = private.get("dashboard_address")
    scheduler = {
        "cls": Scheduler,
        "options": {
            "host": host,
            "port": 0,
            "protocol": protocol,
            "security": security,
            "dashboard": dashboard is not None,
            "dashboard_address": dashboard,
            **private.get("scheduler_kwargs", {}),
        },
    }
    scheduler_only = ("dashboard_address", "scheduler_kwargs")
    common = {
        **{key: value for key, value in private.items() if key not in scheduler_only},
        "nthreads": 1,
        # the machine's memory shared by the workers, as LocalCluster and dask-cuda split it
        "memory_limit": parse_memory_limit("auto", 1, len(devices), logger=_logger),
        "silence_logs": logging.ERROR,
    }
    cublas = os.environ.get("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE_CONFIG)
    workers = {
        name: {
            "cls": nanny or Nanny,
            "options": {
                **common,
                "env": {
                    **private.get("env", {}),
                    "CUDA_VISIBLE_DEVICES": device,
                    "CUBLAS_WORKSPACE_CONFIG": cublas,
                },
            },
        }
        for name, device in zip(_worker_names(devices), devices, strict=True)
    }
    return SpecCluster(
        scheduler=scheduler, workers=workers, security=security, silence_logs=logging.ERROR
    )
