"""Variance components of every cell of a results Dataset (:func:`variance_components`): the
factors are read from its ``stream_<name>`` coordinates (a seed design), and each cell's
scores go through :func:`~oodsim.stats.crossed.crossed_components`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr

from oodsim.results import DESIGN_PREFIX
from oodsim.results.access import metrics_of, select_metric
from oodsim.results.select import score_view
from oodsim.seeds import STREAMS
from oodsim.stats.checks import check_alpha, check_count, check_dim, check_levels
from oodsim.stats.crossed import (
    RESIDUAL,
    SOURCE_KEYS,
    CrossedComponents,
    crossed_components,
    interval_text,
    source_name,
    term_subsets,
)


def _stream_order(coord: str) -> tuple[int, str]:
    name = coord.removeprefix(DESIGN_PREFIX)
    return (STREAMS.index(name) if name in STREAMS else len(STREAMS), name)


def _resolve_factors(
    score: xr.DataArray, factors: Sequence[str] | str | None, dim: str
) -> tuple[list[str], list[str], bool]:
    """(coordinate names, source names, fell back to class_split)."""
    along = [str(c) for c in score.coords if score[c].dims == (dim,) and c != dim]
    if factors is None:
        streams = sorted((c for c in along if c.startswith(DESIGN_PREFIX)), key=_stream_order)
        if streams:
            return streams, [c.removeprefix(DESIGN_PREFIX) for c in streams], False
        if "class_split" in along:
            return ["class_split"], ["class_split"], True
        raise KeyError(
            "results carry no designed streams: run a spec with a [seeds.design] table, "
            f"or pass factors= (coordinates along {dim!r}: {', '.join(along) or 'none'})"
        )
    if isinstance(factors, str):
        factors = [factors]
    coords = []
    for name in factors:
        for candidate in (f"{DESIGN_PREFIX}{name}", name):
            if candidate in along:
                coords.append(candidate)
                break
        else:
            raise KeyError(
                f"no coordinate '{DESIGN_PREFIX}{name}' or {name!r} along {dim!r}; "
                f"found: {', '.join(along) or 'none'}"
            )
    names = [c.removeprefix(DESIGN_PREFIX) for c in coords]
    if len(set(names)) != len(names):
        raise ValueError(f"factors repeat: {', '.join(names)}")
    return coords, names, False


def _canonical(sources: set[str], names: Sequence[str]) -> list[str]:
    order = [source_name(t, names) for t in term_subsets(len(names))] + [RESIDUAL]
    return [s for s in order if s in sources]


def variance_components(
    results: xr.Dataset | xr.DataArray,
    metric: str | Sequence[str] | None = "auroc",
    factors: Sequence[str] | str | None = None,
    confidence: float = 0.95,
    n_draws: int = 4000,
    rng: int | np.random.Generator | None = 0,
    dim: str = "seed",
    *,
    n_boot: int = 200,
) -> xr.Dataset:
    """:func:`crossed_components` for every cell (method, severity, ...) of the results.

    ``factors`` default: every ``stream_<name>`` coordinate along ``dim`` (the streams a
    seed design crossed, in :data:`oodsim.seeds.STREAMS` order), sources named without the
    prefix; without any, the ``class_split`` coordinate alone (the one-way model, noted in
    ``attrs["fallback"]``). Named factors resolve ``stream_<name>`` first, then ``<name>``.
    Failed seeds are NaN (:func:`oodsim.results.access.as_score`) and dropped, which makes a
    complete design unbalanced: those cells use REML. A factor coordinate with a missing
    level (NaN or None) at any seed is refused (ValueError naming the coordinate and the
    seeds), never taken as a level of its own.

    Arguments: ``confidence`` in (0, 1); ``n_draws`` and ``n_boot`` integers >= 0 (0 skips
    those intervals: NaN, and ``attrs["interval"]`` says so); ``dim`` a dim of the score
    other than ``method`` and ``metric``. Anything else raises ValueError naming the
    argument and its range, before any computation.

    Returns a Dataset over (method, source, other dims of the score but a ``severity`` of
    results without levels; ``metric`` only when ``metric`` is a list or None) with
    ``variance``, ``variance_raw``, ``variance_low``, ``variance_high``, ``share``,
    ``share_low``, ``share_high``; ``df`` (over ``source`` alone when every cell has the
    same), ``total``, ``n`` (values used) and ``estimator`` per cell. ``source`` lists the
    main effects in factor order, the interactions, then ``"residual"``; a source a cell's
    model lacks is NaN there. Every cell uses the same ``rng`` seed (an integer rng makes each
    cell reproducible on its own).
    """
    check_alpha(confidence, "confidence")
    n_draws = check_count(n_draws, "n_draws", 0, "0 skips the intervals")
    n_boot = check_count(n_boot, "n_boot", 0, "0 skips the intervals")
    score = score_view(results)
    dim = check_dim(score, dim)
    coords, names, fallback = _resolve_factors(score, factors, dim)
    seeds = score[dim].values.tolist()
    for coord in coords:
        check_levels(score[coord].values, f"coordinate {coord!r}", [f"{dim} {s}" for s in seeds])
    if isinstance(metric, str):
        score = select_metric(score, metric)
    elif "metric" in score.dims:
        score = score.sel(metric=metrics_of(score, metric))
    levels = {name: np.asarray(score[c].values) for c, name in zip(coords, names, strict=True)}
    cell_dims = [str(d) for d in score.dims if d != dim]
    shape = tuple(score.sizes[d] for d in cell_dims)
    data = np.asarray(score.transpose(*cell_dims, dim).values, dtype=float)
    fits: dict[tuple[int, ...], CrossedComponents] = {}
    for index in np.ndindex(*shape):
        cell_rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        fits[index] = crossed_components(
            data[index], levels, confidence, n_draws, cell_rng, n_boot=n_boot
        )
    sources = _canonical({s for fit in fits.values() for s in fit.sources}, names)
    arrays = {key: np.full((*shape, len(sources)), np.nan) for key in SOURCE_KEYS}
    total = np.full(shape, np.nan)
    n = np.zeros(shape, dtype=int)
    estimator = np.full(shape, "none", dtype=object)
    for index, fit in fits.items():
        positions = [sources.index(s) for s in fit.sources]
        for key in SOURCE_KEYS:
            arrays[key][(*index, positions)] = getattr(fit, key)
        total[index], n[index], estimator[index] = fit.total, fit.n, fit.method
    cell_coords = {d: score[d].values for d in cell_dims}
    out_dims = (*cell_dims, "source")
    variables: dict[str, Any] = {
        key: xr.DataArray(arrays[key], dims=out_dims) for key in SOURCE_KEYS if key != "df"
    }
    df = arrays["df"].reshape(-1, len(sources))
    same_df = bool(np.all((df == df[:1]) | (np.isnan(df) & np.isnan(df[:1]))))
    variables["df"] = (
        xr.DataArray(df[0], dims=("source",))
        if same_df and len(df)
        else xr.DataArray(arrays["df"], dims=out_dims)
    )
    variables["total"] = xr.DataArray(total, dims=cell_dims)
    variables["n"] = xr.DataArray(n, dims=cell_dims)
    variables["estimator"] = xr.DataArray(estimator.astype(str), dims=cell_dims)
    used = sorted({fit.method for fit in fits.values()} - {"none"})
    kind = used[0] if len(used) == 1 else ("mixed" if used else "none")
    order = (
        ["method", "source", *(d for d in cell_dims if d != "method")]
        if "method" in cell_dims
        else ["source", *cell_dims]
    )
    folded = len(names) > 1 and source_name(tuple(range(len(names))), names) not in sources
    model = (
        f"crossed random-effects model: {metric if isinstance(metric, str) else 'score'} = mu + "
        + " + ".join(sources)
        + "; every source a random effect, streams outside the design follow the seed and "
        "are part of the residual"
        + (
            " (which, with one seed per grid cell, includes the highest-order interaction)"
            if folded
            else ""
        )
    )
    attrs_: dict[str, Any] = {
        "factors": names,
        "factor_coords": coords,
        "confidence": confidence,
        "estimator": kind,
        "model": model,
        "interval": "; ".join(interval_text(m, n_draws, n_boot) for m in used) or "none",
        "n_levels": json.dumps(
            {name: len(np.unique(lab)) for name, lab in levels.items()}, sort_keys=False
        ),
        "dim": dim,
    }
    if isinstance(metric, str):
        attrs_["metric"] = metric
    if fallback:
        attrs_["fallback"] = (
            "results carry no stream_* coordinates: one-way model of the class_split "
            "coordinate (every other stream is in the residual)"
        )
    out = xr.Dataset(variables, coords={**cell_coords, "source": sources}, attrs=attrs_)
    return out.transpose(*order)
