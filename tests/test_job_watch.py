"""The watch of a job cluster's jobs (:mod:`oodsim.clusters.job_watch`): what ``squeue``,
``sacct`` and ``qstat`` say is read right (SLURM's output as captured from the one-node SLURM of
the development machine, 22.05), and the verdict comes only when no job can give a worker.

The runs on real SLURM (a job whose prologue fails, a job that SLURM can never start) are in
``tests/test_clusters.py``, with the other SLURM runs.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Collection
from typing import Any

import attrs
import pytest

from oodsim.clusters import job_watch
from oodsim.clusters.job_states import (
    JobState,
    parse_qstat,
    parse_sacct,
    parse_squeue,
    slurm_never,
)
from oodsim.clusters.job_watch import JobWatch
from oodsim.specs.cluster import ClusterSpec

# `squeue -h -t all -j 49,99999,50,51 -o "%i %T %r"`: 99999 is unknown (left out, exit 0);
# 49 asked for 3 cores of a 2-core node, 50 exited with 3, 51 has --begin=now+3600
SQUEUE = "50 FAILED NonZeroExitCode\n49 PENDING PartitionConfig\n51 PENDING BeginTime\n"
# more of them: --constraint=foo (sbatch refused it, and SLURM keeps the job as FAILED), -N 2
# on one node, --dependency on a failed job, --hold
SQUEUE_MORE = (
    "54 FAILED BadConstraints\n52 PENDING PartitionNodeLimit\n"
    "56 PENDING DependencyNeverSatisfied\n55 PENDING JobHeldUser\n"
)
# a running job, a cancelled one; 57 ended more than MinJobAge (300 s) ago: left out
SQUEUE_RUNNING = "59 CANCELLED PartitionConfig\n67 RUNNING None\n"
# one job id SLURM has forgotten; a controller that does not answer (exit code 1 both)
FORGOTTEN = "slurm_load_jobs error: Invalid job id specified\n"
UNREACHABLE = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"
# sacct without accounting (exit code 1), as on this machine
NO_ACCOUNTING = "Slurm accounting storage is disabled\n"


def test_squeue_states_ended_and_never_starting_jobs() -> None:
    ids = ["49", "99999", "50", "51"]
    states = parse_squeue(ids, 0, SQUEUE, "")
    assert states is not None
    assert states["50"] == JobState("50", "FAILED", "NonZeroExitCode", ended=True)
    assert states["49"] == JobState("49", "PENDING", "PartitionConfig", never=True)
    assert states["51"] == JobState("51", "PENDING", "BeginTime")  # waits, may start
    assert states["99999"] == JobState("99999", "", ended=True)  # forgotten: ended
    assert states["50"].describe() == "FAILED (NonZeroExitCode)"
    assert states["99999"].describe() == "ended (no longer listed)"

    more = parse_squeue(["52", "54", "55", "56"], 0, SQUEUE_MORE, "")
    assert more is not None
    assert more["54"].ended and more["56"].never
    # a partition's node limit is also a down node's reason; a held job can be released
    assert not (more["52"].never or more["52"].ended or more["55"].never)

    running = parse_squeue(["67", "57", "59"], 0, SQUEUE_RUNNING, "")
    assert running is not None
    assert running["67"] == JobState("67", "RUNNING", "None")
    assert running["67"].describe() == "RUNNING"
    assert running["59"].ended and not running["59"].never  # ended, whatever it waited for
    assert running["57"].ended


def test_squeue_errors_are_no_answer_except_a_forgotten_job() -> None:
    assert parse_squeue(["57"], 1, "", FORGOTTEN) == {"57": JobState("57", "", ended=True)}
    assert parse_squeue(["57"], 1, "", UNREACHABLE) is None
    assert parse_squeue(["57", "58"], 1, "", UNREACHABLE) is None


@pytest.mark.parametrize(
    ("reason", "never"),
    [
        ("PartitionConfig", True),
        ("PartitionTimeLimit", True),
        ("BadConstraints", True),
        ("InvalidAccount", True),
        ("QOSMaxWallDurationPerJobLimit", True),
        ("AssocMaxCpuPerJobLimit", True),
        ("QOSMaxMemoryPerNode", True),
        ("QOSMinCpuNotSatisfied", True),
        ("Priority", False),
        ("Resources", False),
        ("ReqNodeNotAvail, UnavailableNodes:vm", False),
        ("PartitionNodeLimit", False),
        ("PartitionDown", False),
        ("QOSMaxCpuPerUserLimit", False),
        ("AssocGrpCpuLimit", False),
        ("JobHeldAdmin", False),
    ],
)
def test_only_reasons_that_never_clear_are_never(reason: str, never: bool) -> None:
    assert slurm_never(reason) is never


def test_sacct_names_the_state_of_a_forgotten_job() -> None:
    # sacct -n -P -X -j 57,58 -o JobID,State,ExitCode, in sacct(1)'s parsable layout (this
    # machine has no accounting to capture it from)
    states = parse_sacct(["57", "58"], 0, "57|FAILED|3:0\n58|CANCELLED by 0|0:0\n")
    assert states["57"] == JobState("57", "FAILED", "exit code 3:0", ended=True)
    assert states["58"] == JobState("58", "CANCELLED", "", ended=True)
    assert parse_sacct(["57"], 1, NO_ACCOUNTING) == {}


# `qstat -x -f` in the layout of PBS Pro's reference guide (no PBS here to capture it from):
# attributes indented by four spaces, a long value continued on lines that begin with a tab
QSTAT = """Job Id: 1234.pbs-server
    Job_Name = oodsim-worker
    job_state = Q
    comment = Can Never Run: Insufficient amount of resource: ncpus (R: 128 A: 64 T:
\t64)
    queue = workq

