"""The Dask configuration of oodsim's clusters (local and job clusters): what they serve and
how often Dask's servers watch themselves. Each is a ``dask.config.set`` mapping, set while a
cluster starts (its scheduler and nannies read it then; a nanny hands it to its worker)."""

from __future__ import annotations

from typing import Any

# Dask opens an HTTP port on every scheduler and worker even without a dashboard; on oodsim's
# clusters it serves nothing (no dashboard, info, JSON or metrics pages)
NO_HTTP_ROUTES = {"distributed.scheduler.http.routes": [], "distributed.worker.http.routes": []}

#: Dask's monitors of its own servers, which feed the dashboard that oodsim's local cluster
#: does not serve, at rates for a cluster without one (Dask's defaults after ``#``): an idle
#: local cluster of two workers takes 2 % of a core with these, 13 % with Dask's (its
#: scheduler's share in the driver), CPU that a run on few cores takes from its seeds. A value
#: set in the user's Dask configuration (anything but Dask's default) is kept.
LIGHT_MONITORING: dict[str, tuple[Any, Any]] = {
    "distributed.worker.profile.enabled": (False, True),  # samples each thread 100 times a second
    "distributed.admin.tick.interval": ("500ms", "20ms"),  # the event loop's latency probe
    "distributed.admin.system-monitor.interval": ("1s", "500ms"),  # a process's CPU, memory
    "distributed.worker.memory.monitor-interval": ("500ms", "100ms"),  # the memory limit's
}


def light_monitoring() -> dict[str, Any]:
    """The settings of :data:`LIGHT_MONITORING` whose configured value is Dask's default."""
    # dask loads only when a cluster is needed (cached runs start none)
    import dask.config
    from dask.utils import parse_timedelta

    def same(a: Any, b: Any) -> bool:
        return a == b if isinstance(b, bool) else parse_timedelta(a) == parse_timedelta(b)

    return {
        key: ours
        for key, (ours, dasks) in LIGHT_MONITORING.items()
        if same(dask.config.get(key, dasks), dasks)
    }
