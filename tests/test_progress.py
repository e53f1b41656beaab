"""The status line: progress notes of the work before seeds land, a time left only once it means
something (two seeds per worker) and with a range, the plan in ``oodsim run``'s first line."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

import pytest

import oodsim
from oodsim.engine import progress as progress_module
from oodsim.engine.cache_count import count_cached
from oodsim.engine.inprocess import InProcess
from oodsim.engine.progress import RECORD_ENV, Progress
from oodsim.engine.time_left import ROUNDS_BEFORE_ESTIMATE
from oodsim.progress_notes import TOPIC, describe, note_progress, working_on
from oodsim.protocols import bind
from oodsim.store import Store
from tests.conftest import small_digits, wait_for


def _lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_no_time_left_before_every_worker_finished_two_seeds() -> None:
    slots, total = 3, 20
    stream = io.StringIO()
    progress = Progress(total, stream, interval=0.0, unit="simulations", slots=lambda: slots)
    progress.update(failed=False, cached=True)  # cached seeds never count towards the pace
    for _ in range(ROUNDS_BEFORE_ESTIMATE * slots - 1):
        progress.update(failed=False, cached=False)
    assert not any("left" in line for line in _lines(stream))
    progress.update(failed=False, cached=False)
    last = _lines(stream)[-1]
    assert re.search(r", ~\d+:\d\d left \(\d+:\d\d–\d+:\d\d\)$", last), last
    for _ in range(total - progress.done):
        progress.update(failed=False, cached=False)
    final = _lines(stream)[-1]
    assert re.fullmatch(rf"oodsim: {total}/{total} simulations \(1 cached\) in \d+:\d\d", final)


def test_progress_notes_fill_the_line_until_the_run_ends() -> None:
    stream = io.StringIO()
    progress = Progress(2, stream, interval=0.0)
    progress.heard({"task": "simulation 0", "stage": "training, epoch", "step": 4, "total": 30})
    assert _lines(stream) == [
        "oodsim: 0/2 seeds (0 cached) in 0:00; simulation 0: training, epoch 4/30"
    ]
    progress.update(failed=False, cached=False)
    progress.update(failed=True, cached=False)
    progress.heard({"task": "simulation 1", "stage": "late", "step": None, "total": None})
    assert _lines(stream)[-1] == "oodsim: 2/2 seeds (0 cached, 1 failed) in 0:00"


def test_a_beat_reaches_an_in_process_subscriber_with_its_task() -> None:
    """The in-process executor takes a progress note subscription as a Dask client does: events
    of ``(time, message)``, delivered until it unsubscribes (or its run ends)."""
    heard: list[tuple[float, dict]] = []
    with InProcess() as client:
        client.subscribe_topic(TOPIC, heard.append)
        with working_on("simulation 7"):
            note_progress("training, epoch", 1, 30)
            note_progress("training, epoch", 2, 30)  # within the throttle interval: dropped
        client.unsubscribe_topic(TOPIC)
        with working_on("simulation 8"):
            note_progress("training, epoch", 1, 30)  # nobody listens: nothing happens
        client.subscribe_topic(TOPIC, heard.append)
    with working_on("simulation 9"):
        note_progress("after the run", 1)  # the run's end stopped the subscription
    assert [describe(message) for _, message in heard] == ["simulation 7: training, epoch 1/30"]
    assert all(isinstance(when, float) for when, _ in heard)
    with pytest.raises(ValueError, match="oodsim-progress"):
        InProcess().subscribe_topic("other", heard.append)


def test_an_in_process_run_says_what_it_trains_before_the_seed_lands(tmp_path: Path) -> None:
    stream = io.StringIO()
    oodsim.run(small_digits(1), cache=tmp_path / "cache", progress=stream)
    opening, first, *_, last = _lines(stream)
    assert opening.startswith("oodsim: digits (open_set; 1 simulations: 0 in the cache")
    assert first.startswith("oodsim: 0/1 simulations (0 cached) in ")
    assert first.endswith("; simulation 0: training, epoch 1/6"), first
    assert last.startswith("oodsim: 1/1 simulations (0 cached) in ")


def test_the_plan_counts_cached_seeds(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    spec = small_digits(3)
    assert count_cached(bind(spec), Store(cache), [0, 1, 2]).describe("simulations") == (
        "3 simulations: 0 in the cache, 3 to compute"
    )
    oodsim.run(small_digits(2), cache=cache, n_workers=1, progress=False)
    assert count_cached(bind(spec), Store(cache), [0, 1, 2]).describe("simulations") == (
        "3 simulations: 2 in the cache, 1 to compute"
    )
    assert count_cached(bind(spec), Store(cache), [0, 1]).describe("simulations") == (
        "2 simulations, all in the cache"
    )
    partial = count_cached(bind(spec), Store(cache), [0, 1, 2], budget=0.0)
    assert (partial.cached, partial.checked) == (1, 1)  # at least one seed is always counted
    assert partial.describe("simulations") == (
        "3 simulations: 1 of the first 1 in the cache (the rest not checked yet)"
    )


def test_a_quiet_run_says_so_with_what_it_last_heard(monkeypatch: pytest.MonkeyPatch) -> None:
    """Work pending and nothing heard for ``QUIET_NOTICE`` seconds: the line says so, with the
    last progress note; a progress note or a seed that lands puts the line back."""
    monkeypatch.setattr(progress_module, "QUIET_NOTICE", 0.0)
    stream = io.StringIO()
    progress = Progress(2, stream, interval=0.0)
    progress.heard({"task": "simulation 0", "stage": "training, epoch", "step": 1, "total": 30})
    progress.waiting()
    assert re.search(
        r"; nothing heard from the work for \d+:\d\d \(the last: simulation 0: training, "
        r"epoch 1/30\); a long step sends no progress note, but the work may also be stuck",
        _lines(stream)[-1],
    ), _lines(stream)
    progress.heard({"task": "simulation 0", "stage": "training, epoch", "step": 2, "total": 30})
    assert _lines(stream)[-1].endswith("; simulation 0: training, epoch 2/30")
    monkeypatch.setattr(progress_module, "QUIET_NOTICE", 3600.0)
    progress.waiting()  # heard from just now: nothing to say
    assert _lines(stream)[-1].endswith("; simulation 0: training, epoch 2/30")


def test_a_silent_stretch_is_told_without_anyone_asking(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe: a cached seed scored in the driver by a slow detector (8 s) left the line
    without a word, because the quiet notice was asked only while the run waited for a
    cluster's futures. A thread now asks all along the run."""
    monkeypatch.setattr(progress_module, "QUIET_NOTICE", 0.0)
    stream = io.StringIO()
    progress = Progress(2, stream, interval=0.0)
    progress.heard({"task": "seed 0", "stage": "scoring here, from the cache"})
    with progress.watching(every=0.01):
        wait_for(lambda: "nothing heard from the work" in stream.getvalue(), 60, "the notice")
    assert "(the last: seed 0: scoring here, from the cache)" in _lines(stream)[-1]


