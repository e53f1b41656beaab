"""Every batch command is bounded: one that hangs is killed with every process it started
(:mod:`oodsim.clusters.batch_commands`), whether the run asks the batch system about its jobs,
submits or cancels them."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from oodsim.clusters import batch_commands, job_watch
from oodsim.clusters.jobqueue import job_class
from tests import command_server
from tests.conftest import ROOT, wait_for

pytest.importorskip("dask_jobqueue")

#: a command that hangs and has started a helper that hangs too; it writes the helper's pid
HANGING = """#!/bin/sh
sleep 300 &
echo $! > "{pid_file}"
sleep 300
"""


def _fake(folder: Path, name: str) -> Path:
    """A hanging ``name`` first on PATH; the file its helper's pid lands in."""
    folder.mkdir(exist_ok=True)
    pid_file = folder / f"{name}.helper"
    command = folder / name
    command.write_text(HANGING.format(pid_file=pid_file))
    command.chmod(0o755)
    return pid_file


def _gone(pid_file: Path, within: float = 5.0) -> bool:
    """Whether the helper whose pid is in ``pid_file`` has ended within ``within`` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if pid_file.exists() and pid_file.read_text().strip():
            pid = int(pid_file.read_text())
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    return True
            except psutil.NoSuchProcess:
                return True
        time.sleep(0.05)
    return False


@pytest.fixture
def fake_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


def test_a_hanging_squeue_is_no_answer_and_its_helpers_are_killed(
    fake_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    helper = _fake(fake_path, "squeue")
    monkeypatch.setattr(job_watch, "COMMAND_TIMEOUT", 1.0)
    started = time.monotonic()
    assert job_watch.job_states("slurm", ["17"]) is None
    assert time.monotonic() - started < 4
    assert _gone(helper), "squeue's helper outlived the timeout"


def test_a_hanging_sbatch_is_killed_and_the_submission_fails_in_words(
    fake_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    helper = _fake(fake_path, "sbatch")
    monkeypatch.setattr(batch_commands, "SUBMIT_TIMEOUT", 1.0)
    call = job_class("slurm")._call
    killed = r"`sbatch job\.sh` had not ended after 1 s and was killed"
    with pytest.raises(RuntimeError, match=killed):
        asyncio.run(call(["sbatch", "job.sh"]))
    assert _gone(helper), "sbatch's helper outlived the timeout"


def test_a_failing_command_keeps_dask_jobqueues_words(fake_path: Path) -> None:
    failing = fake_path / "sbatch"
    failing.write_text("#!/bin/sh\necho 'no partition' >&2\nexit 1\n")
    failing.chmod(0o755)
    with pytest.raises(RuntimeError, match="Command exited with non-zero exit code") as error:
        asyncio.run(job_class("slurm")._call(["sbatch", "job.sh"]))
    assert "Exit code: 1" in str(error.value) and "no partition" in str(error.value)


def test_a_hanging_cancel_left_to_finish_is_killed_after_its_limit(fake_path: Path) -> None:
    helper = _fake(fake_path, "scancel")
    batch_commands.start_bounded(["scancel", "17"], timeout=1.0)
    assert _gone(helper, within=6.0), "scancel's helper outlived its limit"


#: ``oodsim.run`` from Python: a Ctrl-C is a ``KeyboardInterrupt`` carrying what the run left
SCRIPT = """
import sys
import oodsim

if __name__ == "__main__":
    try:
        oodsim.run(oodsim.load_spec(sys.argv[1]), cache=sys.argv[2])
    except KeyboardInterrupt as error:
        print("KeyboardInterrupt:", *getattr(error, "__notes__", ()), flush=True)
        sys.exit(130)
