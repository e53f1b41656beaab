"""Reaching a scheduler at an address (``dask scheduler``, or a local cluster this process
started): probed first, so a wrong address fails in seconds with what was tried, with the
credentials of Dask's configuration or of that local cluster."""

from __future__ import annotations

from typing import Any

from oodsim.errors import ClusterError

CONNECT_TIMEOUT = 10.0
#: what to check when something other than a scheduler listens at an address
_OTHER_SERVICE = (
    "A scheduler's address is the one `dask scheduler` prints (port 8786 by default); its "
    "dashboard (8787 by default) is a web server."
)


# scheduler address -> credentials, for the local clusters this process runs (a driver that
# passes such an address, as tests and benchmarks/soak.py do, connects with them)
LOCAL_SECURITY: dict[str, Any] = {}


def _probe_scheduler(address: str, timeout: float, security: Any) -> None:
    """Connect to ``address`` and complete the comm handshake within ``timeout`` seconds.

    ``distributed.Client(address, timeout=...)`` bounds the TCP connect but then waits for the
    handshake without a bound, so a server that accepts connections and never answers (a
    stopped scheduler, a wrong port) hangs it forever. This probe runs the same connect in its
    own event loop (in a thread, so it works under a running loop too) with a hard deadline.
    """
    # distributed loads only when a cluster is needed (cached runs start none)
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from distributed.comm import connect

    async def probe() -> None:
        args = security.get_connection_args("client")
        comm = await asyncio.wait_for(connect(address, timeout=timeout, **args), timeout)
        await comm.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, probe()).result()


def _refused_at_once(address: str) -> bool:
    """Raise ConnectionRefusedError at once where nothing listens at a ``tcp://`` or
    ``tls://`` address (distributed would retry for ``CONNECT_TIMEOUT`` seconds first); True
    when something accepted the connection."""
    # loaded only when a cluster address is contacted (cached runs contact none)
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address)
    if parts.scheme not in ("tcp", "tls") or parts.hostname is None or parts.port is None:
        return False  # other schemes, or not an address: distributed says what is wrong
    with socket.create_connection((parts.hostname, parts.port), timeout=CONNECT_TIMEOUT):
        return True


def _security_for(address: str) -> Any:
    """The credentials to reach ``address``: a local cluster's of this process, else what
    Dask's configuration says (``distributed.client.security-loader``, then
    ``distributed.comm.tls.*``), as ``distributed.Client(address)`` itself would choose."""
    # distributed loads only when a cluster is needed (cached runs start none)
    import dask.config
    from distributed.security import Security
    from distributed.utils import import_term

    if address in LOCAL_SECURITY:
        return LOCAL_SECURITY[address]
    security = None
    loader = dask.config.get("distributed.client.security-loader", None)
    if loader:
        try:
            security = import_term(loader)({"address": address})
        except ImportError as error:
            raise ClusterError(
                f"distributed.client.security-loader {loader!r} cannot be imported ({error})"
            ) from None
    return security if security is not None else Security()


def _not_dask(address: str, error: BaseException) -> ClusterError:
    """The error of a server at ``address`` whose reply is not Dask's protocol: a frame of
    absurd size, no message at all, NUL bytes (``struct.error``), any other garbage."""
    kind = type(error)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
    return ClusterError(
        f"what answers at {address!r} is not a Dask scheduler: its reply is not Dask's "
        f"protocol ({name}). {_OTHER_SERVICE}"
    )


def check_scheduler(address: str) -> None:
    """That a Dask scheduler answers at ``address`` (:func:`connect_client`'s checks, without
    the client): :class:`ClusterError` in one line otherwise. A run calls it before it makes
    a store that does not exist yet, so a bad address leaves no folder behind."""
    connect_client(address, client=False)


def connect_client(address: str, *, client: bool = True) -> Any:
    """A client to the scheduler at ``address`` (None with ``client=False``: only the
    checks), or :class:`ClusterError` in one line: whatever answers there that is not a Dask
    scheduler, whatever bytes it sends, is named as such."""
    # distributed loads only when a cluster is needed (cached runs start none)
    import ssl

    from distributed import Client
    from distributed.comm.core import FatalCommClosedError  # distributed's TLS failures

    security = _security_for(address)
    listening = False  # something accepted a TCP connection there
    try:
        listening = _refused_at_once(address)
        _probe_scheduler(address, CONNECT_TIMEOUT, security)
        if not client:
            return None
        return Client(address, timeout=CONNECT_TIMEOUT, security=security)
    except (MemoryError, ValueError) as error:
        if not listening:  # ValueError: not an address at all
            raise ClusterError(
                f"{address!r} is not a Dask scheduler address ({error}); expected e.g. "
                "tcp://host:8786"
            ) from None
        # the answer read as a frame of absurd size, or as no message at all
        raise _not_dask(address, error) from None
    except TypeError as error:  # distributed's words for a tls:// address without credentials
        if "ssl_context" not in str(error):
            if listening:
                raise _not_dask(address, error) from None
            raise
        raise ClusterError(
            f"{address!r} is a TLS address but Dask's configuration holds no TLS credentials: "
            "set distributed.comm.tls.ca-file, distributed.comm.tls.client.cert and "
            "distributed.comm.tls.client.key (see docs/cluster.md)"
        ) from None
    except RuntimeError as error:  # distributed's words for tcp:// when TLS is required
        if "encryption required" not in str(error):
            if listening:
                raise _not_dask(address, error) from None
            raise
        raise ClusterError(
            f"{error}: use the scheduler's tls:// address (see docs/cluster.md)"
        ) from None
    except (ssl.SSLError, FatalCommClosedError) as error:
        raise ClusterError(
            f"the TLS handshake with the Dask scheduler at {address!r} failed "
            f"({str(error) or repr(error.__cause__)}); check the distributed.comm.tls.* "
            "credentials against the scheduler's (see docs/cluster.md)"
        ) from None
    except ConnectionRefusedError:
        raise ClusterError(
            f"no Dask scheduler answered at {address!r}: nothing listens there (connection "
            "refused). Start one with `dask scheduler` and `dask worker ADDRESS`, or check the "
            "port"
        ) from None
    except (OSError, TimeoutError) as error:
        found = (
            " Something accepts connections there but did not answer as one: a stopped "
            f"scheduler, or another service? {_OTHER_SERVICE}"
            if listening
            else ""
        )
        raise ClusterError(
            f"no Dask scheduler answered at {address!r} within {CONNECT_TIMEOUT:.0f} s "
            f"({str(error) or type(error).__name__}).{found} Start one with `dask scheduler` "
            "and `dask worker ADDRESS`; a scheduler that uses TLS needs a tls:// address."
        ) from None
    except Exception as error:
        if not listening:
            raise
        raise _not_dask(address, error) from None  # garbage: struct.error, KeyError, ...
