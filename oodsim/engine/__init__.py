"""The engine every protocol plugs into: plan → compute → store → score → results.

:func:`load` reads a spec file of any protocol; :func:`run` plans each seed's tasks with the
spec's protocol, computes the missing ones on a Dask cluster, scores every seed from the store
and returns one ``xarray`` result (:mod:`oodsim.results`).
"""

from oodsim.clusters.cluster import ClusterError, cluster_client
from oodsim.engine.run import OutputExists, RunAborted, run
from oodsim.protocols import load
from oodsim.specs.cluster import ClusterSpec

__all__ = [
    "ClusterError",
    "ClusterSpec",
    "OutputExists",
    "RunAborted",
    "cluster_client",
    "load",
    "run",
]
