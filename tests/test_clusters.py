"""Job clusters (issue 12, part 4): ``oodsim run --cluster KIND|ADDRESS`` and ``[cluster]``.

The acceptance run goes through dask-jobqueue's whole job path with its backend that runs each
job as a local process (``--cluster local-jobs``): job script, workers joining over TLS, tasks,
the cache on a file system that the jobs share, the jobs cancelled at the end. Its results must
equal those of oodsim's own local cluster. Where ``sbatch`` is on PATH (``.ci/run`` starts a
one-node SLURM when ``../shared/slurm/start-slurm.sh`` exists), the same spec also runs as real
SLURM jobs. A preempted job (the only one, killed mid-training) is replaced and the run ends
with the same results. The rest checks the ``[cluster]`` table and ``--cluster`` values: every
refusal is one line, before any compute. Nothing is mocked.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import attrs
import numpy as np
import pytest

import oodsim
from oodsim.cli import main as cli_main
from oodsim.clusters import jobqueue
from oodsim.clusters.job_cluster import TLS_PREFIX, check_jobs, credentials_folder
from oodsim.engine import ClusterError
from oodsim.errors import SpecError
from oodsim.protocols import get_protocol
from oodsim.specs.cluster import ClusterSpec, resolve_cluster
from tests import command_server
from tests.conftest import ROOT, children, digits_toml, signalled, wait_for

# not imported here: importing dask_jobqueue changes the process's Ctrl-C handler (see
# test_ctrl_c_stays_a_keyboard_interrupt_with_dask_jobqueue)
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("dask_jobqueue") is None,
    reason='needs the [cluster] extra (dask-jobqueue): pip install -e ".[test]"',
)

#: The spec's [cluster] table: SLURM jobs on this machine (loopback only); --cluster
#: local-jobs replaces only its kind.
CLUSTER_TABLE = """
[cluster]
kind = "slurm"
n_jobs = 2
cores = 1
memory = "2GB"
walltime = "00:10:00"
queue = "debug"
interface = "lo"
log_directory = "{folder}/logs"
shared_directory = "{folder}/shared"
"""
RUN_TIMEOUT = 300  # seconds; a run here takes well under a minute


def cluster_spec_file(folder: Path, n_seeds: int = 2, **table: str) -> Path:
    """The small digits spec with :data:`CLUSTER_TABLE` (``table`` replaces its lines)."""
    path = digits_toml(folder / "digits.toml", n_seeds)
    text = CLUSTER_TABLE.format(folder=folder)
    for key, value in table.items():
        lines = [line for line in text.splitlines() if not line.startswith(f"{key} = ")]
        text = "\n".join([*lines, f"{key} = {value}"]) + "\n"
    path.write_text(path.read_text() + text)
    return path


def cli_run(
    folder: Path, spec: Path, name: str, *options: str, env: dict | None = None
) -> subprocess.Popen:
    """``oodsim run SPEC OPTIONS`` in a new process, cache and results under ``folder/name``."""
    out = ["--cache", str(folder / name / "cache"), "--out", str(folder / name / "r.zarr")]
    command = [sys.executable, "-m", "oodsim.cli", "run", str(spec), "--quiet", *out, *options]
    return command_server.popen(
        command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def ended(process: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """The output and errors of a :func:`cli_run` once it has ended; the test fails if it has
    not within ``timeout`` seconds (the run is interrupted: oodsim cancels its jobs on Ctrl-C)."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
        pytest.fail(f"the run had not ended after {timeout} s: {err[-3000:]}")


def finished(process: subprocess.Popen) -> Path:
    """The results folder of a :func:`cli_run` that must succeed."""
    out, err = ended(process, RUN_TIMEOUT)
    assert process.returncode == 0, err[-3000:] or out[-3000:]
    return Path(process.args[process.args.index("--out") + 1])


def assert_same_results(path: Path, expected: Path) -> None:
    """Same seeds, scores (bit for bit) and failures as the local cluster's run."""
    a, b = oodsim.open_results(path), oodsim.open_results(expected)
    assert list(a.seed.values) == list(b.seed.values) == [0, 1]
    np.testing.assert_array_equal(a.score.values, b.score.values)
    assert list(a.failure.values) == list(b.failure.values)
    assert not np.isnan(a.score.values).all()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The spec file and its results on oodsim's own local cluster (``cluster="local"``
    replaces the table's kind: no job is submitted)."""
    folder = tmp_path_factory.mktemp("reference")
    spec = cluster_spec_file(folder)
    out = folder / "local" / "r.zarr"
    oodsim.run(
        spec,
        cluster="local",
        n_workers=2,
        cache=folder / "local" / "cache",
        out=out,
        progress=False,
    )
    return spec, out


