"""The local cluster is private: only the driver and the workers it spawns can use it.

An unrelated local process (here: this test, without the cluster's in-memory credentials) must
not reach the scheduler, a nanny or a worker, and no dashboard or info page is served.
"""

from __future__ import annotations

import gc
import operator
import os
import signal
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask.config
import pytest
from distributed import Client, LocalCluster
from distributed.security import Security

import oodsim
from oodsim.clusters.address import LOCAL_SECURITY
from oodsim.clusters.dask_settings import LIGHT_MONITORING
from oodsim.clusters.nanny import TRIM_VARIABLE
from oodsim.engine import ClusterError, cluster_client
from tests.conftest import small_digits

TIMEOUT = 5  # seconds an intruder's connection attempt may take (refusals are immediate)


class Intruder(Security):
    """Credentials of its own that also skip checking the server's certificate: what another
    process can make without the cluster's secret."""

    def get_connection_args(self, role: str) -> dict[str, Any]:
        args = super().get_connection_args(role)
        args["ssl_context"].verify_mode = ssl.CERT_NONE
        return args


@pytest.fixture(autouse=True)
def no_trim_variable_left_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain Dask nanny leaves MALLOC_TRIM_THRESHOLD_ in this process's environment, where a
    worker that oodsim's nanny restarts later would inherit it: each test starts without it
    and its own leftovers are undone."""
    monkeypatch.delenv(TRIM_VARIABLE, raising=False)


@pytest.fixture(scope="module")
def private() -> Iterator[Client]:
    with cluster_client(n_workers=1) as client:
        yield client


def host_port(address: str) -> tuple[str, int]:
    host, port = address.split("://", 1)[-1].rsplit(":", 1)
    return host, int(port)


def listening(client: Client) -> dict[str, str]:
    """Every comm address of the cluster: scheduler, nannies, workers."""
    found = {"scheduler": client.scheduler.address}
    for worker, info in client.scheduler_info()["workers"].items():
        found[f"worker {worker}"] = worker
        found[f"nanny {worker}"] = info["nanny"]
    return found


def raw_reply(address: str) -> bytes:
    """What a plain TCP client that sends bytes which are not a TLS hello gets back before the
    server closes the connection (nothing, or a TLS alert record)."""
    reply = b""
    with socket.create_connection(host_port(address), timeout=TIMEOUT) as raw:
        raw.sendall(b"\x00" * 64)
        try:
            while chunk := raw.recv(4096):
                reply += chunk
        except ConnectionError:
            pass
    return reply


def tls_session_refused(address: str, certificate: Path | None = None) -> bool:
    """Open a raw TLS connection to ``address`` that trusts any server, presenting
    ``certificate`` (a PEM holding a key and a certificate) or none; True when the server
    ends it instead of talking."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if certificate is not None:
        context.load_cert_chain(certificate)
    with socket.create_connection(host_port(address), timeout=TIMEOUT) as raw:
        try:
            with context.wrap_socket(raw) as tls:
                tls.sendall(b"\x00" * 64)
                return tls.recv(1) == b""
        except (ssl.SSLError, ConnectionError):
            return True


def test_plain_clients_cannot_reach_the_local_scheduler(private: Client) -> None:
    address = private.scheduler.address
    attempts = {
        "no credentials": (address, None),
        "plain tcp": (address.replace("tls://", "tcp://"), None),
        "own certificate": (address, Security.temporary()),
        "own certificate, server unchecked": (address, Intruder.temporary()),
    }
    for name, (target, security) in attempts.items():
        # any error is a refusal (on a loaded machine a refused Client can also fail while
        # starting its event loop); a client that connects fails the test (pytest.fail is
        # not an Exception, so raises() does not swallow it)
        with pytest.raises(Exception):  # noqa: B017, PT011
            Client(target, timeout=TIMEOUT, security=security)
            pytest.fail(f"{name}: connected")
        # the failed client's finalizer runs now, while the cluster is up: run by the garbage
        # collector inside the next Client's start, it waits for a lock that start holds
        # (distributed's LoopRunner) and the test hangs
        gc.collect()
    clients = private.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.clients))
    assert set(clients) - {"fire-and-forget"} == {private.id}


