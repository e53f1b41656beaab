"""What the report modules read off results alike: the method names, the seeds with scores, the
metric a report shows by default, the stopping decision a run recorded."""

from __future__ import annotations

import xarray as xr

from oodsim.stats import StopDecision
from oodsim.stats._common import metrics_of, ood_metrics


def default_metric(score: xr.DataArray) -> str:
    """``auroc`` when present, else the first OOD metric (else the first metric)."""
    names = metrics_of(score, None)
    if not names:
        raise ValueError("results have no metric dimension")
    ood = ood_metrics(score)
    return "auroc" if "auroc" in names else (ood or names)[0]


def n_scored(score: xr.DataArray) -> int:
    """Seeds with at least one finite score (failed and excluded seeds are NaN)."""
    others = [d for d in score.dims if d != "seed"]
    return int(score.notnull().any(others).sum())


def method_names(da: xr.Dataset | xr.DataArray) -> list[str]:
    """The labels of the ``method`` dim, in the results' order."""
    return [str(m) for m in da["method"].values]


def stop_decision(results: xr.Dataset | xr.DataArray) -> StopDecision | None:
    """The stopping decision recorded in ``attrs["stopping"]``; None when there is none (or it
    does not parse)."""
    text = results.attrs.get("stopping")
    if not text:
        return None
    try:
        return StopDecision.from_json(text)
    except (ValueError, KeyError, TypeError):
        return None