# --------------------------------------------------------------------------- job runs


def test_local_jobs_run_like_the_local_cluster(
    reference: tuple[Path, Path], tmp_path: Path
) -> None:
    spec, expected = reference
    table = oodsim.load(spec).cluster
    # the job scripts of the table: what SLURM would get, and what the local backend runs
    slurm = jobqueue.job_script(table)
    for line in ("#SBATCH -p debug", "#SBATCH --cpus-per-task=1", "#SBATCH --mem=2G"):
        assert line in slurm
    assert "#SBATCH -t 00:10:00" in slurm and "--protocol tls://" in slurm
    # the workers retire a tenth of the walltime before it, staggered by half that
    assert "--lifetime 540s --lifetime-stagger 30s" in slurm
    pbs = jobqueue.job_script(attrs.evolve(table, kind="pbs", cores=4, processes=2))
    for line in ("#PBS -q debug", "#PBS -l walltime=00:10:00", "#PBS -l select=1:ncpus=4:mem="):
        assert line in pbs
    assert "--nthreads 2 --memory-limit" in pbs and "--nworkers 2 --nanny" in pbs
    assert "--lifetime 540s" in pbs
    local = jobqueue.job_script(attrs.evolve(table, kind="local-jobs"))
    assert "--nthreads 1 --memory-limit 1.86GiB" in local and "--interface lo" in local
    assert "--no-dashboard --dashboard-address 127.0.0.1:0" in local and "--tls-key" in local
    assert "--lifetime" not in local  # local jobs have no walltime
    results = finished(cli_run(tmp_path, spec, "jobs", "--cluster", "local-jobs"))
    assert_same_results(results, expected)
    assert not list((spec.parent / "shared").glob("*"))  # the credentials are gone


@functools.cache
def _slurm_running() -> bool:
    """Whether SLURM takes jobs here (its commands are on PATH and its controller answers)."""
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        return False


@pytest.mark.skipif(
    not _slurm_running(),
    reason="no SLURM here (sbatch not on PATH or sinfo fails); .ci/run starts one with "
    "../shared/slurm/start-slurm.sh",
)
def test_slurm_run_like_the_local_cluster(reference: tuple[Path, Path], tmp_path: Path) -> None:
    spec, expected = reference
    results = finished(cli_run(tmp_path, spec, "slurm", "--cluster", "slurm"))
    assert_same_results(results, expected)
    # the workers were SLURM jobs: each wrote its log where the table says, and is gone now
    logs = sorted((spec.parent / "logs").glob("oodsim-worker-*.err"))
    assert len(logs) >= 2 and all("Registered to:" in log.read_text() for log in logs)
    ids = {log.stem.rsplit("-", 1)[1] for log in logs}
    queued = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True)
    assert not ids & set(queued.stdout.split())
    assert not list((spec.parent / "shared").glob("*"))


@pytest.mark.skipif(
    not _slurm_running(), reason="no SLURM here (sbatch not on PATH or sinfo fails)"
)
def test_a_refused_slurm_job_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = cluster_spec_file(tmp_path, queue='"nope"')
    out = ("--out", str(tmp_path / "r.zarr"))  # never the checkout's results/ (the main job's)
    code = cli_main(["run", str(spec), "--quiet", "--cache", str(tmp_path / "c"), *out])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("oodsim: error: submitting slurm jobs failed: sbatch: error:")


#: seconds a run that must stop by itself may take: the watch of a SLURM cluster's jobs first
#: asks squeue after 10 s without a worker (oodsim.clusters.job_watch.FIRST_LOOK)
STOP_TIMEOUT = 120