def test_raw_connections_to_every_port_are_refused(private: Client, tmp_path: Path) -> None:
    own = Security.temporary()
    pem = tmp_path / "own.pem"
    pem.write_text(own.tls_client_key + own.tls_client_cert)
    for name, address in listening(private).items():
        assert address.startswith("tls://127.0.0.1:"), name
        reply = raw_reply(address)
        assert reply == b"" or reply.startswith(b"\x15"), f"{name} answered plain bytes"
        assert tls_session_refused(address), f"{name} talked without a client certificate"
        assert tls_session_refused(address, pem), f"{name} talked to a foreign certificate"


def test_the_driver_runs_tasks_over_tls_on_loopback(private: Client) -> None:
    assert private.scheduler.address.startswith("tls://127.0.0.1:")
    assert private.submit(operator.add, 1, 2, pure=False).result() == 3
    assert list(private.nthreads().values()) == [1]
    # a driver of this process given the address (tests, benchmarks/soak.py) gets in too
    with cluster_client(private.scheduler.address) as again:
        assert again.submit(operator.mul, 2, 3, pure=False).result() == 6
    # the secret never shows on a process's command line (world-readable in /proc)
    key = private.cluster.security.tls_client_key.splitlines()[1].encode()
    for pid in [os.getpid(), *private.run(os.getpid).values()]:
        assert key not in Path(f"/proc/{pid}/cmdline").read_bytes()


def test_no_dashboard_or_info_pages_are_served(private: Client) -> None:
    def http_of(dask_scheduler=None, dask_worker=None) -> tuple[str, int]:
        server = (dask_scheduler or dask_worker).http_server
        return server.address, server.port

    servers = [private.run_on_scheduler(http_of), *private.run(http_of).values()]
    pages = ["/status", "/info/main/workers.html", "/json/identity.json", "/metrics", "/health"]
    for host, port in servers:
        assert host == "127.0.0.1"
        for page in pages:
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"http://{host}:{port}{page}", timeout=TIMEOUT)
            assert refused.value.code == 404, page


def test_workers_keep_the_default_memory_trimming(private: Client) -> None:
    """Dask's nanny would set MALLOC_TRIM_THRESHOLD_ in its workers (torch then trains 2x
    slower); oodsim's nanny preload drops it. (``os.getenv`` runs on the worker; a bound
    ``os.environ.get`` would be pickled with the driver's environment.)"""
    assert set(private.run(os.getenv, TRIM_VARIABLE).values()) == {None}
    assert set(private.run(os.getenv, "OMP_NUM_THREADS").values()) == {"1"}


def test_a_trimming_threshold_the_user_set_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TRIM_VARIABLE, "131072")
    with cluster_client(n_workers=1) as client:
        assert set(client.run(os.getenv, TRIM_VARIABLE).values()) == {"131072"}


def test_dasks_value_left_behind_by_an_earlier_nanny_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Dask nanny copies MALLOC_TRIM_THRESHOLD_=65536 into its process's environment and
    leaves it there: a plain LocalCluster started earlier in the same process does that."""
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address="127.0.0.1:0"):
        assert os.environ.get(TRIM_VARIABLE) == "65536"
    monkeypatch.setenv(TRIM_VARIABLE, "65536")  # as it is now: explicit for the reader
    with cluster_client(n_workers=1) as client:
        assert set(client.run(os.getenv, TRIM_VARIABLE).values()) == {None}


def _monitoring(client: Client) -> dict[str, Any]:
    """How often the scheduler and each worker watch themselves: the tick of their event
    loops (ms), the worker's memory monitor (ms) and its profiler; and the Dask configuration
    they hold, for each of :data:`LIGHT_MONITORING`'s keys."""

    def server(dask_scheduler: Any = None, dask_worker: Any = None) -> dict[str, Any]:
        found = {key: dask.config.get(key) for key in LIGHT_MONITORING}
        callbacks = (dask_scheduler or dask_worker).periodic_callbacks
        found["tick ms"] = callbacks["tick"].callback_time
        if dask_worker is not None:
            found["profiling"] = "profile" in callbacks
        return found

    return {"scheduler": client.run_on_scheduler(server), **client.run(server)}


