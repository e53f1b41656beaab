"""The Dask configuration of oodsim's clusters (local and job clusters): what they serve and
how often Dask's servers watch themselves. Each is a ``dask.config.set`` mapping, set while a
cluster starts (its scheduler and nannies read it then; a nanny hands it to its worker)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Dask opens an HTTP port on every scheduler and worker even without a dashboard; on oodsim's
# clusters it serves nothing (no dashboard, info, JSON or metrics pages)
NO_HTTP_ROUTES = {"distributed.scheduler.http.routes": [], "distributed.worker.http.routes": []}

#: Dask's monitors of its own servers, which feed the dashboard that oodsim's local cluster
#: does not serve, at rates for a cluster without one (Dask's defaults after ``#``): an idle
#: local cluster of two workers takes 2 % of a core with these, 13 % with Dask's (its
#: scheduler's share in the driver), CPU that a run on few cores takes from its seeds. A value
#: set in the user's Dask configuration (anything but Dask's default) is kept
#: (:func:`unless_configured`).
LIGHT_MONITORING: dict[str, tuple[Any, Any]] = {
    "distributed.worker.profile.enabled": (False, True),  # samples each thread 100 times a second
    "distributed.admin.tick.interval": ("500ms", "20ms"),  # the event loop's latency probe
    "distributed.admin.system-monitor.interval": ("1s", "500ms"),  # a process's CPU, memory
    "distributed.worker.memory.monitor-interval": ("500ms", "100ms"),  # the memory limit's
}


def unless_configured(settings: Mapping[str, tuple[Any, Any]]) -> dict[str, Any]:
    """Of ``settings`` (key → (oodsim's value, Dask's default)), oodsim's value for each key
    whose configured value is Dask's default: a value the user's Dask configuration sets is
    kept. Durations compare as durations (``"5 minutes"`` is ``300``)."""
    # dask loads only when a cluster is needed (cached runs start none)
    import dask.config
    from dask.utils import parse_timedelta

    def is_default(value: Any, default: Any) -> bool:
        if isinstance(default, str):  # a duration
            return value is not None and parse_timedelta(value) == parse_timedelta(default)
        return value == default

    return {
        key: ours
        for key, (ours, dasks) in settings.items()
        if is_default(dask.config.get(key, dasks), dasks)
    }
