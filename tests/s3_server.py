"""An S3-compatible server on 127.0.0.1 for the tests (moto's server mode), and fresh buckets.

``.ci/run`` starts one and names it in ``$OODSIM_TEST_S3_ENDPOINT``; without it each test
process starts its own on first need. The tests' processes, and the Dask workers they start,
reach it through the environment only: credentials as ``AWS_*`` variables, the endpoint as
fsspec's ``FSSPEC_S3_ENDPOINT_URL`` (how a user points oodsim at a service other than AWS)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid

ENDPOINT_ENV = "OODSIM_TEST_S3_ENDPOINT"
#: what the tests' processes see; the secret is searched for in every output that must not
#: show it
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "oodsimtestkey",
    "AWS_SECRET_ACCESS_KEY": "oodsim-test-secret-7f3a9c",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def prepare() -> None:
    """Point this process, and every process it starts, at the tests' server: the one
    ``$OODSIM_TEST_S3_ENDPOINT`` names, else one on a free port (started on first need)."""
    endpoint = os.environ.setdefault(ENDPOINT_ENV, f"http://127.0.0.1:{free_port()}")
    os.environ.update(CREDENTIALS)
    os.environ["FSSPEC_S3_ENDPOINT_URL"] = endpoint
    if "fsspec.config" in sys.modules:  # read at import: set it there too
        sys.modules["fsspec.config"].conf.setdefault("s3", {})["endpoint_url"] = endpoint


def answers(endpoint: str) -> bool:
    """Whether something listens at ``endpoint``."""
    host, port = endpoint.rsplit("//", 1)[1].rsplit(":", 1)
    with socket.socket() as probe:
        return probe.connect_ex((host, int(port))) == 0


def start(endpoint: str | None = None, *, authenticate: bool = False) -> subprocess.Popen:
    """A moto server at ``endpoint`` (default: a free port; read it from ``server.endpoint``);
    with ``authenticate`` it refuses every request whose credentials it does not know (all of
    them)."""
    endpoint = endpoint or f"http://127.0.0.1:{free_port()}"
    port = endpoint.rsplit(":", 1)[1]
    env = {**os.environ, **({"INITIAL_NO_AUTH_ACTION_COUNT": "0"} if authenticate else {})}
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", port],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    server.endpoint = endpoint  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if answers(endpoint):
            return server
        if server.poll() is not None:
            break
        time.sleep(0.1)
    server.kill()
    raise RuntimeError(f"moto's S3 server did not start at {endpoint}")


def new_bucket(endpoint: str) -> str:
    """A new, empty bucket's name."""
    import s3fs

    name = f"oodsim-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True).mkdir(name)
    return name