def test_the_cluster_watches_itself_at_rates_for_no_dashboard(private: Client) -> None:
    """The profiler off and slower monitors than Dask's defaults, on the scheduler (in this
    process) and on the workers."""
    found = _monitoring(private)
    for name, server in found.items():
        assert server["tick ms"] == 500, name
        assert server["distributed.admin.system-monitor.interval"] == "1s", name
        assert server["distributed.worker.memory.monitor-interval"] == "500ms", name
        assert server["distributed.worker.profile.enabled"] is False, name
        assert server.get("profiling", False) is False, name


def test_a_monitoring_rate_the_user_set_is_kept() -> None:
    with (
        dask.config.set({"distributed.admin.tick.interval": "50ms"}),
        cluster_client(n_workers=1) as client,
    ):
        found = _monitoring(client)
    assert {server["tick ms"] for server in found.values()} == {50}
    assert {server["distributed.admin.system-monitor.interval"] for server in found.values()} == {
        "1s"
    }


def test_a_restarted_worker_is_private_too(private: Client) -> None:
    """The nanny restarts a killed worker with the same credentials and no pages (runs last
    on the module's cluster)."""
    ((old, pid),) = private.run(os.getpid).items()
    os.kill(pid, signal.SIGKILL)
    for _ in range(600):  # a bound against hanging only, not a measure
        if set(private.scheduler_info()["workers"]) not in (set(), {old}):
            break
        time.sleep(0.1)
    else:
        pytest.fail("the nanny did not restart the worker")
    (worker,) = private.run(lambda dask_worker: dask_worker.http_server.port).items()
    assert worker[0].startswith("tls://127.0.0.1:")
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(f"http://127.0.0.1:{worker[1]}/health", timeout=TIMEOUT)
    assert tls_session_refused(worker[0])
    assert set(private.run(os.getenv, TRIM_VARIABLE).values()) == {None}
    assert private.submit(operator.add, 3, 4, pure=False).result() == 7


def test_credentials_are_forgotten_when_the_cluster_closes() -> None:
    with cluster_client(n_workers=1) as client:
        address = client.scheduler.address
        assert address in LOCAL_SECURITY
    assert address not in LOCAL_SECURITY


def test_run_on_the_private_local_cluster(tmp_path: Path) -> None:
    results = oodsim.run(
        small_digits(1), cluster="local", n_workers=1, cache=tmp_path / "c", progress=False
    )
    assert results.sizes["seed"] == 1 and not any(results.failure.values)


def test_existing_tls_scheduler_is_reached_with_dask_config(tmp_path: Path) -> None:
    """What docs/cluster.md tells users with a TLS scheduler: credentials in Dask's config."""
    issued, foreign = Security.temporary(), Security.temporary()

    def tls_config(security: Security, name: str) -> dict[str, str]:
        (tmp_path / f"{name}-ca.pem").write_text(security.tls_ca_file)
        (tmp_path / f"{name}-key.pem").write_text(security.tls_client_key)
        return {
            "distributed.comm.tls.ca-file": str(tmp_path / f"{name}-ca.pem"),
            "distributed.comm.tls.client.cert": str(tmp_path / f"{name}-ca.pem"),  # self-signed
            "distributed.comm.tls.client.key": str(tmp_path / f"{name}-key.pem"),
        }

    with LocalCluster(
        n_workers=1,
        processes=False,
        protocol="tls",
        host="127.0.0.1",
        security=issued,
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},  # not 8787, maybe taken
    ) as cluster:
        address = cluster.scheduler_address
        with pytest.raises(ClusterError, match="holds no TLS credentials"), cluster_client(address):
            pass
        with (
            pytest.raises(ClusterError, match="use the scheduler's tls:// address"),
            dask.config.set({"distributed.comm.require-encryption": True}),
            cluster_client(address.replace("tls://", "tcp://")),
        ):
            pass
        with (
            pytest.raises(ClusterError, match="TLS handshake .* failed"),
            dask.config.set(tls_config(foreign, "foreign")),
            cluster_client(address),
        ):
            pass
        with dask.config.set(tls_config(issued, "issued")), cluster_client(address) as client:
            assert client.submit(operator.add, 2, 2, pure=False).result() == 4
