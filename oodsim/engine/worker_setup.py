"""What a worker of a run does once, when it joins: take the driver's registrations.

A script registers detectors, datasets and architectures in the driver; a worker never ran
that script. :class:`WorkerSetup`, a Dask worker plugin registered when the run's client
starts (:func:`oodsim.clusters.cluster.cluster_client`), adopts them on every worker, those that
join later too (batch jobs that leave the queue, a worker its nanny restarted), so that no
task or scoring call carries them. It also drops the data fingerprints the worker computed
for earlier runs, and installs the filter that keeps the worker's log of oodsim's own failed
tasks to the driver's one line (:func:`oodsim.engine.work.quiet_own_failures`).

Imported only where a cluster runs: it needs ``distributed``.
"""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol import pickle

from oodsim.data import fingerprint
from oodsim.engine.work import Shipped, quiet_own_failures


class WorkerSetup(WorkerPlugin):
    """Makes a worker look like the driver: its registrations, oodsim's log filter.

    The registrations travel as bytes and are unpickled in :meth:`setup`: a worker that cannot
    unpickle them (a script's module it cannot import) reports the error to the driver, which
    stops the run in one line, and a worker that joins later logs it and keeps running, instead
    of failing to start (distributed unpickles a plugin outside its error handling)."""

    def __init__(self, shipped: Shipped) -> None:
        self.payload = pickle.dumps(shipped)

    def setup(self, worker: Any) -> None:
        quiet_own_failures()
        fingerprint.forget()  # a worker of an earlier run may have fingerprinted older data
        pickle.loads(self.payload).adopt()
