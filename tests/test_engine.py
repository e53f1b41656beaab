"""The engine's front door and its duties for every protocol, tested on a real cluster."""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import oodsim
from oodsim.cli import main as cli_main
from oodsim.data.registry import ImageData, load_dataset, register_dataset
from oodsim.engine import OutputExists, window
from oodsim.engine.progress import interrupted_message
from oodsim.errors import SpecError
from oodsim.protocols.open_set import entries
from oodsim.results import store_counts
from oodsim.results.history import kept_path, versions
from oodsim.specs import DatasetSpec, ExperimentSpec
from oodsim.store import Store
from tests import command_server
from tests.conftest import ROOT, small_digits, wait_for


# Registered here, in the driver: the cluster's worker processes never import this module, so
# they only know these names if the engine ships them.
@oodsim.detectors.register("test_engine_margin", needs={"logits"}, replace=True)
def margin(outputs, *, fit=None):
    """Top-1 minus top-2 logit."""
    top = np.sort(outputs.logits, axis=1)
    return top[:, -1] - top[:, -2]


@register_dataset("test_engine_digits", n_classes=10, hflip=False, description="digits, inverted")
def inverted_digits(root=None, download=False, image_size=None) -> ImageData:
    data = load_dataset("digits")
    return ImageData(images=255 - data.images, labels=data.labels, class_names=data.class_names)


def test_driver_registered_detector_and_dataset_reach_the_workers(
    cluster_address: str, cache: Path
) -> None:
    spec = small_digits(
        2, dataset=DatasetSpec(name="test_engine_digits"), detectors=("msp", "test_engine_margin")
    )
    results = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    assert list(results.method.values) == ["msp", "test_engine_margin"]
    assert (results.failure.values == "").all()
    margin_auroc = results.score.sel({"method": "test_engine_margin", "metric": "auroc"})
    assert np.isfinite(margin_auroc).all() and float(margin_auroc.mean()) > 0.6
    assert store_counts(results)["computed"] == {"checkpoint": 2, "outputs": 2}


def test_load_picks_the_protocol_from_the_file(tmp_path: Path) -> None:
    assert isinstance(oodsim.load(ROOT / "specs" / "digits.toml"), ExperimentSpec)  # default
    text = (ROOT / "specs" / "digits.toml").read_text()
    (tmp_path / "explicit.toml").write_text('protocol = "open_set"\n' + text)
    assert oodsim.load(tmp_path / "explicit.toml") == oodsim.load(ROOT / "specs" / "digits.toml")
    (tmp_path / "bad.toml").write_text('protocol = "open-set"\n' + text)
    with pytest.raises(SpecError, match="protocol.*'open_set', 'severity', 'imagenet_o'"):
        oodsim.load(tmp_path / "bad.toml")


def test_run_takes_a_path_and_a_rerun_scores_from_the_cache(
    cluster_address: str, cache: Path, tmp_path: Path
) -> None:
    spec = small_digits(2)
    path = tmp_path / "small.toml"
    path.write_text(_toml(spec))
    first = oodsim.run(path, address=cluster_address, cache=cache, progress=False)
    again = oodsim.run(spec, cache=cache, progress=False)  # cached: no cluster at all
    assert store_counts(again)["computed"] == {}
    np.testing.assert_array_equal(first.score.values, again.score.values)
    assert first.attrs["protocol"] == again.attrs["protocol"] == "open_set"


def _toml(spec: ExperimentSpec) -> str:
    """A TOML file of a spec (through its plain-data form)."""

    def value(v):
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, list | tuple):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k} = {value(x)}" for k, x in v.items() if x is not None) + "}"
        return repr(v)

    data = spec.to_dict()
    return "\n".join(f"{k} = {value(v)}" for k, v in data.items() if v is not None) + "\n"