def refused(process: subprocess.Popen) -> str:
    """The one error line of a :func:`cli_run` that must stop by itself with exit code 2 (a
    run that waits forever fails the test after :data:`STOP_TIMEOUT` seconds). A quiet run
    still says once that no worker has joined when that takes 10 s (a loaded machine): that
    notice may come first, nothing else."""
    out, err = ended(process, STOP_TIMEOUT)
    lines = [line for line in err.strip().splitlines() if not line.startswith(NO_WORKER_YET)]
    assert process.returncode == 2 and len(lines) == 1, err[-3000:] or out[-3000:]
    return lines[0]


#: the start of the one notice a quiet run gives while its cluster has no worker
NO_WORKER_YET = "oodsim: no worker yet ("


def _queued(ids: set[str]) -> set[str]:
    """The jobs of ``ids`` that SLURM still has pending or running."""
    listed = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True)
    return ids & set(listed.stdout.split())


@pytest.mark.skipif(
    not _slurm_running(), reason="no SLURM here (sbatch not on PATH or sinfo fails)"
)
def test_slurm_jobs_that_all_fail_stop_the_run(tmp_path: Path) -> None:
    """The probe: jobs whose prologue fails (a job script that exits at once) end without a
    worker, and the run waited forever, saying `no worker yet`. Now the run asks squeue and
    stops, naming the jobs, their state and their logs."""
    spec = cluster_spec_file(tmp_path, prologue='["echo failing prologue >&2; exit 3"]')
    line = refused(cli_run(tmp_path, spec, "prologue"))
    assert line.startswith(
        "oodsim: error: every slurm job of the run ended without a worker joining it ("
    ), line
    ids = set(re.findall(r"(\d+) FAILED \(NonZeroExitCode\)", line))
    assert len(ids) == 2, line
    assert f" in {tmp_path}/logs " in line, line
    log = tmp_path / "logs" / f"oodsim-worker-{min(ids)}.err"
    assert "failing prologue" in log.read_text()
    assert not _queued(ids)
    assert not list((tmp_path / "shared").glob("*"))  # the credentials are gone


@pytest.mark.skipif(
    not _slurm_running(), reason="no SLURM here (sbatch not on PATH or sinfo fails)"
)
def test_slurm_jobs_that_can_never_start_stop_the_run_and_are_cancelled(tmp_path: Path) -> None:
    """The probe: jobs asking for more cores than any node has stay pending with SLURM's
    reason `PartitionConfig` (sbatch takes them), and the run waited forever. Now it stops,
    naming the reason, and no job of it is left in the queue."""
    sinfo = subprocess.run(["sinfo", "-h", "-o", "%c"], capture_output=True, text=True)
    cores = max(int(n.rstrip("+")) for n in sinfo.stdout.split()) + 1
    spec = cluster_spec_file(tmp_path, cores=str(cores))
    line = refused(cli_run(tmp_path, spec, "big"))
    assert line.startswith(
        "oodsim: error: the slurm jobs of the run can never start as submitted: SLURM holds them"
    ), line
    ids = set(re.findall(r"(\d+) PENDING \(PartitionConfig\)", line))
    assert len(ids) == 2, line
    assert not _queued(ids)


def test_a_run_whose_every_seed_killed_its_worker_is_an_error(tmp_path: Path) -> None:
    """The probe: jobs of `memory = "600MB"` (each worker's nanny kills it at 95 % of its
    share) failed every seed, and the run printed a table of dashes and exited 0. A run
    where no seed was scored and each one's worker died is the environment's failure: one
    line that names the memory, exit code 2, no results."""
    spec = cluster_spec_file(tmp_path, n_seeds=1, memory='"600MB"')  # just over the floor
    line = refused(cli_run(tmp_path, spec, "mem", "--cluster", "local-jobs"))
    assert line.startswith(
        "oodsim: error: 1 of 1 simulations failed, none was scored: each one's worker process "
        "died each of the 4 times it ran the seed's"
    ), line
    assert "the local-jobs jobs' memory (600MB a job for 1 worker process(es))" in line
    assert not (tmp_path / "mem" / "r.zarr").exists()


def _jobs_of(pid: int) -> set[int]:
    """The job processes (dask workers) that the oodsim process ``pid`` runs as local jobs."""
    return {job.pid for job in children(pid, "distributed.cli.dask_worker")}


