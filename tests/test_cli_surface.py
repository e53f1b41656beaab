"""The ``oodsim`` command's first contact: ``--version``, plain and complete help texts, one way
to name a scheduler, and how Ctrl-C and SIGTERM stop a run (real processes, no mocks)."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

import oodsim
from oodsim.cli import main as cli_main
from oodsim.cli.main import parser
from oodsim.errors import SpecError
from oodsim.protocols import bind
from oodsim.store import Store
from tests import command_server
from tests.conftest import ROOT, children, digits_toml, signalled, wait_for

#: what a stopped run prints once, with the number of seeds found complete in the store
#: (the run's own resume line, "N of M simulations have everything in the store; ...", or the
#: one of a run that still waited 4 s after the signal, oodsim.clusters.signals.GRACE)
RESUME = "run the same spec again to resume."
#: third-party noise that must not follow it
NOISE = ("Traceback", "CommClosedError", "Exception ignored", "leaked semaphore")


#: how the tests start ``oodsim``: as its own process
OODSIM = [sys.executable, "-m", "oodsim.cli"]


def _oodsim(*args: str, **options) -> subprocess.Popen:
    """``oodsim ARGS`` as its own process (``python -m oodsim.cli``), output merged."""
    command = [*OODSIM, *args]
    return command_server.popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, **options
    )


def test_version_prints_the_installed_version() -> None:
    process = _oodsim("--version")
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert output == f"oodsim {version('oodsim')}\n"


def _parsers(command: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``command`` and every subcommand below it."""
    yield command
    for action in command._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _parsers(sub)


def test_every_help_is_plain_text_and_every_option_has_one() -> None:
    commands = list(_parsers(parser()))
    assert {c.prog for c in commands} >= {"oodsim cache ls", "oodsim cache gc", "oodsim run"}
    for command in commands:
        text = command.format_help()
        for markup in ("``", ":func:", ":class:", ":mod:"):
            assert markup not in text, (command.prog, text)
        for action in command._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            assert action.help and action.help.strip(), (command.prog, action.dest)
            for choice in getattr(action, "_choices_actions", []):  # subcommands' lines
                assert choice.help and choice.help.strip(), (command.prog, choice.dest)


def test_cluster_takes_an_address_and_address_is_a_hidden_old_spelling() -> None:
    run = next(c for c in _parsers(parser()) if c.prog == "oodsim run")
    text = " ".join(run.format_help().split())
    assert "--address" not in text
    assert "tcp://host:8786" in text and "KIND|ADDRESS" in text


@pytest.mark.parametrize(
    "options",
    [
        ["--cluster", "tcp://127.0.0.1:1"],
        ["--address", "tcp://127.0.0.1:1"],
        ["--cluster", "tcp://127.0.0.1:1", "--address", "tcp://127.0.0.1:1"],
    ],
    ids=["cluster", "address", "both-the-same"],
)
def test_each_spelling_of_an_address_reaches_that_scheduler(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str]
) -> None:
    spec = digits_toml(tmp_path / "spec.toml", 2)
    out = ("--out", str(tmp_path / "r.zarr"))  # never the checkout's results/ (the main job's)
    code = cli_main(["run", str(spec), "--cache", str(tmp_path / "c"), "--quiet", *out, *options])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert "no Dask scheduler answered at 'tcp://127.0.0.1:1'" in lines[0]


@pytest.mark.parametrize(
    "options",
    [
        ["--cluster", "tcp://127.0.0.1:1", "--address", "tcp://127.0.0.1:2"],
        ["--cluster", "local", "--address", "tcp://127.0.0.1:1"],
    ],
    ids=["two-addresses", "kind-and-address"],
)
def test_cluster_and_address_that_differ_are_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str]
) -> None:
    spec = digits_toml(tmp_path / "spec.toml", 2)
    code = cli_main(["run", str(spec), "--cache", str(tmp_path / "c"), *options])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("oodsim: error: --cluster ") and "not both" in lines[0]
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    ("signum", "group", "code"),
    [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143), (signal.SIGHUP, True, 129)],
    ids=["ctrl-c", "kill", "terminal-closed"],
)
def test_a_signal_stops_a_run_with_one_resume_line_and_nothing_after(
    tmp_path: Path, signum: int, group: bool, code: int
) -> None:
    """Ctrl-C in a terminal (SIGINT to the run's whole process group, its workers included),
    ``kill`` (SIGTERM to the driver alone, whose workers are still busy) and a terminal that
    closes (SIGHUP to the whole group: the driver used to die of it at once, leaving its locks,
    half-written files and batch jobs) stop a run on a local cluster the same way: the resume
    line once, no third-party log lines, and the exit code of the signal."""
    spec = digits_toml(tmp_path / "spec.toml", 6)
    cache = tmp_path / "cache"
    run = [*OODSIM, "run", str(spec), "--workers", "2", "--cache", str(cache)]
    driver, output = signalled(
        [*run, "--out", str(tmp_path / "r.zarr")],
        lambda _: any(cache.glob("checkpoint/*/*/meta.json")),
        signum=signum,
        group=group,
    )
    assert driver.returncode == code, output
    assert output.count(RESUME) == 1, output
    noise = [line for line in output.splitlines() if any(word in line for word in NOISE)]
    assert not noise, output


