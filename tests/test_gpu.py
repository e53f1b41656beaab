"""CUDA worker clusters: device placement, and a real cluster of packed workers on this CPU.

Without a GPU here, the cluster is started with explicit GPU ids: its workers are real
processes that see their ``CUDA_VISIBLE_DEVICES`` (what torch would use), and nothing else
about it depends on CUDA.
"""

from __future__ import annotations

import operator
import os
import signal
import time
from collections.abc import Iterator

import pytest
from distributed import Client

from oodsim.clusters.cluster import LOCAL_HOST, private_options
from oodsim.clusters.gpu import CUBLAS_WORKSPACE_CONFIG, cuda_cluster, visible_gpus, worker_devices
from oodsim.clusters.nanny import TRIM_VARIABLE


def devices_by_name(client: Client) -> dict[str, str]:
    """Worker name -> the CUDA_VISIBLE_DEVICES its process sees."""
    names = {a: w["name"] for a, w in client.scheduler_info()["workers"].items()}
    seen = client.run(lambda: os.environ["CUDA_VISIBLE_DEVICES"])
    return {names[address]: device for address, device in seen.items()}


@pytest.fixture(scope="module")
def packed() -> Iterator[Client]:
    """4 workers on 2 (pretend) GPUs with the private options of oodsim's local cluster;
    ``resources`` stands for any other worker option (LocalCluster hands those to every
    worker)."""
    options = {**private_options(), "resources": {"slot": 1}}
    cluster = cuda_cluster(options, n_workers=4, gpus=["0", "1"])
    assert cluster is not None
    with cluster, Client(cluster) as client:
        client.wait_for_workers(4)
        yield client


def test_one_worker_per_gpu_by_default() -> None:
    assert worker_devices(["0", "1"], None) == ["0", "1"]
    assert worker_devices(["3"], None) == ["3"]


def test_workers_are_packed_over_the_gpus_in_turn() -> None:
    assert worker_devices(["0", "1"], 4) == ["0", "1", "0", "1"]
    assert worker_devices(["0"], 3) == ["0", "0", "0"]
    assert worker_devices(["0", "1"], 1) == ["0"]


def test_uneven_counts_differ_by_at_most_one_per_gpu() -> None:
    assert worker_devices(["0", "1"], 3) == ["0", "1", "0"]
    devices = worker_devices(["2", "5", "7"], 8)
    assert devices == ["2", "5", "7", "2", "5", "7", "2", "5"]
    assert sorted(devices.count(g) for g in ("2", "5", "7")) == [2, 3, 3]


def test_bad_counts_and_no_gpus_are_errors() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        worker_devices(["0"], 0)
    with pytest.raises(ValueError, match="no GPUs"):
        worker_devices([], 2)


def test_no_gpu_here_means_no_cuda_cluster() -> None:
    assert visible_gpus() == []
    assert cuda_cluster(private_options(), None) is None
    assert cuda_cluster(private_options(), 4) is None


def test_each_packed_worker_sees_only_its_gpu(packed: Client) -> None:
    assert devices_by_name(packed) == {"gpu0-0": "0", "gpu1-0": "1", "gpu0-1": "0", "gpu1-1": "1"}
    assert sorted(packed.nthreads().values()) == [1, 1, 1, 1]
    cublas = packed.run(lambda: os.environ["CUBLAS_WORKSPACE_CONFIG"])
    assert set(cublas.values()) == {
        os.environ.get("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE_CONFIG)
    }
    assert len(set(packed.run(os.getpid).values())) == 4  # four processes
    workers = packed.scheduler_info()["workers"].values()
    assert [w["resources"] for w in workers] == [{"slot": 1}] * 4


def test_the_packed_cluster_is_private(packed: Client) -> None:
    """The options of oodsim's local cluster hold for its GPU workers too: TLS on loopback,
    and the nanny preload that keeps the default memory trimming."""
    assert set(packed.run(os.getenv, TRIM_VARIABLE).values()) == {None}
    address = packed.scheduler.address
    assert address.startswith(f"tls://{LOCAL_HOST}:")
    for worker, info in packed.scheduler_info()["workers"].items():
        assert worker.startswith(f"tls://{LOCAL_HOST}:")
        assert info["nanny"].startswith(f"tls://{LOCAL_HOST}:")
    with pytest.raises(Exception):  # noqa: B017, PT011  # no credentials: refused
        Client(address, timeout=5)
        pytest.fail("connected without the cluster's credentials")
    assert packed.submit(operator.add, 1, 2, pure=False).result() == 3


def test_a_killed_worker_comes_back_on_its_gpu(packed: Client) -> None:
    """Runs last on the module's cluster: the nanny restarts the worker with its device."""
    pids = {info["name"]: None for info in packed.scheduler_info()["workers"].values()}
    names = {a: w["name"] for a, w in packed.scheduler_info()["workers"].items()}
    for address, pid in packed.run(os.getpid).items():
        pids[names[address]] = pid
    os.kill(pids["gpu1-1"], signal.SIGKILL)
    for _ in range(600):  # a bound against hanging only, not a measure
        workers = packed.scheduler_info()["workers"]
        if len(workers) == 4 and set(workers) != set(names):
            break
        time.sleep(0.1)
    else:
        pytest.fail("the nanny did not restart the worker")
    assert devices_by_name(packed) == {"gpu0-0": "0", "gpu1-0": "1", "gpu0-1": "0", "gpu1-1": "1"}