def test_a_second_ctrl_c_after_the_resume_line_still_cancels_the_jobs(tmp_path: Path) -> None:
    """A Ctrl-C after the resume line ends the command at once, without the close that
    cancels the jobs: the run cancels them first (``jobqueue.cancel_now``)."""
    spec = cluster_spec_file(tmp_path, n_seeds=1000)
    out = ["--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "r.zarr")]
    run = [sys.executable, "-m", "oodsim.cli", "run", str(spec), "--cluster", "local-jobs"]
    driver = command_server.popen(
        [*run, *out],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(driver.stdout or ()), daemon=True)
    reader.start()
    jobs: set[int] = set()
    try:
        checkpoints = tmp_path / "cache" / "checkpoint"

        def stored_or_ended() -> bool:
            return any(checkpoints.glob("*/*/meta.json")) or driver.poll() is not None

        try:
            wait_for(stored_or_ended, RUN_TIMEOUT, "a checkpoint")
        except AssertionError as error:  # say what the run said meanwhile
            raise AssertionError(f"{error}; the run said:\n{''.join(lines)}") from None
        assert driver.poll() is None, "the run ended first:\n" + "".join(lines)
        jobs.update(_jobs_of(driver.pid))
        os.killpg(driver.pid, signal.SIGINT)
        wait_for(lambda: any("to resume." in line for line in lines), 60, "the resume line")
        os.killpg(driver.pid, signal.SIGINT)
        driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    reader.join(timeout=60)
    # 130, or killed by the signal itself where it came as the interpreter ended (Python
    # restores the default handlers then): a shell says 130 of either
    assert driver.returncode in (130, -signal.SIGINT), "".join(lines)
    assert jobs
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in jobs), 60, "jobs to end")


def test_a_preempted_job_is_replaced_and_the_results_are_the_same(
    reference: tuple[Path, Path], tmp_path: Path
) -> None:
    """The only job is killed (SIGKILL, like a preemption) while its worker trains a
    checkpoint: the run can end only if oodsim submits a new job, which takes over the dead
    worker's stale lock and computes the task again."""
    _, expected = reference
    spec = cluster_spec_file(tmp_path, n_jobs="1")  # no other job could finish the run
    # distributed declares a lost worker's job gone after this (default 15 s)
    env = dict(os.environ, DASK_DISTRIBUTED__DEPLOY__LOST_WORKER_TIMEOUT="2s")
    process = cli_run(tmp_path, spec, "pre", "--cluster", "local-jobs", env=env)
    locks = tmp_path / "pre" / "cache" / "locks"
    killed: set[int] = set()
    seen: set[int] = set()
    deadline = time.monotonic() + RUN_TIMEOUT
    while process.poll() is None and time.monotonic() < deadline:
        jobs = _jobs_of(process.pid)
        seen |= jobs
        if not killed and jobs and locks.is_dir() and any(locks.glob("checkpoint-*.lock")):
            for pid in jobs:
                os.kill(pid, signal.SIGKILL)
            killed = jobs
        time.sleep(0.1)
    results = finished(process)
    assert killed, "the run ended before a job could be killed mid-training"
    assert seen - killed, "no job was submitted to replace the killed one"
    assert_same_results(results, expected)


# --------------------------------------------------------------------------- refusals