def test_a_rerun_says_which_seed_it_scores_here(tmp_path: Path) -> None:
    """Seeds whose work is all cached are scored in the driver; the line names each."""
    spec = small_digits(2)
    oodsim.run(spec, cache=tmp_path / "c", n_workers=1, progress=False)
    stream = io.StringIO()
    oodsim.run(spec, cache=tmp_path / "c", n_workers=1, progress=stream)
    assert "; seed 0: scoring here, from the cache" in _lines(stream)[1], _lines(stream)


def test_without_a_worker_the_line_says_so_not_that_the_work_is_quiet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job cluster whose jobs are queued has no worker and sends no progress note: the line
    says there is no worker (where to look), and the quiet notice, asked all along, does not
    take its place; once workers are back, a silent stretch is told again."""
    monkeypatch.setattr(progress_module, "QUIET_NOTICE", 0.0)
    stream = io.StringIO()
    progress = Progress(2, stream, interval=0.0)
    progress.no_worker(60.0)
    progress.waiting()
    assert "; no worker yet (1:00)" in _lines(stream)[-1], _lines(stream)
    progress.no_worker(0.0)  # the workers have connected
    progress.waiting()
    assert "; nothing heard from the work for" in _lines(stream)[-1], _lines(stream)


def test_the_no_worker_line_names_a_queue_only_for_a_job_cluster() -> None:
    """The probe: a run on a scheduler's address without workers said `a job cluster's jobs
    may be queued (squeue, qstat)`. Only a job cluster's line names its queue (the hint of
    oodsim.clusters.job_watch, what squeue says of its jobs)."""
    stream = io.StringIO()
    progress = Progress(2, stream, interval=0.0)
    progress.no_worker(60.0)  # a local cluster, a scheduler's address
    line = _lines(stream)[-1]
    assert line.endswith("; no worker yet (1:00): the cluster's workers have not connected"), line
    progress.no_worker(70.0, "squeue says of the slurm jobs: 57 PENDING (Priority)")
    line = _lines(stream)[-1]
    assert line.endswith(
        "no worker yet (1:10): squeue says of the slurm jobs: 57 PENDING (Priority)"
    )


def test_a_silent_scheduler_is_told_not_blamed_on_the_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stopped (SIGSTOP) scheduler at ``--cluster ADDRESS``: the line said that nothing was
    heard from the work, which may be stuck, and repeated it forever. It now says that the
    scheduler does not answer, and when the run stops; the quiet notice does not take its
    place, and once the scheduler answers again, a silent stretch is told again."""
    monkeypatch.setattr(progress_module, "QUIET_NOTICE", 0.0)
    stream = io.StringIO()
    progress = Progress(2, stream, interval=0.0)
    progress.unanswered(42.0, 300.0)
    progress.waiting()
    assert _lines(stream)[-1].endswith(
        "; the Dask scheduler has not answered for 0:42 (stopped or hung, or a network that "
        "drops its packets); the run stops after 5:00 without an answer"
    ), _lines(stream)
    progress.unanswered(0.0, 300.0)  # it answers again
    progress.waiting()
    assert "; nothing heard from the work for" in _lines(stream)[-1], _lines(stream)


def test_a_silent_run_tells_each_stall_once() -> None:
    """``--quiet`` (``progress=False``): no status line, but a stall is told once on the
    notices' stream, and again only after it has ended and another began; a quiet run on a
    queue that never gave a worker used to wait without a word."""
    notices = io.StringIO()
    progress = Progress(2, None, interval=0.0, notices=notices)
    progress.no_worker(5.0)  # not yet a stall
    progress.no_worker(12.0, "squeue says of the slurm jobs: 57 PENDING (Priority)")
    progress.no_worker(14.0, "squeue says of the slurm jobs: 57 PENDING (Priority)")
    assert notices.getvalue().splitlines() == [
        "oodsim: no worker yet (0:12): squeue says of the slurm jobs: 57 PENDING (Priority)"
    ]
    progress.no_worker(0.0)  # the workers came
    progress.unanswered(30.0, 300.0)
    progress.unanswered(32.0, 300.0)
    progress.update(failed=False, cached=False)
    progress.no_worker(11.0)
    assert notices.getvalue().splitlines()[1:] == [
        "oodsim: the Dask scheduler has not answered for 0:30 (stopped or hung, or a network "
        "that drops its packets); the run stops after 5:00 without an answer",
        "oodsim: no worker yet (0:11): the cluster's workers have not connected",
    ]


def test_a_run_records_its_landings_where_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``$OODSIM_RECORD_LANDINGS``: the landings that ``benchmarks/progress.py`` replays."""
    record = tmp_path / "landings.json"
    monkeypatch.setenv(RECORD_ENV, str(record))
    progress = Progress(3, None, slots=lambda: 2)
    progress.update(failed=False, cached=True)
    progress.update(failed=True, cached=False)
    assert not record.exists()  # written when the run has ended
    progress.update(failed=False, cached=False)
    landings = json.loads(record.read_text())["landings"]
    assert [flags for _, *flags in landings] == [
        [True, False, 2],
        [False, True, 2],
        [False, False, 2],
    ]
    times = [when for when, *_ in landings]
    assert times == sorted(times) and times[0] >= 0


class _TimedLines(io.StringIO):
    """A log (not a terminal) that notes when each line was written."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def write(self, text: str) -> int:
        self.times += [time.monotonic()] * text.count("\n")
        return super().write(text)


@pytest.mark.slow
def test_a_line_comes_at_least_every_interval_while_the_cluster_starts(tmp_path: Path) -> None:
    """From the opening line to the first seed's progress note (a cluster's start took 15 to 22 s
    on a loaded machine, without a word), the line names the start and comes at least every
    ``interval`` (5 s) in a log."""
    stream = _TimedLines()
    oodsim.run(small_digits(2), n_workers=2, cache=tmp_path / "cache", progress=stream)
    lines = _lines(stream)
    first_seed = next(i for i, line in enumerate(lines) if "simulation" in line.split(";")[-1])
    assert "local cluster: starting 2 workers" in lines[1], lines
    starting = stream.times[: first_seed + 1]
    assert max(b - a for a, b in zip(starting, starting[1:])) <= 5.0, list(zip(starting, lines))


def test_the_status_line_tells_excluded_seeds_apart_from_failed_ones() -> None:
    """A degenerate seed is scored and left out by the spec's rule: the line said "failed"."""
    stream = io.StringIO()
    tracker = Progress(3, stream)
    tracker.update(False, cached=True, excluded=True)
    tracker.update(True, cached=False)
    tracker.update(False, cached=True)
    assert (
        stream.getvalue()
        .splitlines()[-1]
        .startswith("oodsim: 3/3 seeds (2 cached, 1 excluded, 1 failed) in ")
    )