Job Id: 1235.pbs-server
    Job_Name = oodsim-worker
    job_state = F
    comment = Job run at Thu Dec 04 at 10:01 on (node1:ncpus=1) and failed
    Exit_status = 3

Job Id: 1236.pbs-server
    job_state = Q
    comment = Not Running: Insufficient amount of resource: ncpus
"""


def test_qstat_states_finished_and_never_running_jobs() -> None:
    stderr = "qstat: Unknown Job Id 1237.pbs-server\n"
    states = parse_qstat(["1234", "1235", "1236", "1237", "1238"], QSTAT, stderr)
    assert states["1234"].never and not states["1234"].ended
    assert states["1234"].reason.endswith("(R: 128 A: 64 T:64)")
    assert states["1235"] == JobState("1235", "F", "exit status 3", ended=True)
    assert not (states["1236"].never or states["1236"].ended)  # may run later
    assert states["1237"].ended
    assert "1238" not in states  # said nothing of it: not taken as ended


def test_a_queue_command_missing_or_slow_is_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_watch, "COMMAND_TIMEOUT", 0.2)
    assert job_watch._run(["sleep", "5"]) is None
    assert job_watch._run(["/nonexistent/squeue"]) is None
    monkeypatch.setenv("PATH", "/nonexistent")
    assert job_watch.job_states("slurm", ["1"]) is None
    assert job_watch.job_states("pbs", ["1"]) is None


# --------------------------------------------------------------------------- the verdict


@attrs.define
class _Client:
    """What the watch reads of a Dask client: its scheduler's address."""

    address: str

    @property
    def scheduler(self) -> _Client:
        return self


@attrs.define
class _Job:
    job_id: str | None


@attrs.define
class _Cluster:
    """What the watch reads of a dask-jobqueue cluster: its jobs by name, the names it should
    have, and the scheduler's workers."""

    workers: dict[str, _Job]
    worker_spec: dict[str, Any] = attrs.field()
    scheduler_info: dict[str, Any] = attrs.Factory(lambda: {"workers": {}})
    scheduler_address: str = "tls://127.0.0.1:1"

    @worker_spec.default
    def _spec(self) -> dict[str, Any]:
        return dict.fromkeys(self.workers, {})


def _watch(
    monkeypatch: pytest.MonkeyPatch, cluster: _Cluster, answer: str, seen: Collection[str] = ()
) -> JobWatch:
    """A watch of ``cluster`` that has looked once (at 100 s without a worker), SLURM
    answering ``answer`` to squeue."""
    done = subprocess.CompletedProcess([], 0, answer, "")
    monkeypatch.setattr(job_watch, "_run", lambda command: done)
    spec = ClusterSpec(kind="slurm", log_directory="/x/logs")
    watch = JobWatch(cluster, spec, seen)
    watch.check(0.0)
    watch.check(100.0)
    return watch


def test_every_job_ended_without_a_worker_is_a_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _Cluster({"a": _Job("57"), "b": _Job("58")})
    answer = "57 FAILED NonZeroExitCode\n58 FAILED NonZeroExitCode\n"
    watch = _watch(monkeypatch, cluster, answer)
    assert watch.verdict is not None
    assert watch.verdict.startswith(
        "every slurm job of the run ended without a worker joining it (57 FAILED "
        "(NonZeroExitCode), 58 FAILED (NonZeroExitCode))"
    )
    assert "oodsim-worker-57.err, oodsim-worker-58.err in /x/logs" in watch.verdict


def test_a_job_slurm_never_starts_is_a_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _Cluster({"a": _Job("49"), "b": _Job("50")})
    answer = "49 PENDING PartitionConfig\n50 FAILED NonZeroExitCode\n"
    watch = _watch(monkeypatch, cluster, answer)
    assert watch.verdict is not None
    assert watch.verdict.startswith("the slurm jobs of the run can never start as submitted")
    assert "49 PENDING (PartitionConfig)" in watch.verdict


