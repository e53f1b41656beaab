"""Where a run's workers come from: the ``[cluster]`` table of any spec and ``--cluster``.

:class:`ClusterSpec` is an execution setting like a data root: every protocol's spec may hold one
(field ``cluster``, TOML table ``[cluster]``), and it never enters a key, so a spec run on this
machine, on SLURM or on PBS has the same key, the same store entries and the same results.
``kind`` picks the cluster: ``local`` (oodsim's private local cluster), ``in-process`` (no
cluster: the tasks run in the calling process), ``slurm`` and ``pbs``
(workers are batch jobs submitted through dask-jobqueue) or ``local-jobs`` (dask-jobqueue's own
backend that runs each job as a local process: the whole job path without a batch system, for
tests and CI). The job fields (``cores``, ``memory``, ...) describe one job; the local cluster
ignores them.

:func:`resolve_cluster` combines the table with ``oodsim.run(cluster=..., address=...)`` or
``oodsim run --cluster KIND|ADDRESS --address ADDRESS``. Nothing here imports Dask.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

import attrs

from oodsim.errors import SpecError
from oodsim.specs.converter import structure
from oodsim.specs.types import one_of, path_string, positive, register_table, spec_class, spec_error

#: No cluster: every task runs in the calling process (see :func:`runs_in_process`).
IN_PROCESS = "in-process"
#: Every kind of cluster a ``[cluster]`` table or ``--cluster`` may name.
CLUSTER_KINDS = (IN_PROCESS, "local", "local-jobs", "pbs", "slurm")
#: The kinds whose workers are batch jobs (dask-jobqueue).
JOB_KINDS = ("local-jobs", "pbs", "slurm")
#: ``HH:MM:SS``, hours unbounded: the walltime form SLURM and PBS both read.
WALLTIME = re.compile(r"\d{1,5}:[0-5]\d:[0-5]\d")
#: A size such as ``4GB``, ``500 MiB`` or ``1.5GB`` (what ``dask.utils.parse_bytes`` reads).
MEMORY = re.compile(r"(\d+(\.\d*)?|\.\d+) ?([kKMGTP]i?)?B")
#: The least memory of one worker process (bytes): a Dask worker holds about 530 MiB once
#: torch and distributed are imported (measured RSS, torch 2.14 on Linux) and its nanny stops
#: it at 95 % of its share, so with less it dies before it computes anything (``memory =
#: "1MB"`` ran for minutes and failed without a word about memory). Rounded down, so that a
#: smaller torch build is not refused.
MIN_WORKER_MEMORY = 512 * 2**20
_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
#: A scheduler address given where a kind may stand: ``tls://host:8786`` or ``host:8786``.
ADDRESS = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+|[A-Za-z0-9_.-]+:\d{1,5}")


def _walltime(instance: Any, attribute: attrs.Attribute, value: str | None) -> None:
    if value is not None and not WALLTIME.fullmatch(value):
        raise spec_error(instance, attribute.name, value, "a duration HH:MM:SS, e.g. '02:00:00'")


def walltime_seconds(value: str) -> int:
    """The seconds of a ``walltime`` (``"02:00:00"``: 7200), of the form :data:`WALLTIME`."""
    hours, minutes, seconds = (int(part) for part in value.split(":"))
    return 3600 * hours + 60 * minutes + seconds


def memory_bytes(value: str) -> int:
    """The bytes of a ``memory`` size (``"4GB"``: 4e9, ``"16 GiB"``: 16 * 2**30), as
    ``dask.utils.parse_bytes`` reads it; ``ValueError`` for what :data:`MEMORY` does not match."""
    match = MEMORY.fullmatch(value)
    if match is None:
        raise ValueError(value)
    unit = (match.group(3) or "").replace("K", "k")
    scale = 2 ** (10 * (" kMGTP".index(unit[0]))) if unit.endswith("i") else _UNITS[unit]
    return int(float(match.group(1)) * scale)


def _memory(instance: Any, attribute: attrs.Attribute, value: str) -> None:
    match = MEMORY.fullmatch(value)
    if match is None or not float(match.group(1)) > 0:
        raise spec_error(
            instance, attribute.name, value, "a size per job such as '4GB', '16 GiB' or '500MB'"
        )


def _name(instance: Any, attribute: attrs.Attribute, value: str | None) -> None:
    if value is not None and (not value.strip() or any(c.isspace() for c in value)):
        raise spec_error(instance, attribute.name, value, "a name without spaces (or no value)")


def _lines(instance: Any, attribute: attrs.Attribute, value: tuple[str, ...]) -> None:
    for i, line in enumerate(value):
        if not line.strip() or "\n" in line:
            raise spec_error(instance, f"{attribute.name}[{i}]", line, "one non-empty line")


@spec_class
class ClusterSpec:
    """The cluster a run's tasks go to (``[cluster]``); never part of a key.

    ``kind``: ``local`` (default), ``slurm``, ``pbs`` or ``local-jobs``. For job kinds:
    ``n_jobs`` jobs of ``cores`` cores and ``memory`` each, running ``processes`` worker
    processes (default: one per core, one thread each, like the local cluster), for at most
    ``walltime`` (``HH:MM:SS``; default: dask-jobqueue's configuration, 30 min), in ``queue``
    (SLURM partition, PBS queue) charged to ``account``. ``interface``: the network interface
    of the scheduler and the workers (``ib0``; ``lo`` on one machine). ``python``: the
    interpreter on the nodes (default: this one). ``prologue``: shell lines run before the
    worker (``module load ...``, ``source venv/bin/activate``); ``job_extra``: extra
    directives (``--gres=gpu:1`` for SLURM, ``-l ngpus=1`` for PBS). ``log_directory``: where
    jobs write their output. ``shared_directory``: a folder every node sees, where the run's
    temporary TLS credentials lie while it runs (default ``~/.oodsim/cluster``).
    ``local-jobs`` runs the worker command without a shell: it ignores ``queue``,
    ``walltime``, ``account``, ``prologue`` and ``job_extra``.
    """

    TAG = "cluster"

    kind: str = attrs.field(default="local", validator=one_of(*CLUSTER_KINDS))
    n_jobs: int = attrs.field(default=1, validator=positive)
    cores: int = attrs.field(default=1, validator=positive)
    memory: str = attrs.field(default="4GB", validator=_memory)
    processes: int | None = attrs.field(default=None, validator=positive)
    walltime: str | None = attrs.field(default=None, validator=_walltime)
    queue: str | None = attrs.field(default=None, validator=_name)
    account: str | None = attrs.field(default=None, validator=_name)
    interface: str | None = attrs.field(default=None, validator=_name)
    python: str | None = attrs.field(default=None, converter=path_string)
    prologue: tuple[str, ...] = attrs.field(default=(), validator=_lines)
    job_extra: tuple[str, ...] = attrs.field(default=(), validator=_lines)
    log_directory: str | None = attrs.field(default=None, converter=path_string)
    shared_directory: str | None = attrs.field(default=None, converter=path_string)

    def __attrs_post_init__(self) -> None:
        if self.processes is not None and self.processes > self.cores:
            raise spec_error(
                self,
                "processes",
                self.processes,
                f"at most cores = {self.cores} worker processes per job",
            )
        if self.is_jobs and memory_bytes(self.memory) < MIN_WORKER_MEMORY * self.worker_processes:
            raise spec_error(
                self,
                "memory",
                self.memory,
                f"at least 512 MiB a worker process ({self.worker_processes} a job here, so at "
                f"least {self.worker_processes * 512} MiB a job)",
                "A worker holds about 530 MiB once torch and distributed are imported, and Dask "
                "stops it at 95 % of its share of the job's memory",
            )

    @property
    def is_jobs(self) -> bool:
        """Whether the workers are batch jobs (dask-jobqueue)."""
        return self.kind in JOB_KINDS

    @property
    def worker_processes(self) -> int:
        """Worker processes per job (one per core unless ``processes`` says otherwise)."""
        return self.processes or self.cores


register_table(ClusterSpec, shorthand="kind", nouns=("a [cluster] table (or a kind)", "tables"))


def is_address(value: str) -> bool:
    """Whether ``value`` is written like a Dask scheduler address (not a cluster kind)."""
    return bool(ADDRESS.fullmatch(value))


def cluster_choice(value: Any, base: ClusterSpec | None, field: str = "cluster") -> Any:
    """What ``--cluster VALUE`` or ``run(cluster=VALUE)`` asks for: a :class:`ClusterSpec`
    (a kind replaces the kind of ``base``, the spec's own table; a table replaces it all) or a
    scheduler address (a string). Anything else is a :class:`SpecError` naming ``field``."""
    if isinstance(value, ClusterSpec):
        return value
    if isinstance(value, Mapping):
        return structure(dict(value), ClusterSpec, field, lambda path: f"{field}.{path}".strip("."))
    if not isinstance(value, str):
        expected = "a cluster kind, a scheduler address or a [cluster] table"
        raise SpecError(field, value, expected)
    if value in CLUSTER_KINDS:
        return attrs.evolve(base, kind=value) if base is not None else ClusterSpec(kind=value)
    if is_address(value):
        return value
    close = difflib.get_close_matches(value.lower(), CLUSTER_KINDS, n=1)
    raise SpecError(
        field,
        value,
        "one of " + ", ".join(map(repr, CLUSTER_KINDS)) + " or a Dask scheduler address "
        "(tls://host:8786, tcp://host:8786)",
        f"Did you mean {close[0]!r}?" if close else "",
    )


def _chosen(table: ClusterSpec | None, cluster: Any) -> ClusterSpec | str | None:
    """What a run asks for without an ``address``: ``cluster`` over the spec's ``table``."""
    return table if cluster is None else cluster_choice(cluster, table)


def resolve_cluster(
    table: ClusterSpec | None, cluster: Any = None, address: str | None = None
) -> tuple[ClusterSpec | None, str | None]:
    """The cluster of a run: ``(jobs, address)``, where ``jobs`` is the job cluster to start
    (None: no job cluster) and ``address`` an existing scheduler (None: none).

    ``cluster`` (``--cluster``) overrides the spec's ``table``: a kind replaces its kind, an
    address means an existing scheduler, like ``address`` (``--address``), which may not be
    given with it. Without either, the table decides (``address`` wins over the table).
    """
    if cluster is not None and address is not None:
        raise SpecError(
            "cluster", cluster, "a cluster or an address (--cluster or --address, not both)"
        )
    if address is not None:
        return None, address
    choice = _chosen(table, cluster)
    if isinstance(choice, str):
        return None, choice
    if choice is None or not choice.is_jobs:
        return None, None
    return choice, None


def runs_in_process(
    table: ClusterSpec | None,
    cluster: Any,
    address: str | None,
    n_workers: int | None,
    n_seeds: int,
) -> bool:
    """Whether a run computes in the calling process instead of on a cluster: when its kind is
    ``in-process``, or when nothing names a cluster (no ``[cluster]`` table, ``cluster`` or
    ``address``) and the run has one worker (or one seed and no worker count), where a local
    cluster would cost more (its start, a torch import per worker) than it gives.
    ``--cluster local`` keeps a cluster of one worker."""
    if address is not None:
        return False
    choice = _chosen(table, cluster)
    if isinstance(choice, ClusterSpec):
        return choice.kind == IN_PROCESS
    return choice is None and (n_workers == 1 or (n_workers is None and n_seeds == 1))
