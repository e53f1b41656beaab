"""Starting, watching and ending the Dask clusters a run computes on.

A run's engine (:mod:`oodsim.engine`: plan, submit, collect, stop, save) asks
:func:`~oodsim.clusters.cluster.cluster_client` for a client and gets one to a scheduler at an
address (:mod:`~oodsim.clusters.address`), to a private local cluster whose workers fork from a
server that imported torch once (:mod:`~oodsim.clusters.forkserver`, the nanny of
:mod:`~oodsim.clusters.local_nanny`, CUDA workers in :mod:`~oodsim.clusters.gpu`), or to a
cluster of batch jobs (:mod:`~oodsim.clusters.job_cluster`, through dask-jobqueue in
:mod:`~oodsim.clusters.jobqueue`, the batch system's commands and job states watched while no
worker has joined: :mod:`~oodsim.clusters.job_watch`). Ctrl-C, SIGTERM and SIGHUP while a
cluster starts or closes are :mod:`~oodsim.clusters.signals`'. Every use of distributed's and
dask-jobqueue's internals is in :mod:`~oodsim.clusters.dask_compat`.

Nothing here imports the engine: a cluster knows nothing of the work it runs.
"""