def test_a_run_under_nohup_goes_on_after_its_terminal_closes(tmp_path: Path) -> None:
    """``nohup oodsim run ...`` ignores SIGHUP, and so does the run: it is not turned into an
    interrupt as it is for a run in a terminal; its workers ignore it too."""
    spec = digits_toml(tmp_path / "spec.toml", 4)
    cache = tmp_path / "cache"
    run = ["nohup", *OODSIM, "run", str(spec), "--workers", "2", "--cache", str(cache)]
    driver, output = signalled(
        [*run, "--out", str(tmp_path / "r.zarr")],
        lambda _: any(cache.glob("checkpoint/*/*/meta.json")),
        signum=signal.SIGHUP,
    )
    assert driver.returncode == 0, output
    assert "4 simulations in" in output and RESUME not in output, output
    assert oodsim.open_results(tmp_path / "r.zarr").sizes["seed"] == 4


def test_a_driver_stopped_for_a_while_leaves_no_worker_tracebacks(tmp_path: Path) -> None:
    """The driver alone stopped (SIGSTOP, as a Ctrl-Z of it alone or a machine swapping) while
    its local workers train: each worker logged a 30-line traceback for every heartbeat its
    scheduler, in the stopped driver, did not answer (about 180 lines a minute). Once the
    driver goes on, the run ends as usual, without them. (Dask's connect timeout is cut to
    8 s here, so that heartbeats fail within the test's 14 s stop, as they do after 30 s; the
    workers' first connections, on a loaded machine, still have those 8 s.)"""
    spec = digits_toml(tmp_path / "spec.toml", 4)
    cache = tmp_path / "cache"
    run = [*OODSIM, "run", str(spec), "--workers", "2", "--cache", str(cache), "--quiet"]
    run += ["--out", str(tmp_path / "r.zarr")]  # not the session's results/ folder
    environment = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "8s"}
    driver = command_server.popen(
        run, stderr=subprocess.PIPE, text=True, env=environment, start_new_session=True
    )
    try:
        wait_for(
            lambda: any(cache.glob("checkpoint/*/*/meta.json")) or driver.poll() is not None,
            300,
            "a checkpoint",
        )
        assert driver.poll() is None, driver.communicate()[1]
        driver.send_signal(signal.SIGSTOP)
        time.sleep(14)
        driver.send_signal(signal.SIGCONT)
        _, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.communicate()
    assert driver.returncode == 0, err
    assert "during heartbeat" not in err and "Traceback" not in err, err


def _fork_server(driver: subprocess.Popen) -> bool:
    """Whether ``driver`` has started its workers' fork server (:mod:`oodsim.clusters.forkserver`),
    which then imports torch for about two seconds."""
    return bool(children(driver.pid, "multiprocessing.forkserver"))


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_while_the_local_cluster_starts_is_one_resume_line(
    tmp_path: Path, presses: int
) -> None:
    """Ctrl-C (once, or twice in a hurry) while the local cluster starts: the fork server,
    still importing torch, died of it with a traceback, and distributed's exit hook failed on
    the workers that ``LocalCluster(...)`` had begun to start (``AssertionError:
    Status.init``), which printed more tracebacks once the driver had gone. Now the run waits
    for its cluster to start, closes it and says how to resume, and leaves no process."""
    spec = digits_toml(tmp_path / "spec.toml", 1000)
    run = [*OODSIM, "run", str(spec), "--workers", "2", "--cache", str(tmp_path / "cache")]
    driver, output = signalled(
        [*run, "--out", str(tmp_path / "r.zarr")], _fork_server, presses=presses
    )
    assert driver.returncode == 130, output
    assert output.count(RESUME) == 1, output
    noise = [line for line in output.splitlines() if any(word in line for word in NOISE)]
    assert not noise, output
    # every process of the run ends with it (those not yet reaped are not running)
    wait_for(lambda: not _running_in_session(driver.pid), 60, "the run's processes to end")