def cli_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one-line error of ``oodsim ARGS`` (exit code 2)."""
    code = cli_main(list(args))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            'kind = "slrum"',
            "cluster.kind: 'slrum' is not allowed; expected one of 'in-process', 'local', ",
        ),
        ('kind = "slrum"', "Did you mean 'slurm'?"),
        ('cores = "4"', "cluster.cores: '4' is not allowed; expected an integer"),
        ("cores = 0", "cluster.cores: 0 is not allowed; expected a number > 0"),
        ("n_jobs = -1", "cluster.n_jobs: -1 is not allowed; expected a number > 0"),
        ("n_jobs = 1.5", "cluster.n_jobs: 1.5 is not allowed; expected an integer"),
        ("processes = 2", "cluster.processes: 2 is not allowed; expected at most cores = 1"),
        ('walltime = "2h"', "cluster.walltime: '2h' is not allowed; expected a duration HH:MM"),
        ('walltime = "1:99:00"', "cluster.walltime: '1:99:00' is not allowed"),
        ('memory = "lots"', "cluster.memory: 'lots' is not allowed; expected a size per job"),
        ("memory = 4", "cluster.memory: 4 is not allowed; expected a string"),
        ('queue = ""', "cluster.queue: '' is not allowed; expected a name without spaces"),
        ('prologue = "module load x"', "cluster.prologue: 'module load x' is not allowed"),
        ("corse = 4", "cluster.corse: 'corse' is not allowed; expected one of "),
        ("corse = 4", "Did you mean 'cores'?"),
    ],
)
def test_a_bad_cluster_table_is_one_line_before_any_compute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    key = line.split(" = ")[0]
    spec = cluster_spec_file(tmp_path, **{key: line.split(" = ", 1)[1]})
    error = cli_error(capsys, "run", str(spec), "--cache", str(tmp_path / "c"))
    assert error.startswith("oodsim: error: ") and message in error
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--cluster", "slrum"],
            "cluster: 'slrum' is not allowed; expected one of 'in-process', 'local'",
        ),
        (["--cluster", "slrum"], "or a Dask scheduler address (tls://host:8786"),
        (["--cluster", "slrum"], "Did you mean 'slurm'?"),
        (["--cluster", "PBS"], "Did you mean 'pbs'?"),
        (["--cluster", "slurm", "--address", "tcp://127.0.0.1:1"], "or --address, not both"),
        (["--cluster", "local-jobs", "--workers", "2"], "workers: 2 is not allowed; expected no"),
    ],
)
def test_a_bad_cluster_option_is_one_line_before_any_compute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], message: str
) -> None:
    spec = cluster_spec_file(tmp_path)
    error = cli_error(capsys, "run", str(spec), "--cache", str(tmp_path / "c"), *options)
    assert message in error
    assert not (tmp_path / "c").exists()


@pytest.mark.skipif(shutil.which("qsub") is not None, reason="PBS is installed here")
def test_pbs_without_qsub_is_one_line_before_any_compute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = cluster_spec_file(tmp_path)
    error = cli_error(capsys, "run", str(spec), "--cache", str(tmp_path / "c"), "--cluster", "pbs")
    assert "a pbs cluster submits its workers with `qsub`, which is not on PATH" in error
    assert not (tmp_path / "c").exists()


def test_without_dask_jobqueue_a_job_cluster_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)  # as if it were not installed
    with pytest.raises(ClusterError, match=r'needs dask-jobqueue.*pip install "oodsim\[cluster\]"'):
        check_jobs(ClusterSpec(kind="local-jobs"))


def test_ctrl_c_stays_a_keyboard_interrupt_with_dask_jobqueue() -> None:
    """dask_jobqueue makes Ctrl-C call sys.exit() when it is imported (exit code 0, no word
    of what is cached); oodsim keeps the handler the process had."""
    code = (
        "import signal; from oodsim.specs.cluster import ClusterSpec\n"
        "from oodsim.clusters.job_cluster import check_jobs\n"
        "before = signal.getsignal(signal.SIGINT)\n"
        "check_jobs(ClusterSpec(kind='local-jobs'))\n"
        "import dask_jobqueue\n"
        "assert signal.getsignal(signal.SIGINT) is before is signal.default_int_handler\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_cluster_option_and_the_table_combine() -> None:
    table = ClusterSpec(kind="slurm", cores=8, memory="8GB", queue="gpu")  # 1 GB a worker
    assert resolve_cluster(None) == (None, None)
    assert resolve_cluster(table) == (table, None)
    assert resolve_cluster(table, "pbs") == (attrs.evolve(table, kind="pbs"), None)
    assert resolve_cluster(table, "local") == (None, None)
    assert resolve_cluster(None, "slurm") == (ClusterSpec(kind="slurm"), None)
    for address in ("tls://10.0.0.1:8786", "tcp://node-1:8786", "node-1:8786"):
        assert resolve_cluster(table, address) == (None, address)
    assert resolve_cluster(table, address="tls://h:1") == (None, "tls://h:1")
    jobs, _ = resolve_cluster(None, {"kind": "pbs", "n_jobs": 3})
    assert jobs == ClusterSpec(kind="pbs", n_jobs=3)
    with pytest.raises(SpecError, match=r"cluster\.cores: '2' is not allowed"):
        resolve_cluster(None, {"kind": "pbs", "cores": "2"})
    with pytest.raises(SpecError, match="expected a cluster kind, a scheduler address"):
        resolve_cluster(None, 3)


def _with_cluster(data: dict) -> dict:
    return {**data, "cluster": {"kind": "slurm", "cores": 4, "walltime": "01:00:00"}}


def test_every_protocol_takes_a_cluster_table_that_stays_out_of_the_key() -> None:
    open_set = tomllib.loads((ROOT / "specs" / "digits.toml").read_text())
    severity = tomllib.loads((ROOT / "specs" / "severity_fashion_mnist.toml").read_text())
    imagenet_o = tomllib.loads((ROOT / "specs" / "imagenet_o.toml").read_text())
    for name in ("open_set", "severity", "imagenet_o"):
        data = {"open_set": open_set, "severity": severity, "imagenet_o": imagenet_o}[name]
        data = {k: v for k, v in data.items() if k != "protocol"}
        protocol = get_protocol(name)
        plain = protocol.from_data(data, ROOT / "specs")
        spec = protocol.from_data(_with_cluster(data), ROOT / "specs")
        assert plain.cluster is None and spec.key == plain.key, name
        assert spec.cluster == ClusterSpec(kind="slurm", cores=4, walltime="01:00:00"), name
        assert protocol.from_data(spec.to_dict(), ROOT / "specs").cluster == spec.cluster, name
        bad = {**data, "cluster": {"kind": "slurm", "cores": "4"}}
        with pytest.raises(SpecError, match=r"^cluster\.cores: '4' is not allowed; expected an"):
            protocol.from_data(bad, ROOT / "specs")


def test_job_workers_that_never_connect_are_told_then_stop_the_run(tmp_path: Path) -> None:
    """The probe: local jobs whose workers never connected (`memory = "1MB"`, refused now
    before the run) hung with no output for 240 s. The status line now says that no worker
    has connected and where to look, and local jobs (no batch queue) stop after the worker
    timeout (by default 120 s, here 14 s) with one line. A ``--quiet`` run, which has no
    status line, says it once (it waited without a word). The two runs (with a status line,
    and quiet) wait side by side. Their jobs' ``python`` says it registered and sleeps."""
    runs = {}
    for name, quiet in (("status-line", []), ("quiet", ["--quiet"])):
        folder = tmp_path / name
        folder.mkdir()
        silent = folder / "python-that-never-connects"
        silent.write_text('#!/bin/sh\necho "Registered to: nowhere" >&2\nexec sleep 600\n')
        silent.chmod(0o755)
        spec = cluster_spec_file(folder, python=f'"{silent}"')
        out = ["--cache", str(folder / "cache"), "--out", str(folder / "r.zarr")]
        runs[name] = command_server.popen(
            [sys.executable, "-m", "oodsim.cli", "run", str(spec), *out, *quiet]
            + ["--cluster", "local-jobs", "--worker-timeout", "14"],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    told = "no worker yet (0:1"  # from 10 s on; local jobs have no queue and write no logs
    for name, process in runs.items():
        _, err = process.communicate(timeout=RUN_TIMEOUT)
        assert process.returncode == 2, (name, err[-3000:])
        lines = err.strip().splitlines()
        assert any(told in line and "the local jobs' workers have not" in line for line in lines)
        assert lines[-1].startswith("oodsim: error: the Dask cluster has had no worker for 14 s")
        if name == "quiet":  # once, where the status line would have said it every few seconds
            notices = [line for line in lines if told in line]
            assert len(notices) == 1 and notices[0].startswith(f"oodsim: {told}"), lines
        assert "Traceback" not in err, (name, err)


@pytest.mark.parametrize(
    ("table", "pattern"),
    [
        (
            {"python": '"/nonexistent/python3"'},
            r"cluster\.python: '/nonexistent/python3' is not allowed; expected a Python "
            r"interpreter that exists",
        ),
        (
            {"log_directory": '"/proc/nope/logs"'},
            r"cluster\.log_directory: '/proc/nope/logs' is not allowed; expected a folder the "
            r"jobs can write their logs in",
        ),
        (
            {"interface": '"eth9"'},
            r"cluster\.interface: 'eth9' is not allowed; expected a network interface of this "
            r"machine: .*lo.*\. The scheduler listens on it here",
        ),
    ],
    ids=["missing-python", "bad-log-directory", "missing-interface"],
)
def test_a_local_jobs_table_that_cannot_work_is_one_line_before_compute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], table: dict, pattern: str
) -> None:
    """The probe: a missing `python` gave a tornado traceback, then `TypeError`; a bad
    `log_directory`, or an `interface` this machine lacks (`RuntimeError: Cluster failed to
    start`), three "Exception ignored" tracebacks."""
    spec = cluster_spec_file(tmp_path, **table)
    cache = tmp_path / "cache"
    args = ["run", str(spec), "--cache", str(cache), "--out", str(tmp_path / "r.zarr")]
    assert cli_main([*args, "--cluster", "local-jobs", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(pattern, err[0]), err
    assert not cache.exists()


def test_credentials_of_a_killed_run_are_removed_by_the_next(tmp_path: Path) -> None:
    """A run killed before its cleanup (SIGKILL) left its worker TLS keys in
    ``shared_directory`` for good; the next job-cluster run on that host removes the folders
    of runs whose process is gone, and leaves those of live runs and of other hosts."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process that was, as a killed run's driver
    host = socket.gethostname()
    dead = tmp_path / f"{TLS_PREFIX}{host}-{gone.pid}-k1ll3d"
    live = tmp_path / f"{TLS_PREFIX}{host}-{os.getpid()}-l1v3"
    other = tmp_path / f"{TLS_PREFIX}another-host-{gone.pid}-0th3r"
    for folder in (dead, live, other):
        folder.mkdir()
        (folder / ".dask-jobqueue.worker.key.x").write_text("a private key")
    spec = ClusterSpec(kind="slurm", shared_directory=str(tmp_path))
    made = credentials_folder(spec)
    assert made.parent == tmp_path and made.name.startswith(f"{TLS_PREFIX}{host}-{os.getpid()}-")
    assert not dead.exists() and live.exists() and other.exists()


# --------------------------------------------------------------------------- Ctrl-C


def test_batch_commands_run_in_a_session_of_their_own() -> None:
    """A terminal's Ctrl-C reaches every process of its session: it killed an ``sbatch`` that
    had already submitted its job (which nobody then cancelled), or a ``scancel``. The run
    stops its jobs itself, so their commands run in a session of their own."""
    show = [sys.executable, "-c", "import os; print(os.getsid(0))"]
    for kind in ("slurm", "pbs"):
        session = asyncio.run(jobqueue.job_class(kind)._call(show))
        assert int(session) != os.getsid(0), kind


def test_ctrl_c_while_local_jobs_start_is_one_resume_line(tmp_path: Path) -> None:
    """Ctrl-C while a local job's worker starts: the worker, in the terminal's session, died
    of it, and the run printed ``Task exception was never retrieved`` and a traceback after
    the resume line. Now the run waits until its jobs are submitted, then cancels them."""
    spec = cluster_spec_file(tmp_path, n_seeds=1000)
    out = ["--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "r.zarr")]
    run = [sys.executable, "-m", "oodsim.cli", "run", str(spec), "--cluster", "local-jobs"]
    jobs: set[int] = set()
    driver, output = signalled(
        [*run, *out], lambda process: jobs.update(_jobs_of(process.pid)) or jobs, cwd=tmp_path
    )
    assert driver.returncode == 130, output
    assert output.count("run the same spec again to resume.") == 1, output
    assert "Traceback" not in output and "never retrieved" not in output, output
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in jobs), 60, "jobs to end")


def test_a_local_job_closed_before_its_worker_started_or_after_it_ended_closes_quietly() -> None:
    """dask-jobqueue's local job closed with no id yet (its worker still starting) raised
    ``int(None)`` from the cluster's reconciliation, which stopped the run; one whose worker
    had ended raised ``ProcessLookupError``. Both close quietly, the starting worker killed."""
    job = object.__new__(jobqueue.job_class("local-jobs"))
    starting = subprocess.Popen(["sleep", "60"], start_new_session=True)
    job.job_id, job.process = None, starting  # (what _submit_job has set so far)
    asyncio.run(job.close())
    assert starting.wait(10) == -signal.SIGKILL
    job.job_id = str(starting.pid)  # ended: nothing left to kill
    asyncio.run(job.close())
    job.job_id, job.process = None, None  # closed before its worker was started at all
    asyncio.run(job.close())