@pytest.mark.parametrize(
    ("workers", "answer", "seen", "spec"),
    [
        # one job may still start
        ({"a": "57", "b": "58"}, "57 FAILED NonZeroExitCode\n58 PENDING Priority\n", (), None),
        # a job whose worker joined, past its walltime: the keeper submits it again
        ({"a": "57"}, "57 TIMEOUT None\n", ("a",), None),
        # a job being submitted (no id yet)
        ({"a": "57", "b": None}, "57 FAILED NonZeroExitCode\n", (), None),
        # a job the cluster lacks (the keeper replaces one that distributed closed)
        ({"a": "57"}, "57 FAILED NonZeroExitCode\n", (), ("a", "b")),
    ],
    ids=["may-start", "resubmitted", "submitting", "replaced"],
)
def test_no_verdict_while_a_job_may_still_give_a_worker(
    monkeypatch: pytest.MonkeyPatch,
    workers: dict[str, str | None],
    answer: str,
    seen: tuple[str, ...],
    spec: tuple[str, ...] | None,
) -> None:
    cluster = _Cluster({name: _Job(i) for name, i in workers.items()})
    if spec is not None:
        cluster.worker_spec = dict.fromkeys(spec, {})
    watch = _watch(monkeypatch, cluster, answer, set(seen))
    assert watch.verdict is None


def test_the_watch_looks_only_without_a_worker_and_not_often(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    looks: list[list[str]] = []

    def squeue(command: list[str]) -> subprocess.CompletedProcess:
        looks.append(command)
        return subprocess.CompletedProcess(command, 0, "57 PENDING Priority\n", "")

    monkeypatch.setattr(job_watch, "_run", squeue)
    cluster = _Cluster({"a": _Job("57")}, scheduler_info={"workers": {"w": {}}})
    watch = JobWatch(cluster, ClusterSpec(kind="slurm"), set())
    for now in range(0, 100, 1):  # a worker all along: never asks
        watch.check(float(now))
    assert looks == []
    cluster.scheduler_info = {"workers": {}}
    for now in range(100, 200, 1):  # none from 100 s: at 110 s, 140 s, 170 s
        watch.check(float(now))
    assert len(looks) == 3 and looks[0][:4] == ["squeue", "-h", "-t", "all"]
    assert watch.verdict is None
    assert watch.hint.startswith("squeue says of the slurm jobs: 57 PENDING (Priority)")


def test_a_slow_look_does_not_hold_up_the_end_of_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A controller that does not answer holds a look for up to COMMAND_TIMEOUT (20 s); a run
    that ends (Ctrl-C) meanwhile closes its cluster without waiting for it."""
    looking, answer = threading.Event(), threading.Event()

    def slow(command: list[str]) -> None:
        looking.set()
        answer.wait(10)

    monkeypatch.setattr(job_watch, "_run", slow)
    monkeypatch.setattr(job_watch, "FIRST_LOOK", 0.0)
    monkeypatch.setattr(job_watch, "TICK", 0.01)
    cluster = _Cluster({"a": _Job("57")})
    with JobWatch(cluster, ClusterSpec(kind="slurm"), set()) as watch:
        assert job_watch.watch_of(_Client(cluster.scheduler_address)) is watch
        assert looking.wait(10)
    assert watch._thread.is_alive()  # still in its look: not waited for
    assert job_watch.watch_of(_Client(cluster.scheduler_address)) is None
    answer.set()
    watch._thread.join(10)
    assert watch.verdict is None


def test_a_verdict_stops_the_wait_for_the_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """``as_landed``, waiting for work on a cluster without workers (no worker_timeout, as on
    SLURM), tells the watch's hint meanwhile, and raises its verdict as a ClusterError."""
    from distributed import Client, LocalCluster

    from oodsim.engine import ClusterError
    from oodsim.engine.waiting import as_landed

    watch = _Verdict(hint="squeue says of the slurm jobs: 57 PENDING (Priority)")
    told: list[str] = []

    def no_worker(seconds: float, hint: str) -> None:
        told.append(hint)
        if len(told) == 3:  # the watch's look: every job has ended
            watch.verdict = "every slurm job of the run ended without a worker joining it"

    with (
        LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        monkeypatch.setitem(job_watch.WATCHES, client.scheduler.address, watch)
        future = client.submit(sum, [1, 2])  # no worker: never runs
        with pytest.raises(ClusterError, match="^every slurm job of the run ended without"):
            next(as_landed([future], None, poll=0.05, no_worker=no_worker))
    assert told == [watch.hint] * 3


@attrs.define
class _Verdict:
    hint: str
    verdict: str | None = None


def test_sacct_is_asked_only_about_jobs_squeue_has_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[list[str]] = []
    answers = {"squeue": SQUEUE_RUNNING, "sacct": "57|FAILED|3:0\n"}

    def run(command: list[str]) -> subprocess.CompletedProcess:
        asked.append(command)
        return subprocess.CompletedProcess(command, 0, answers[command[0]], "")

    monkeypatch.setattr(job_watch, "_run", run)
    states = job_watch.job_states("slurm", ["67", "57"])
    assert states is not None
    assert states["57"] == JobState("57", "FAILED", "exit code 3:0", ended=True)
    assert states["67"].state == "RUNNING"
    assert [c[0] for c in asked] == ["squeue", "sacct"] and "57" in asked[1]
    answers["sacct"] = ""  # no accounting: still ended, in a state it cannot name
    assert job_watch.job_states("slurm", ["67", "57"])["57"].describe() == (
        "ended (no longer listed)"
    )
