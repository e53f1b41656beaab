"""Select cells of results by label (:func:`select`), and the views of results that leave out
what says nothing (:func:`drop_no_severity`, :func:`score_view`).

xarray's ``results.sel(method="msp")`` does not select the method: ``method=`` is the keyword
of ``sel`` that names a fill method (``"nearest"``, ...), so alone it silently returns every
method, and next to a label it fails with "Invalid fill method". :func:`select` takes the
results' dimensions as keywords, passes them to ``sel`` as a dict, and names the dimension and
its labels when a label is not there.

Every protocol's results keep one schema (seed × method × metric × severity), so a protocol
without severity levels stores ``severity = ["all"]``. The views (the ``.oodsim`` accessor,
:mod:`oodsim.results.accessor`) and the outputs of :mod:`oodsim.stats` leave that dim out:
an open set user never names it.
"""

from __future__ import annotations

import difflib
from collections.abc import Hashable
from typing import Any, TypeVar

import numpy as np
import xarray as xr

from oodsim.errors import OodsimError
from oodsim.results.access import as_score
from oodsim.results.schema import NO_SEVERITY

Results = TypeVar("Results", xr.Dataset, xr.DataArray)


def _close(value: Any, known: list[Any]) -> str:
    """`` Did you mean 'x'?`` for a near match among ``known``, else ""."""
    match = difflib.get_close_matches(str(value), [str(k) for k in known], n=1)
    return f" Did you mean {match[0]!r}?" if match else ""


class LabelError(OodsimError, KeyError):
    """A label that a dimension of the results does not have."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


def _check_labels(results: xr.Dataset | xr.DataArray, dim: Hashable, wanted: Any) -> None:
    if isinstance(wanted, slice):
        return  # a range of labels: xarray's own rules
    index = results.indexes.get(dim)
    if index is None:
        raise ValueError(f"dimension {dim!r} has no labels to select by; use .isel({dim}=...)")
    for label in np.atleast_1d(np.asarray(wanted, dtype=object)).tolist():
        if label not in index:
            known = index.tolist()
            raise LabelError(
                f"{dim}: {label!r} is not a label of the results; known {dim} labels: "
                f"{', '.join(map(repr, known))}.{_close(label, known)}"
            )


def select(
    results: Results,
    *,
    method: Any = None,
    metric: Any = None,
    severity: Any = None,
    ood: Any = None,
    model: Any = None,
    seed: Any = None,
    **labels: Any,
) -> Results:
    """``results.sel({...})`` of the labels given: a label or a list of labels per dimension.

    A label drops its dimension and a list keeps it, as in ``sel``; None (the default) leaves
    a dimension whole. Other dimensions (``dataset``, ``pairing``, ...) are keywords too. An
    unknown label is a :class:`LabelError` (a ``KeyError``) naming the dimension and its
    labels; a dimension the results lack is a ``ValueError`` naming the dimensions they have.
    """
    given = {"method": method, "metric": metric, "severity": severity, "ood": ood}
    given |= {"model": model, "seed": seed, **labels}
    # a tuple of labels is a list to sel (xarray reads a tuple as one label of a MultiIndex)
    chosen = {
        dim: list(value) if isinstance(value, tuple) else value
        for dim, value in given.items()
        if value is not None
    }
    for dim, wanted in chosen.items():
        if dim not in results.dims:
            dims = list(results.dims)
            raise ValueError(
                f"the results have no {dim!r} dimension; they have "
                f"{', '.join(map(repr, dims))}.{_close(dim, dims)}"
            )
        _check_labels(results, dim, wanted)
    return results.sel(chosen)


def drop_no_severity(values: Results) -> Results:
    """``values`` without a ``severity`` that says nothing: a dim whose only label is
    :data:`~oodsim.results.schema.NO_SEVERITY` (``"all"``: results of a protocol without
    severity levels), or that label left as a scalar coordinate by a selection. Anything else
    is returned as it is: the levels of a severity run stay, one level too."""
    if "severity" not in values.coords or values["severity"].ndim > 1:
        return values
    if [str(label) for label in np.atleast_1d(values["severity"].values)] != [NO_SEVERITY]:
        return values
    if "severity" in values.dims:
        return values.squeeze("severity", drop=True)
    return values.drop_vars("severity")


def score_view(results: xr.Dataset | xr.DataArray) -> xr.DataArray:
    """The ``score`` as the statistics and the ``.oodsim`` accessor read it: failed and excluded
    seeds NaN (:func:`~oodsim.results.access.as_score`; a DataArray is taken as it is) and no
    severity dim where the results have no levels (:func:`drop_no_severity`)."""
    return drop_no_severity(as_score(results))
