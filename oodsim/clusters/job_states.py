"""What a batch system says of a run's jobs: the commands that ask it (``squeue``, ``sacct``,
``qstat``) and the pure reading of their output, without running anything
(:mod:`oodsim.clusters.job_watch` runs them and decides).

A :class:`JobState` says whether a job has *ended* (it can give no worker any more) or waits
for a reason that *never* clears as the job was submitted: SLURM's reasons of a request over a
partition's or QOS's per-job limits, an invalid account or QOS, impossible constraints or
dependencies (:func:`slurm_never`); PBS's ``Can Never Run`` comment. Reasons that may clear
(``Priority``, ``Resources``, a down node's ``ReqNodeNotAvail``, a held job, limits per user or
group that other jobs free) never count: when in doubt, the run waits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import attrs

#: SLURM job states after which a job gives no worker (``squeue -t all``, ``sacct``).
#: ``COMPLETING`` (ending), ``REQUEUED``, ``SPECIAL_EXIT`` (requeued held) are not: the job
#: may run again, or is about to end and is looked at again.
SLURM_ENDED = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "TIMEOUT",
    }
)
#: SLURM reasons of a pending job that cannot start as submitted (see the module).
#: ``PartitionNodeLimit`` is not one: SLURM also gives it when required nodes are down.
SLURM_NEVER = frozenset(
    {
        "BadConstraints",
        "DependencyNeverSatisfied",
        "InvalidAccount",
        "InvalidQOS",
        "PartitionConfig",
        "PartitionTimeLimit",
        "QOSNotAllowed",
    }
)
#: a QOS's or association's limit per job or per node (``QOSMaxWallDurationPerJobLimit``,
#: ``AssocMaxCpuPerJobLimit``, ``QOSMaxMemoryPerNode``) or a QOS's minimum per job
#: (``QOSMinCpuNotSatisfied``): the job's own request is outside it. Limits per user, account
#: or group (``QOSMaxCpuPerUserLimit``, ``AssocGrpCpuLimit``) clear when other jobs end.
_SLURM_NEVER_LIMIT = re.compile(r"(QOS|Assoc)Max\w*Per(Job|Node)(Limit)?|QOSMin\w+")
#: PBS job states after which a job gives no worker: finished (``qstat -x``; Torque: completed)
PBS_ENDED = frozenset({"F", "C", "X"})
#: the start of a PBS comment on a job the scheduler found can never run
PBS_NEVER = "Can Never Run"
#: PBS's words for a job it no longer lists (PBS Pro, OpenPBS, Torque)
_PBS_GONE = ("Unknown Job Id", "Job has finished")


@attrs.frozen
class JobState:
    """One job as its batch system describes it: ``state`` in its own words (SLURM's
    ``PENDING``, ``FAILED``; PBS's ``Q``, ``F``; "" where the system no longer lists the job),
    ``reason`` (SLURM's reason, PBS's comment, an exit code), whether it has ``ended``, and
    whether it waits for a reason that ``never`` clears."""

    job_id: str
    state: str
    reason: str = ""
    ended: bool = False
    never: bool = False

    def describe(self) -> str:
        """``FAILED (NonZeroExitCode)``; ``ended (no longer listed)`` for a job forgotten."""
        state = self.state or "ended (no longer listed)"
        return f"{state} ({self.reason})" if self.reason and self.reason != "None" else state


def slurm_never(reason: str) -> bool:
    """Whether a pending SLURM job's ``reason`` means it cannot start as submitted."""
    word = reason.split(",")[0].strip()
    return word in SLURM_NEVER or bool(_SLURM_NEVER_LIMIT.fullmatch(word))


def squeue_command(ids: Sequence[str]) -> list[str]:
    """``squeue`` of the jobs ``ids`` in every state (ended ones too, while SLURM keeps them:
    ``MinJobAge``, 300 s by default): ``ID STATE REASON`` a line."""
    return ["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i %T %r"]


def parse_squeue(
    ids: Sequence[str], returncode: int, stdout: str, stderr: str
) -> dict[str, JobState] | None:
    """The state of each job of ``ids`` from :func:`squeue_command`'s answer; None where it
    says nothing sure (an error, or no controller). SLURM leaves out the jobs it has forgotten
    (ended over ``MinJobAge`` ago), and refuses a single forgotten one with ``Invalid job id
    specified``: those have ended, in a state :func:`parse_sacct` may name."""
    if returncode != 0:
        if "Invalid job id specified" in stderr and len(ids) == 1:
            return {ids[0]: JobState(ids[0], "", ended=True)}
        return None
    states: dict[str, JobState] = {}
    for line in stdout.splitlines():
        job_id, _, rest = line.strip().partition(" ")
        state, _, reason = rest.strip().partition(" ")
        if job_id in ids and state:
            pending = state == "PENDING"
            never = pending and slurm_never(reason)
            states[job_id] = JobState(job_id, state, reason.strip(), state in SLURM_ENDED, never)
    return {i: states.get(i, JobState(i, "", ended=True)) for i in ids}


def sacct_command(ids: Sequence[str]) -> list[str]:
    """``sacct`` of the jobs ``ids`` (their allocations, no steps): ``ID|STATE|EXIT`` a line.
    Sites without accounting answer ``Slurm accounting storage is disabled`` (exit code 1)."""
    return ["sacct", "-n", "-P", "-X", "-j", ",".join(ids), "-o", "JobID,State,ExitCode"]


def parse_sacct(ids: Sequence[str], returncode: int, stdout: str) -> dict[str, JobState]:
    """The ended jobs of ``ids`` that :func:`sacct_command`'s answer names (``CANCELLED by
    1000`` reads as ``CANCELLED``); nothing where it fails."""
    if returncode != 0:
        return {}
    states: dict[str, JobState] = {}
    for line in stdout.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 2 or fields[0] not in ids:
            continue
        state = fields[1].split(" ")[0]
        code = fields[2] if len(fields) > 2 and fields[2] not in ("", "0:0") else ""
        exit_code = f"exit code {code}" if code else ""
        if state in SLURM_ENDED:
            states[fields[0]] = JobState(fields[0], state, exit_code, ended=True)
    return states


def qstat_command(ids: Sequence[str]) -> list[str]:
    """``qstat`` of the jobs ``ids``, finished ones too (PBS Pro, OpenPBS), in full."""
    return ["qstat", "-x", "-f", *ids]


def parse_qstat(ids: Sequence[str], stdout: str, stderr: str) -> dict[str, JobState]:
    """The jobs of ``ids`` that :func:`qstat_command`'s answer describes: ``job_state`` and
    ``comment`` of each ``Job Id:`` block (an id such as ``1234.server`` is job ``1234``, as
    dask-jobqueue reads it from ``qsub``), and the jobs PBS says it does not know or that have
    finished (ended). A job it says nothing of is left out: unknown, not ended."""
    states: dict[str, JobState] = {}
    for block in re.split(r"^Job Id:\s*", stdout, flags=re.MULTILINE)[1:]:
        job_id = _pbs_id(block.split("\n", 1)[0].strip(), ids)
        fields = _pbs_fields(block.splitlines()[1:])
        state = fields.get("job_state", "")
        if job_id is None or not state:
            continue
        comment = fields.get("comment", "")
        exit_status = fields.get("Exit_status", "")
        ended = state in PBS_ENDED
        reason = f"exit status {exit_status}" if ended and exit_status else comment
        states[job_id] = JobState(job_id, state, reason, ended, comment.startswith(PBS_NEVER))
    for line in stderr.splitlines():
        if any(word in line for word in _PBS_GONE):
            for token in re.findall(r"[\w.\[\]-]+", line):
                job_id = _pbs_id(token, ids)
                if job_id is not None and job_id not in states:
                    states[job_id] = JobState(job_id, "", ended=True)
    return states


def _pbs_id(text: str, ids: Iterable[str]) -> str | None:
    """The id of ``ids`` that PBS's ``1234.server`` (or ``1234``) names, if any."""
    head = text.split(".")[0]
    return head if head in ids else None


def _pbs_fields(lines: Iterable[str]) -> dict[str, str]:
    """``name = value`` lines of a ``qstat -f`` block; a value continued on the next lines
    (indented by a tab) is joined."""
    fields: dict[str, str] = {}
    last = None
    for line in lines:
        name, sep, value = line.partition(" = ")
        if sep and line.startswith("    ") and not line.startswith("\t"):
            last = name.strip()
            fields[last] = value.strip()
        elif last is not None and line.startswith("\t"):
            fields[last] += line.strip()
    return fields
