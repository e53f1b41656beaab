"""Shared fixtures: small real experiments and one real Dask cluster per test session."""

from __future__ import annotations

import compileall
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import psutil
import pytest

import oodsim
from oodsim.cli import main as cli_main
from oodsim.clusters import signals
from oodsim.specs import ExperimentSpec, load_spec
from oodsim.store import PROJECT_DEFAULTS_ENV
from tests import command_server, s3_server

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")

#: Modules whose tests train models, start clusters or run ``oodsim`` in subprocesses: marked
#: ``slow``, so that ``pytest -m "not slow"`` is the quick subset (README). Any other test that
#: uses the shared cluster (``cluster_address``) is slow too.
SLOW_MODULES = frozenset(
    {
        "test_architectures",
        "test_cache_healing",
        "test_cli_surface",
        "test_clusters",
        "test_command_server",
        "test_data_fingerprint",
        "test_datasets",
        "test_degenerate",
        "test_detector_reuse",
        "test_determinism",
        "test_doc_examples",
        "test_engine",
        "test_faults",
        "test_forkserver",
        "test_frozen_scheduler",
        "test_guard",
        "test_imagenet_o",
        "test_inprocess",
        "test_keys",
        "test_metric_conventions_run",
        "test_outputs_safety",
        "test_pipeline",
        "test_plugin_sources",
        "test_private_cluster",
        "test_protocol_plugin",
        "test_project_cache",
        "test_pytorch_ood",
        "test_script_server",
        "test_severity_run",
        "test_stalled_workers",
        "test_stopping_run",
        "test_throughput_bench",
        "test_tuning",
        "test_working_folder",
    }
)


#: The longest modules, longest first (their wall time in a full run, 2026-12-05: 246, 128,
#: 123, 91, 88, 55, 52, 41, 41, 38, 34, 32, 31 and 23 s). The suite runs its test files on two
#: processes (pytest-xdist, ``--dist loadfile --no-loadscope-reorder``: each process takes the
#: next file when it is free), and starting the longest files first keeps both busy to the end
#: (the longest-processing-time rule); a long file started last holds one process alone.
FIRST_MODULES = (
    "test_doc_examples",
    "test_faults",
    "test_clusters",
    "test_report",
    "test_cli_surface",
    "test_cache_healing",
    "test_frozen_scheduler",
    "test_outputs_safety",
    "test_severity_run",
    "test_report_plots",
    "test_pipeline",
    "test_stalled_workers",
    "test_metrics",
    "test_project_cache",
)


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the runs the tests start, however the suite was started: a shell starts
    a background job (``pytest ... &`` in a script, ``nohup``) with SIGINT ignored, which every
    child inherits, so the tests that interrupt ``oodsim run`` saw it finish with exit 0. A
    handler (unlike "ignored") is reset to the default in each child that execs, and Python
    then installs its own, as in a terminal.

    One BLAS and OpenMP thread in each test process (three run side by side, pytest-xdist) and
    in every process they start, as oodsim's workers have: OpenBLAS's second thread, on a
    machine whose cores are all busy, mostly waits. Set before xdist starts its processes,
    which load numpy with it.

    And every process points at the tests' S3 server (:func:`tests.s3_server.prepare`) before
    it starts any: a fork server of a local cluster keeps the environment it started with."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", 0):
        s3_server.prepare()  # in each test process (not in xdist's, which runs none)
    if not hasattr(config, "workerinput"):  # once, in the process that starts xdist's
        byte_compile()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """How many test processes ``-n auto`` (the suite's default) starts: three for the whole
    suite, whose end-to-end tests spend much of their time waiting (worker timeouts, stopped
    drivers, batch jobs) while a third process computes; two for ``-m "not slow"``, whose
    tests compute without waiting, so that a third would add only its own collection (about
    15 CPU-s: every process imports every test module)."""
    return 2 if "not slow" in (config.getoption("markexpr") or "") else 3