def _interrupted(
    spec: ExperimentSpec, tmp_path: Path, workers: int, complete: int
) -> tuple[Path, str]:
    """``oodsim run`` of ``spec`` with ``workers``, sent SIGINT once ``complete`` of its first
    16 seeds have every entry in the store (a seed has several outputs entries: the first
    one says little); checks the exit code of an interrupt (130) and returns the cache and the
    run's stderr."""
    path = tmp_path / "spec.toml"
    path.write_text(_toml(spec))
    cache = tmp_path / "cache"
    driver = command_server.popen(
        [sys.executable, "-m", "oodsim.cli", "run", str(path), "--workers", str(workers)]
        + ["--cache", str(cache), "--out", str(tmp_path / "r.zarr")],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    store, needed = Store(cache), [entries(spec, seed) for seed in spec.seeds.all()[:16]]

    def enough() -> bool:
        assert driver.poll() is None, driver.communicate()[1]
        return sum(all(store.has(*entry) for entry in seed) for seed in needed) >= complete

    wait_for(enough, 300, f"{complete} complete seeds")  # a hang guard, not a speed check
    driver.send_signal(signal.SIGINT)
    _, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 130, stderr
    return cache, stderr


def test_an_interrupted_run_says_how_many_seeds_are_stored_and_resumes(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) mid-run: the message counts the seeds whose work is all in the store,
    and the next run computes at most the others."""
    spec = small_digits(6)
    cache, stderr = _interrupted(spec, tmp_path, workers=1, complete=2)
    found = re.search(r"interrupted; (\d+) of 6 simulations have everything in the store", stderr)
    assert found, stderr
    stored = int(found.group(1))
    assert stored >= 2
    again = oodsim.run(spec, cache=cache, n_workers=1, progress=False)
    assert (again.failure.values == "").all()
    assert store_counts(again)["computed"].get("checkpoint", 0) <= 6 - stored


def test_a_million_seeds_stream_through_a_bounded_window(tmp_path: Path) -> None:
    """The probe: with ``seeds.n = 1000000`` the driver hashed task keys for every seed and
    computed nothing in 100 s, then Ctrl-C made it plan every submitted seed again (killed
    after 18 minutes). Seeds now go out two batches at a time: the first simulation lands
    while the rest of the range is not even planned, and Ctrl-C counts the seeds reached."""
    n = 1_000_000
    _, stderr = _interrupted(small_digits(n), tmp_path, workers=2, complete=1)
    found = re.search(
        rf"interrupted; (\d+) of the first (\d+) of {n} simulations have everything in the "
        "store; run the same spec again to resume.",
        stderr,
    )
    assert found, stderr
    stored, reached = int(found.group(1)), int(found.group(2))
    # seeds before the window have landed; at most two batches (a few seeds per worker
    # thread each) are in flight: the driver never planned the whole range
    assert 1 <= stored <= reached <= stored + 2 * window.fixed_batch_size(slots=2)
    assert reached < 100
    assert "Traceback" not in stderr
    assert stderr.rstrip().splitlines()[-1].startswith("oodsim: interrupted;")


def test_batches_are_cut_when_asked_for() -> None:
    sizes = iter([2, 3, 100])
    assert list(window.batches(range(7), lambda: next(sizes))) == [
        range(2),
        range(2, 5),
        range(5, 7),
    ]
    assert list(window.batches((), lambda: 4)) == []
    assert window.fixed_batch_size(1) == window.MIN_BATCH
    assert window.fixed_batch_size(10) == 10 * window.PER_SLOT
    assert interrupted_message(3, 6, 6, "seeds").startswith("interrupted; 3 of 6 seeds")
    reached = interrupted_message(3, 16, 10**6, "seeds")
    assert reached.startswith("interrupted; 3 of the first 16 of 1000000 seeds have everything")


def test_an_edited_spec_reruns_and_keeps_what_it_replaces(tmp_path: Path, capsys) -> None:
    """Results of an earlier version of a spec name move beside the new ones, kept by key;
    results of another spec name (or of nothing oodsim wrote) are never replaced silently."""
    cache, out = tmp_path / "cache", tmp_path / "r.zarr"
    first = small_digits(2)
    oodsim.run(first, cache=cache, out=out, n_workers=1, progress=False)
    oodsim.run(first, cache=cache, out=out, progress=False)  # the same spec: replaced (cached)
    assert [s.key for s in versions(out)] == [first.key]
    edited = small_digits(3)  # one more seed: another key, the same name
    stream = io.StringIO()
    oodsim.run(edited, cache=cache, out=out, n_workers=1, progress=stream)
    follows = next(line for line in stream.getvalue().splitlines() if "changed since" in line)
    assert "(seeds.n 2 → 3)" in follows and f"move to {kept_path(out, first.key)}" in follows
    assert [(s.key, s.latest) for s in versions(out)] == [(edited.key, True), (first.key, False)]
    assert oodsim.open_results(out).sizes["seed"] == 3
    assert oodsim.open_results(kept_path(out, first.key)).sizes["seed"] == 2
    oodsim.run(first, cache=cache, out=out, progress=False)  # back again: one place a key
    assert [(s.key, s.latest) for s in versions(out)] == [(first.key, True), (edited.key, False)]

    other = small_digits(4, name="other")
    with pytest.raises(OutputExists, match="another spec named 'digits'.*overwrite=True"):
        oodsim.run(other, cache=cache, out=out, progress=False)
    assert oodsim.open_results(out).attrs["spec_key"] == first.key  # untouched
    path = tmp_path / "other.toml"
    path.write_text(_toml(other))
    assert cli_main(["run", str(path), "--cache", str(cache), "--out", str(out)]) == 2
    assert "oodsim run --overwrite" in capsys.readouterr().err
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("not oodsim's")
    with pytest.raises(OutputExists, match="is not oodsim results"):
        oodsim.run(first, cache=cache, out=foreign, progress=False)
    assert (foreign / "mine.txt").read_text() == "not oodsim's"
    replaced = oodsim.run(other, cache=cache, out=out, n_workers=1, progress=False, overwrite=True)
    assert oodsim.open_results(out).attrs["spec_key"] == replaced.attrs["spec_key"] == other.key
    assert [s.key for s in versions(out)] == [other.key, edited.key]  # another name's: not kept


@pytest.mark.parametrize("workers", [0, -2])
def test_fewer_than_one_worker_is_refused_before_any_compute(tmp_path: Path, workers: int) -> None:
    with pytest.raises(SpecError, match="workers.*>= 1"):
        oodsim.run(small_digits(1), cache=tmp_path / "cache", n_workers=workers, progress=False)
    assert not (tmp_path / "cache").exists()