#: ``oodsim`` with the clock of a stopped run (``signals.GRACE``) set by the first argument
SHORT_CLOCK = """
import sys

from oodsim.clusters import signals

signals.GRACE = float(sys.argv[1])
from oodsim.cli.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("grace", [0.3, 1.5])
def test_a_ctrl_c_while_the_local_cluster_starts_waits_for_it_however_short_the_clock(
    tmp_path: Path, grace: float
) -> None:
    """A loaded machine where the local cluster takes longer to start than the 4 s a stopped
    run may take (here a shorter clock stands in for the slow start): the run still waits for
    its cluster to start and closes it, with its own resume line. Ended by the clock mid-start,
    it left workers that its fork server forked as it exited, each printing a traceback (their
    semaphores unlinked) or the resource tracker's warning of leaked semaphores: the clock of a
    signal held while the local cluster starts runs from the start's end."""
    driver_script = tmp_path / "short_clock.py"
    driver_script.write_text(SHORT_CLOCK)
    spec = digits_toml(tmp_path / "spec.toml", 1000)
    run = [sys.executable, str(driver_script), str(grace), "run", str(spec), "--workers", "2"]
    run += ["--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "r.zarr")]
    driver, output = signalled(run, _fork_server)
    assert driver.returncode == 130, output
    assert output.count(RESUME) == 1, output
    noise = [line for line in output.splitlines() if any(word in line for word in NOISE)]
    assert not noise, output
    wait_for(lambda: not _running_in_session(driver.pid), 60, "the run's processes to end")


def _complete_seeds(spec: Path, cache: Path) -> int:
    """How many seeds of ``spec`` have every entry of their tasks in the store at ``cache``."""
    job = bind(oodsim.load(spec))
    store = Store(cache)
    seeds = job.spec.seeds.all()[: job.spec.max_seeds]
    return sum(all(task.done(store) for task in job.plan(seed)) for seed in seeds)


@pytest.mark.parametrize("again", [False, True], ids=["once", "again-after-the-resume-line"])
def test_ctrl_c_ends_a_run_whose_resume_line_stays_true(tmp_path: Path, again: bool) -> None:
    """Ctrl-C while the workers train: the run kills its local workers instead of waiting
    for their seeds (its exit came 5 to 10 s after the resume line), and a second Ctrl-C
    after the resume line, which used to be ignored, ends the command at once. Either way
    the seeds the line counts have every entry in the store, the store verifies (a write cut
    short leaves no entry), and no process of the run is left."""
    spec = digits_toml(tmp_path / "spec.toml", 8)
    cache = tmp_path / "cache"
    run = [*OODSIM, "run", str(spec), "--workers", "2", "--cache", str(cache)]
    driver = command_server.popen(
        [*run, "--out", str(tmp_path / "r.zarr")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(driver.stdout or ()), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any(cache.glob("checkpoint/*/*/meta.json")), 300, "a checkpoint")
        os.killpg(driver.pid, signal.SIGINT)
        if again:
            wait_for(lambda: any(RESUME in line for line in lines), 60, "the resume line")
            os.killpg(driver.pid, signal.SIGINT)
            driver.wait(timeout=4)  # at once (the bound is only for a machine under load)
        driver.wait(timeout=120)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    reader.join(timeout=60)
    output = "".join(lines)
    # a second Ctrl-C that comes as the interpreter ends kills it with SIGINT (Python has
    # restored the default handler): a shell reports 130 of that too
    assert driver.returncode in ((130, -signal.SIGINT) if again else (130,)), output
    assert output.count(RESUME) == 1, output
    noise = [line for line in lines if any(word in line for word in NOISE)]
    assert not noise, output
    wait_for(lambda: not _running_in_session(driver.pid), 60, "the run's processes to end")
    said = int(re.search(r"interrupted; (\d+) of", output).group(1))
    assert said <= _complete_seeds(spec, cache)
    assert Store(cache).verify() == []


def _running_in_session(session: int) -> list[str]:
    """The processes of a session that still run (zombies excluded), as ``ps`` lines."""
    listed = subprocess.run(
        ["ps", "-s", str(session), "-o", "stat=,pid=,args="], capture_output=True, text=True
    )
    return [line for line in listed.stdout.splitlines() if not line.lstrip().startswith("Z")]


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "specs/digits.toml", "--cache", ""],
        ["run", "specs/digits.toml", "--out", " "],
        ["run", "specs/digits.toml", "--report", ""],
        ["cache", "ls", "--cache", ""],
        ["report", "results/x.zarr", "--out", ""],
    ],
)
def test_an_empty_path_option_is_refused_not_read_as_the_default(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`--cache "$CACHE"` with the variable unset ran on the default cache (a probe's run
    wrote into ~/.cache/oodsim); the Python API's cache="" is refused the same way."""
    with pytest.raises(SystemExit) as caught:
        cli_main(argv)
    assert caught.value.code == 2
    assert "an empty path (an unset variable?)" in capsys.readouterr().err
    with pytest.raises(SpecError, match="cache: '' is not allowed"):
        oodsim.run(oodsim.load(ROOT / "specs" / "digits.toml"), cache="", progress=False)