def byte_compile(root: Path = ROOT) -> None:
    """Byte-compile the package and the tests' helpers of the checkout at ``root`` into their
    ``__pycache__`` folders, as a first import writes them where ``$PYTHONDONTWRITEBYTECODE``
    is unset: where it is set (CI's environment), every interpreter the suite starts (a few
    hundred: fork servers, command runs, workers) compiled each oodsim module it imported,
    about 0.4 CPU-s each."""
    for folder in (root / "oodsim", root / "tests"):
        compileall.compile_dir(folder, quiet=1)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop this process's command server (:mod:`tests.command_server`), if it started one."""
    command_server.close_server()


def _module(item: pytest.Item) -> str:
    return item.module.__name__.rsplit(".", 1)[-1] if item.module else ""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the long tests ``slow`` (see :data:`SLOW_MODULES`); the longest files first
    (:data:`FIRST_MODULES`; the rest keep their order)."""
    for item in items:
        if _module(item) in SLOW_MODULES or "cluster_address" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(FIRST_MODULES)}
    items.sort(key=lambda item: rank.get(_module(item), len(rank)))


def wait_for(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    """Poll ``probe`` until it returns something truthy, every 50 ms (a probe that lists
    processes costs about 2 ms: polled faster, it took a sixth of a core from the run it
    waits for)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def children(pid: int, command: str) -> list[psutil.Process]:
    """The child processes of ``pid`` whose command line contains ``command`` (those that
    end meanwhile left out; none once ``pid`` itself has ended)."""
    try:
        listed = psutil.Process(pid).children()
    except psutil.NoSuchProcess:  # it ended between the caller's check and this one
        return []
    found = []
    for child in listed:
        with contextlib.suppress(psutil.Error):
            if command in " ".join(child.cmdline()):
                found.append(child)
    return found