"""


def _run_with_hanging_sbatch(folder: Path, signum: int, group: bool, api: bool) -> tuple:
    """A run of a SLURM spec whose ``sbatch`` hangs (``oodsim run``, or ``oodsim.run`` in a
    script), sent ``signum`` once ``sbatch`` has started its helper: the ended process, its
    output, the seconds from the signal to its end, and the file holding the helper's pid."""
    from tests.test_clusters import cluster_spec_file  # a slow module's helper: loaded here

    fake = folder / "bin"
    helper = _fake(fake, "sbatch")
    spec = cluster_spec_file(folder, 2)
    if api:
        (folder / "script.py").write_text(SCRIPT)
        command = [sys.executable, str(folder / "script.py"), str(spec), str(folder / "c")]
    else:
        places = ["--cache", str(folder / "c"), "--out", str(folder / "r.zarr")]
        command = [sys.executable, "-m", "oodsim.cli", "run", str(spec), *places]
    path = f"{fake}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT)}
    process = command_server.popen(
        command,
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: helper.exists() or process.poll() is not None, 120, "sbatch to start")
        assert process.poll() is None, process.communicate()[0]
        time.sleep(1.0)  # sbatch hangs; the run waits for its answer
        sent = time.monotonic()
        if group:
            os.killpg(process.pid, signum)  # a terminal's Ctrl-C: the whole group
        else:
            process.send_signal(signum)
        output, _ = process.communicate(timeout=90)
        return process, output, time.monotonic() - sent, helper
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "group", "api"),
    [(signal.SIGTERM, False, False), (signal.SIGINT, True, False), (signal.SIGINT, True, True)],
    ids=["term", "ctrl-c", "ctrl-c-in-python"],
)
def test_a_signal_ends_a_run_whose_sbatch_hangs_within_5_s_naming_what_may_be_queued(
    tmp_path: Path, signum: int, group: bool, api: bool
) -> None:
    process, output, took, helper = _run_with_hanging_sbatch(tmp_path, signum, group, api)
    assert process.returncode == 128 + signum, output
    assert took < 5.0, f"ended {took:.1f} s after the signal:\n{output}"
    assert "1 `sbatch` had not answered and was killed" in output, output
    assert "squeue --me --name oodsim-worker" in output, output
    assert "scancel --me --name oodsim-worker" in output, output
    assert "Traceback" not in output, output
    if api:
        assert "KeyboardInterrupt: oodsim: jobs of this run may still be queued" in output
    assert _gone(helper), "the hung sbatch outlived the run"


@pytest.mark.slow
def test_sigterm_ends_a_run_whose_scancel_hangs_within_5_s_naming_the_jobs(
    tmp_path: Path,
) -> None:
    """SLURM jobs running, SIGTERM: the run says how to resume and closes its cluster, whose
    ``scancel`` hangs; the run still ends within 5 s, sends the cancel again (left to finish)
    and names the jobs whose cancel is not confirmed."""
    from tests.test_clusters import cluster_spec_file  # a slow module's helper: loaded here

    _fake(tmp_path / "bin", "scancel")
    spec = cluster_spec_file(tmp_path, 40)
    places = ["--cache", str(tmp_path / "c"), "--out", str(tmp_path / "r.zarr")]
    path = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    process = command_server.popen(
        [sys.executable, "-m", "oodsim.cli", "run", str(spec), *places],
        cwd=tmp_path,
        env={**os.environ, "PATH": path, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    try:
        training = lambda: any("training" in line for line in lines)  # noqa: E731
        wait_for(lambda: training() or process.poll() is not None, 180, "the jobs to train")
        assert process.poll() is None, "".join(lines)
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        took = time.monotonic() - sent
        reader.join(10)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        told = [line for line in lines if "was sent, not confirmed" in line]
        ids = (
            re.findall(r"\b\d+\b", told[0].split("cancel of")[1].split(" was sent")[0])
            if told
            else []
        )
        subprocess.run(["scancel", *ids], check=False)  # the real one (not on PATH's front)
    output = "".join(lines)
    assert process.returncode == 143, output
    assert took < 5.0, f"ended {took:.1f} s after SIGTERM:\n{output}"
    assert output.count("run the same spec again to resume.") == 1, output
    assert "the cancel of job" in output and "was sent, not confirmed" in output, output
    assert "scancel --me --name oodsim-worker" in output, output
    assert "Traceback" not in output, output
