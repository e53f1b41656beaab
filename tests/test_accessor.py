"""The ``.oodsim`` accessor (:mod:`oodsim.results.accessor`): slicing without xarray's
``method=`` trap, no ``severity`` dim where results have no levels, tidy pandas frames of the
statistics' outputs; on results built by the project's constructor (:func:`oodsim.results.build`)
in the open set and the severity layouts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from oodsim.results import (
    DEGENERATE,
    NO_SEVERITY,
    DataArrayAccessor,
    DatasetAccessor,
    LabelError,
    open_results,
    save_results,
)
from oodsim.stats import compare, estimate, power
from tests.factories import METRICS, synthetic_results

METHODS = ("msp", "odin", "energy")
FAILED = 3  # the seed index synthetic_results fails
EXCLUDED = 1  # scored, then excluded as degenerate (below)


@pytest.fixture(scope="module")
def open_set() -> xr.Dataset:
    """Open set results: one failed seed (no scores) and one excluded as degenerate (its
    scores kept in ``score``, masked by ``failure``)."""
    results = synthetic_results(8, methods=METHODS)
    failure = results["failure"].values.copy()
    failure[EXCLUDED] = DEGENERATE.message("accuracy 0.10 is not above chance")
    return results.assign(failure=("seed", failure))


@pytest.fixture(scope="module")
def levels() -> xr.Dataset:
    return synthetic_results(6, methods=METHODS, levels=("0", "1", "2"), models=("a", "b"))


def test_sel_by_method_selects_that_method(open_set: xr.Dataset) -> None:
    trap = open_set.score.sel(method="msp")  # xarray's fill-method keyword: nothing selected
    assert trap.sizes["method"] == len(METHODS)
    view = open_set.oodsim.sel(method="msp", metric="auroc")
    assert view.dims == ("seed",) and view.name == "score"
    assert view["method"].item() == "msp" and view["metric"].item() == "auroc"
    stored = open_set.score.sel({"method": "msp", "metric": "auroc", "severity": NO_SEVERITY})
    used = np.ones(open_set.sizes["seed"], bool)
    used[[FAILED, EXCLUDED]] = False
    np.testing.assert_array_equal(view.values[used], stored.values[used])
    assert np.isfinite(stored.values[EXCLUDED])  # kept in the results ...
    assert np.isnan(view.values[[FAILED, EXCLUDED]]).all()  # ... masked as the stats do
    both = open_set.oodsim.sel(method=["energy", "msp"], seed=int(open_set.seed[0]))
    assert list(both["method"].values) == ["energy", "msp"]
    assert both.dims == ("method", "metric")


@pytest.mark.filterwarnings("ignore:Failed to open Zarr store with consolidated metadata")
@pytest.mark.filterwarnings("ignore:Object at oodsim-results.json")  # the manifest: no zarr
def test_results_saved_and_opened_have_the_accessor(open_set: xr.Dataset, tmp_path) -> None:
    assert xr.Dataset.oodsim is DatasetAccessor and xr.DataArray.oodsim is DataArrayAccessor
    save_results(open_set, tmp_path / "r.zarr")
    cell = {"method": "energy", "metric": "fpr95"}
    eager = open_set.oodsim.sel(**cell)
    xr.testing.assert_identical(open_results(tmp_path / "r.zarr").oodsim.sel(**cell), eager)
    lazy = xr.open_zarr(tmp_path / "r.zarr")  # plain xarray: dask arrays, loaded when read
    assert lazy["score"].chunks is not None
    xr.testing.assert_equal(lazy.oodsim.sel(**cell), eager)
    # a reopened store lists its coordinates alphabetically; the frame keeps method first
    reopened = estimate(open_results(tmp_path / "r.zarr")).oodsim.to_frame()
    pd.testing.assert_frame_equal(reopened, estimate(open_set).oodsim.to_frame())


def test_open_set_views_have_no_severity_while_the_results_keep_it(open_set: xr.Dataset) -> None:
    assert open_set.score.dims == ("seed", "method", "metric", "severity")
    assert list(open_set["severity"].values) == [NO_SEVERITY]
    assert open_set.oodsim.score.dims == ("seed", "method", "metric")
    assert open_set.oodsim.sel(metric="auroc").dims == ("seed", "method")
    named = open_set.oodsim.sel(metric="auroc", severity=NO_SEVERITY)  # still accepted
    assert "severity" not in named.coords
    xr.testing.assert_identical(named, open_set.oodsim.sel(metric="auroc"))
    raw = open_set.score.oodsim.sel(method="odin")  # a DataArray: as it is, unmasked
    assert raw.dims == ("seed", "metric") and np.isfinite(raw.values[EXCLUDED]).all()
    oods = synthetic_results(5, methods=METHODS, oods=("svhn", "noise"))
    assert oods.oodsim.sel(method="msp").dims == ("seed", "metric", "ood")


def test_severity_views_keep_their_levels(levels: xr.Dataset) -> None:
    view = levels.oodsim.sel(method="msp", metric="auroc")
    assert view.dims == ("seed", "severity", "model")
    one = levels.oodsim.sel(method="msp", metric="auroc", severity="1", model="b")
    assert one.dims == ("seed",) and one["severity"].item() == "1"
    expected = levels.score.sel({"method": "msp", "metric": "auroc", "severity": "1", "model": "b"})
    xr.testing.assert_equal(one, expected.where(levels["failure"] == ""))
    single = levels.sel(severity=["2"])  # one level of a severity run is still a level
    assert single.oodsim.score.sizes["severity"] == 1


def test_unknown_labels_and_dims_name_the_close_match(open_set: xr.Dataset) -> None:
    with pytest.raises(LabelError, match=r"method: 'mps' is not a label.*Did you mean 'msp'\?"):
        open_set.oodsim.sel(method="mps")
    with pytest.raises(LabelError, match=r"Did you mean 'auroc'\?"):
        open_set.score.oodsim.sel(metric="aurco")
    with pytest.raises(LabelError, match=r"known severity labels: 'all'"):
        open_set.oodsim.sel(severity="3")
    with pytest.raises(ValueError, match=r"no 'metrc' dimension.*Did you mean 'metric'\?"):
        open_set.oodsim.sel(metrc="auroc")
    with pytest.raises(LabelError, match=r"Did you mean 'msp'\?"):
        estimate(open_set).oodsim.sel(method="mspp")


def test_stats_outputs_have_no_severity_of_open_set_results(
    open_set: xr.Dataset, levels: xr.Dataset
) -> None:
    for output in (estimate(open_set), compare(open_set), power(open_set)):
        assert "severity" not in output.dims and "severity" not in output.coords
    assert estimate(levels).sizes["severity"] == 3
    assert compare(levels).sizes["severity"] == power(levels).sizes["severity"] == 3
    est = estimate(open_set).oodsim.sel(method="odin", metric="auroc")
    view = open_set.oodsim.sel(method="odin", metric="auroc")
    assert est["mean"].item() == pytest.approx(float(view.mean()))
    assert est["n"].item() == open_set.sizes["seed"] - 2


def _assert_frame_is(frame: pd.DataFrame, ds: xr.Dataset, keys: list[str]) -> None:
    """Every row of ``frame`` is the cell of ``ds`` its ``keys`` columns name."""
    assert list(frame.columns) == [*keys, *ds.data_vars]
    for row in frame.itertuples(index=False):
        cell = ds.sel({key: getattr(row, key) for key in keys})
        for name in ds.data_vars:
            np.testing.assert_equal(getattr(row, name), cell[name].item())


def test_estimate_to_frame_is_one_row_per_method_and_metric(open_set: xr.Dataset) -> None:
    est = estimate(open_set)
    frame = est.oodsim.to_frame()
    assert frame.shape == (len(METHODS) * len(METRICS), 2 + len(est.data_vars))
    _assert_frame_is(frame, est, ["method", "metric"])
    assert frame.attrs["interval"] == est.attrs["interval"] == "bound-aware"
    row = est.oodsim.sel(method="msp", metric="fpr95").oodsim.to_frame()  # one cell: one row
    assert row.shape == (1, 2 + len(est.data_vars))
    assert row.loc[0, "mean"] == est["mean"].sel({"method": "msp", "metric": "fpr95"}).item()


@pytest.mark.parametrize("analysis", [compare, power])
def test_pair_tables_to_frame_leave_out_the_diagonal(analysis, open_set: xr.Dataset) -> None:
    out = analysis(open_set, metric=["auroc", "fpr95"])
    frame = out.oodsim.to_frame()
    m = len(METHODS)
    index = ["method", "other", "metric", *(["delta"] if "delta" in out.dims else [])]
    cells = m * (m - 1) * 2 * out.sizes.get("delta", 1)  # power: one row per difference
    assert frame.shape == (cells, len(index) + len(out.data_vars))
    assert not (frame["method"] == frame["other"]).any()
    _assert_frame_is(frame, out, index)
    assert frame.attrs == out.attrs


def test_results_and_severity_to_frame(open_set: xr.Dataset, levels: xr.Dataset) -> None:
    frame = open_set.oodsim.to_frame()
    n_seeds = open_set.sizes["seed"]
    assert list(frame.columns) == ["seed", "method", "metric", "class_split", "score"]
    assert len(frame) == n_seeds * len(METHODS) * len(METRICS)
    excluded = int(open_set.seed[EXCLUDED])
    assert frame.loc[frame["seed"] == excluded, "score"].isna().all()
    view = open_set.oodsim.score
    np.testing.assert_array_equal(frame["score"].to_numpy(), view.values.ravel())
    by_level = estimate(levels).oodsim.to_frame()
    assert list(by_level.columns[:4]) == ["method", "metric", "severity", "model"]
    assert len(by_level) == len(METHODS) * levels.sizes["metric"] * 3 * 2
    column = levels.score.oodsim.sel(metric="auroc").rename("auroc").oodsim.to_frame()
    dims = ["seed", "method", "severity", "model"]  # then the metric it holds
    assert list(column.columns) == [*dims, "metric", "auroc"]
    assert (column["metric"] == "auroc").all()
    assert len(column) == levels.sizes["seed"] * len(METHODS) * 3 * 2
