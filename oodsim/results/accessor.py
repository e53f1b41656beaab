"""The ``.oodsim`` accessor of xarray objects: slicing results without xarray's ``method=`` trap,
and tidy pandas frames of results and of the statistics' outputs.

Registered (xarray's accessor convention, as rioxarray's ``.rio`` and cf_xarray's ``.cf``) when
:mod:`oodsim.results` is imported: ``oodsim.run``, ``oodsim.open_results`` and every
:mod:`oodsim.stats` function import it, so their Datasets have it; results opened with plain
``xr.open_zarr`` get it after ``import oodsim.results``.

- On results (a Dataset with a ``score`` variable), the view is the score with failed and
  excluded seeds NaN, as every statistic reads it: ``results.oodsim.sel(method="msp",
  metric="auroc")`` is that score over seed (and whatever other dims remain).
- On any other Dataset (the outputs of ``estimate``, ``compare``, ``power``, ...), and on a
  DataArray, the view is the object itself. A DataArray is taken as it is: ``results.score``
  holds the scores of excluded seeds too, ``results.oodsim`` masks them.

Every view leaves out a ``severity`` dim whose only label is ``"all"`` (a protocol without
severity levels; :func:`~oodsim.results.select.drop_no_severity`); the stored results keep it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import xarray as xr

from oodsim.results.access import as_score
from oodsim.results.select import drop_no_severity, score_view, select

#: The dim that pairs each ``method`` with another in a table of pairs (``compare`` and
#: ``power``: ``other``; ``required_simulations_table``: ``versus``).
PAIR_DIMS = ("other", "versus")

#: The column of a DataArray's values when it has no name.
VALUE_COLUMN = "value"


def _is_results(ds: xr.Dataset) -> bool:
    return "score" in ds.data_vars


def _without_diagonal(frame: pd.DataFrame) -> pd.DataFrame:
    """A table of pairs without the rows of a method against itself (NaN, n = 0)."""
    for pair in PAIR_DIMS:
        if "method" in frame.columns and pair in frame.columns:
            frame = frame[frame["method"] != frame[pair]]
    return frame.reset_index(drop=True)


def _dim_order(ds: xr.Dataset) -> list[str]:
    """The dims in the order of the first variable's (the score's layout: method before
    metric), then any other: a Dataset's own order follows its coordinates, which a store
    reopened from disk lists alphabetically."""
    first = next(iter(ds.data_vars.values()), None)
    lead = [str(d) for d in first.dims] if first is not None else []
    return lead + [str(d) for d in ds.dims if d not in lead]


def tidy_frame(view: xr.Dataset | xr.DataArray) -> pd.DataFrame:
    """``view`` as a tidy DataFrame: one row per cell, a column per dim, then per other
    coordinate (a per-seed ``class_split``, the ``metric`` a selection kept), then per
    variable (a DataArray's values under its name, else ``"value"``); a table of pairs
    (:data:`PAIR_DIMS`) without its diagonal; ``attrs`` those of ``view``. A view of one cell
    is one row."""
    ds = view.to_dataset(name=view.name or VALUE_COLUMN) if isinstance(view, xr.DataArray) else view
    dims = _dim_order(ds)
    coords = [str(c) for c in ds.coords if c not in ds.dims]
    variables = [str(v) for v in ds.data_vars]
    if dims:
        frame = ds.to_dataframe(dim_order=dims).reset_index()
    else:  # xarray has no frame of a single cell
        frame = pd.DataFrame([{name: ds[name].item() for name in (*coords, *variables)}])
    frame = _without_diagonal(frame[[*dims, *coords, *variables]])
    frame.attrs = dict(view.attrs)
    return frame


@xr.register_dataset_accessor("oodsim")
class DatasetAccessor:
    """``ds.oodsim``: on results, views of the masked score; on any other Dataset, of itself."""

    def __init__(self, ds: xr.Dataset) -> None:
        self._ds = ds

    def _whole(self) -> xr.Dataset | xr.DataArray:
        """The masked score of results, else the Dataset; severity as stored."""
        return as_score(self._ds) if _is_results(self._ds) else self._ds

    @property
    def score(self) -> xr.DataArray:
        """The score of results with failed and excluded seeds NaN, without a severity dim of
        results that have no levels: what the statistics read. KeyError on a Dataset
        without ``score``."""
        return score_view(self._ds)

    def sel(self, **labels: Any) -> xr.Dataset | xr.DataArray:
        """Cells by label, one keyword per dim (``method``, ``metric``, ``severity``, ``ood``,
        ``model``, ``seed``, ``other``, ``pairing``, ...): a label drops its dim, a list keeps
        it, as :func:`~oodsim.results.select.select` (its :class:`LabelError` names the dim,
        its labels and the close match). Results give the masked score (a DataArray named
        ``score``), any other Dataset a Dataset; neither has a severity dim of results
        without levels."""
        return drop_no_severity(select(self._whole(), **labels))

    def to_frame(self) -> pd.DataFrame:
        """A tidy DataFrame of :meth:`sel`'s view of everything (:func:`tidy_frame`): results
        give a ``score`` column with failed seeds NaN; the outputs of ``estimate``,
        ``compare``, ``power``, ... a column per variable, their ``attrs`` on the frame."""
        return tidy_frame(drop_no_severity(self._whole()))


@xr.register_dataarray_accessor("oodsim")
class DataArrayAccessor:
    """``da.oodsim``: views of a DataArray taken as it is (no seed is masked: slice
    ``results.oodsim`` for the score as the statistics read it)."""

    def __init__(self, da: xr.DataArray) -> None:
        self._da = da

    def sel(self, **labels: Any) -> xr.DataArray:
        """Cells by label, as :meth:`DatasetAccessor.sel`, without a severity dim of results
        that have no levels."""
        return drop_no_severity(select(self._da, **labels))

    def to_frame(self) -> pd.DataFrame:
        """A tidy DataFrame of the DataArray (:func:`tidy_frame`)."""
        return tidy_frame(drop_no_severity(self._da))


__all__ = ["PAIR_DIMS", "VALUE_COLUMN", "DataArrayAccessor", "DatasetAccessor", "tidy_frame"]