def in_thread(function: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``function`` in a thread; its result or exception lands in the returned dict."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = function()
        except BaseException as error:  # re-raised by the test
            box["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def in_time(function: Callable[[], Any], timeout: float) -> Any:
    """``function()`` in a thread, failing the test if it has not returned within ``timeout``
    seconds (instead of hanging the test session); its error is raised here."""
    thread, box = in_thread(function)
    thread.join(timeout)
    assert not thread.is_alive(), f"still running after {timeout} s (a hang)"
    if "error" in box:
        raise box["error"]
    return box.get("result")


def signalled(
    command: list[str],
    ready: Callable[[subprocess.Popen], object],
    *,
    signum: int = signal.SIGINT,
    presses: int = 1,
    group: bool = True,
    cwd: Path = ROOT,
) -> tuple[subprocess.Popen, str]:
    """Run ``command`` in a session of its own, as a terminal starts a command; once
    ``ready(process)``, send it ``signum`` ``presses`` times (0.2 s apart): to its whole
    process group, as a terminal's Ctrl-C does, or (``group=False``) to it alone, as ``kill``
    does. The ended process (its session is its pid) and its output (stdout and stderr
    merged). The command gets SIGHUP's default action, as from a terminal, even where the
    suite runs under ``nohup`` (which ignores SIGHUP in every process it starts)."""
    hangup = signal.getsignal(signal.SIGHUP)
    if hangup is signal.SIG_IGN:  # an ignored signal stays ignored across exec: not a terminal's
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        process = command_server.popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
            start_new_session=True,
        )
    finally:
        signal.signal(signal.SIGHUP, hangup)
    try:
        wait_for(lambda: ready(process) or process.poll() is not None, 300, "the moment to signal")
        assert process.poll() is None, process.communicate()[0]
        for _ in range(presses):
            if group:
                os.killpg(process.pid, signum)
            else:
                process.send_signal(signum)
            time.sleep(0.2)
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    return process, output


def drop_file_permission_override() -> None:
    """Root ignores permission bits through CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH: drop both
    from the bounding set (a ``preexec_fn``: in the child, before exec), so that the exec'd
    process is refused writes to a ``chmod 555`` folder like any user."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        libc.prctl(24, capability, 0, 0, 0)  # PR_CAPBSET_DROP; harmless where not root


def run_read_only(
    command: list[str], folders: Sequence[Path], timeout: float, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """``command`` run with ``folders`` made read-only (``chmod 555``) and root's permission
    override dropped (:func:`drop_file_permission_override`), the folders writable again
    afterwards."""
    for folder in folders:
        folder.chmod(0o555)
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=drop_file_permission_override,
            cwd=cwd,
        )
    finally:
        for folder in folders:
            folder.chmod(0o755)


def run_denied(command: list[str], folder: Path, timeout: float) -> subprocess.CompletedProcess:
    """:func:`run_read_only` of one ``folder``; the test is skipped where the process could
    still write there."""
    done = run_read_only(command, [folder], timeout)
    if done.returncode == 0:
        pytest.skip("this process can still write a chmod 555 folder (capabilities kept)")
    return done


def small_digits(n_seeds: int = 4, **changes) -> ExperimentSpec:
    """The shipped digits spec, shrunk so one simulation trains in about a second (MSP only)."""
    spec = load_spec(ROOT / "specs" / "digits.toml")
    spec = attrs.evolve(
        spec,
        model=attrs.evolve(spec.model, width=8),
        training=attrs.evolve(spec.training, max_epochs=6, patience=2),
        seeds=attrs.evolve(spec.seeds, n=n_seeds),
        detectors=("msp",),
        metrics=("auroc", "accuracy"),
    )
    return attrs.evolve(spec, **changes)


def digits_toml(
    path: Path, n: int, *, start: int = 0, detectors: str = '"msp"', **fields: str
) -> Path:
    """Write the TOML form of ``small_digits(n)`` for ``oodsim run``; ``fields`` replace the
    values of other ``key = value`` lines (e.g. ``lr="1e6"``)."""
    values = {"width": "8", "max_epochs": "6", "patience": "2", "n": f"{n}\nstart = {start}"}
    values |= {"metrics": '["auroc", "accuracy"]', "detectors": f"[{detectors}]", **fields}
    lines = []
    for line in (ROOT / "specs" / "digits.toml").read_text().splitlines():
        if line.startswith('  "') or line == "]":  # the rest of the multi-line detector list
            continue
        key = line.split(" = ", 1)[0]
        lines.append(f"{key} = {values[key]}" if " = " in line and key in values else line)
    path.write_text("\n".join(lines) + "\n")
    return path


def cli_run_on(address: str, spec_path: Path, folder: Path) -> int:
    """``oodsim run SPEC`` in this process on the cluster at ``address``, cache and results
    under ``folder``; its exit code."""
    out = ["--cache", str(folder / "c"), "--out", str(folder / "r.zarr")]
    return cli_main(["run", str(spec_path), "--address", address, "--quiet", *out])


@contextlib.contextmanager
def dask_cli_cluster(folder: Path, *worker_args: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """A scheduler and one worker started as separate processes with the ``dask`` CLI (as a
    user would on a cluster); yields the scheduler address and the worker process, and stops
    both on exit. ``worker_args`` are extra ``dask worker`` options (e.g. ``--no-nanny``)."""
    from distributed import Client

    scheduler_file = folder / "scheduler.json"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    processes = [
        subprocess.Popen(
            [
                "dask",
                "scheduler",
                "--scheduler-file",
                str(scheduler_file),
                "--host",
                "127.0.0.1",  # loopback only: tests never listen on a network interface
                "--port",
                "0",
                "--no-dashboard",
            ],
            **quiet,
        )
    ]
    try:
        deadline = time.time() + 60
        while not scheduler_file.exists() and time.time() < deadline:
            time.sleep(0.2)
        address = json.loads(scheduler_file.read_text())["address"]
        worker = subprocess.Popen(
            [
                "dask",
                "worker",
                address,
                "--host",
                "127.0.0.1",
                "--nthreads",
                "1",
                "--no-dashboard",
                *worker_args,
            ],
            **quiet,
        )
        processes.append(worker)
        with Client(address, timeout=30) as client:
            client.wait_for_workers(1, timeout=60)
        yield address, worker
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                process.kill()
            process.wait()


@pytest.fixture
def python_handlers() -> Iterator[None]:
    """Python's own Ctrl-C handler, as in a terminal, for a test that sends this process real
    signals; the handlers of SIGINT and SIGTERM are put back after it."""
    before = {s: signal.getsignal(s) for s in signals.STOPPING}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)


@pytest.fixture(scope="session")
def cluster_address() -> Iterator[str]:
    """A real LocalCluster with two worker processes, shared by the tests that need one; its
    workers fork from oodsim's server and watch themselves at the rates of oodsim's clusters
    (idle most of the session, at Dask's defaults it took an eighth of a core)."""
    import dask.config
    from distributed import LocalCluster

    from oodsim.clusters.dask_settings import LIGHT_MONITORING, unless_configured
    from oodsim.clusters.forkserver import forking

    with (
        dask.config.set(unless_configured(LIGHT_MONITORING)),
        forking() as forked,
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            # the scheduler's HTTP port: any free one on loopback (8787 was taken by the other
            # test process's cluster: "UserWarning: Port 8787 is already in use")
            scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
            **forked,
        ) as cluster,
    ):
        yield cluster.scheduler_address


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The tests' S3-compatible server (:mod:`tests.s3_server`), started on the endpoint this
    process points at unless one answers there (``.ci/run``'s)."""
    endpoint = os.environ[s3_server.ENDPOINT_ENV]
    server = None if s3_server.answers(endpoint) else s3_server.start(endpoint)
    yield endpoint
    if server is not None:
        server.kill()
        server.wait(10)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def _user_folders() -> dict[str, list[tuple[str, int]]]:
    """What the user's own ``results/`` and ``cache/`` of the checkout hold (names, mtimes)."""
    state = {}
    for name in ("results", "cache"):
        folder = ROOT / name
        entries = sorted(folder.rglob("*")) if folder.is_dir() else []
        state[name] = [(str(p.relative_to(folder)), p.lstat().st_mtime_ns) for p in entries]
    return state


@pytest.fixture(autouse=True, scope="session")
def _hermetic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No test reads or writes the user's ``results/`` or ``cache/``: every run that names no
    store or output uses a session folder of its own (``$OODSIM_CACHE`` and ``$OODSIM_RESULTS``,
    inherited by subprocesses and workers), and the session ends by checking that the
    checkout's folders did not change."""
    before = _user_folders()
    previous = {name: os.environ.get(name) for name in PROJECT_DEFAULTS_ENV}
    os.environ["OODSIM_CACHE"] = str(tmp_path_factory.mktemp("session-cache"))
    os.environ["OODSIM_RESULTS"] = str(tmp_path_factory.mktemp("session-results"))
    yield
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    after = _user_folders()
    assert after == before, "the test session changed the checkout's results/ or cache/"


#: seeds of the shared clean cache (:func:`clean`)
CLEAN_SEEDS = 2


@pytest.fixture(scope="module")
def clean(cluster_address: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """One clean cache of ``small_digits(CLEAN_SEEDS)`` and its results, for a module whose
    tests each damage a copy (:func:`copy`)."""
    cache = tmp_path_factory.mktemp("clean") / "cache"
    spec = small_digits(CLEAN_SEEDS)
    return cache, oodsim.run(spec, address=cluster_address, cache=cache, progress=False)


@pytest.fixture
def copy(clean: tuple[Path, Any], tmp_path: Path) -> Path:
    """A private copy of the clean cache (links copied as links)."""
    target = tmp_path / "cache"
    shutil.copytree(clean[0], target, symlinks=True)
    return target


def install_package(
    site: Path, distribution: str, entry_points: str, modules: dict[str, str] | None = None
) -> None:
    """What ``pip install`` leaves of a package in ``site`` (put it on ``sys.path``): its
    ``modules`` (name → source, dedented) and a dist-info declaring ``entry_points`` (the text
    of ``entry_points.txt``)."""
    import textwrap

    info = site / f"{distribution.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    for name, text in (modules or {}).items():
        (site / f"{name}.py").write_text(textwrap.dedent(text))
