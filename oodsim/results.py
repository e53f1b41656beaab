"""Assemble per-seed outcomes into an ``xarray.Dataset``; save and reopen it with zarr.

Layout: variable ``score`` with dims ``(seed, method, metric, severity[, ood])`` (``severity`` is
the single label ``"all"`` for open set simulations; ``ood`` only when the spec has several OOD
test sets), ``failure`` (seed,) holding the reason a seed failed ("" when it did not), and the
coordinate ``class_split`` along ``seed``. Provenance (spec JSON, key, versions, what the store
computed vs loaded, the stopping decision) lives in ``attrs`` as JSON strings.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from oodsim.protocols.open_set import SeedOutcome
from oodsim.specs import ExperimentSpec
from oodsim.store import summarize_events


def package_versions() -> dict[str, str]:
    """Versions of the packages that shape results (recorded, never part of a key)."""
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": platform.python_version()}
    for name in (
        "oodsim",
        "torch",
        "numpy",
        "scikit-learn",
        "scipy",
        "dask",
        "distributed",
        "xarray",
        "zarr",
    ):
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            continue
    return versions


def assemble(
    spec: ExperimentSpec,
    outcomes: Sequence[SeedOutcome],
    extra_attrs: Mapping[str, Any] | None = None,
) -> xr.Dataset:
    """One Dataset from the outcomes of a run (any order; sorted by seed)."""
    outcomes = sorted(outcomes, key=lambda o: o.seed)
    methods = [d.label for d in spec.detectors]
    shape = (len(methods), len(spec.metrics), len(spec.ood))
    scores = (
        np.stack([o.scores if o.scores is not None else np.full(shape, np.nan) for o in outcomes])
        if outcomes
        else np.zeros((0, *shape))
    )
    scores = scores[:, :, :, None, :]  # severity axis
    dims = ["seed", "method", "metric", "severity", "ood"]
    coords: dict[str, Any] = {
        "seed": [o.seed for o in outcomes],
        "method": methods,
        "metric": list(spec.metrics),
        "severity": ["all"],
        "class_split": ("seed", [o.class_split for o in outcomes]),
    }
    if spec.varies_ood:
        coords["ood"] = [o.label for o in spec.ood]
    else:
        scores, dims = scores[..., 0], dims[:-1]
    events = [event for o in outcomes for event in o.events]
    attrs = {
        "spec": spec.to_json(),
        "spec_key": spec.key,
        "experiment": spec.name,
        "versions": json.dumps(package_versions()),
        "store": json.dumps(summarize_events(events)),
        "n_seeds": len(outcomes),
        "n_failed": sum(o.failed for o in outcomes),
        "simulation_seconds": float(sum(o.seconds for o in outcomes)),
        **(extra_attrs or {}),
    }
    return xr.Dataset(
        {
            "score": (dims, scores),
            "failure": ("seed", np.array([o.failure for o in outcomes], dtype=str)),
        },
        coords=coords,
        attrs=attrs,
    )


def store_counts(results: xr.Dataset) -> dict[str, dict[str, int]]:
    """What the run computed vs loaded, by artifact kind (from the result's provenance)."""
    return json.loads(results.attrs["store"])


def save_results(results: xr.Dataset, path: str | Path) -> Path:
    """Write results as a zarr store, replacing an older one at ``path`` only once the new one
    is complete (written beside it, then renamed), so a crash never leaves half of either."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    # Variable-length strings have a zarr v3 data type; fixed-width numpy unicode does not.
    strings = {
        name: results[name].astype(object)
        for name in results.variables
        if results[name].dtype.kind == "U"
    }
    try:
        results.assign(strings).assign_coords(
            {n: v for n, v in strings.items() if n in results.coords}
        ).to_zarr(tmp, mode="w", consolidated=False)
        if path.exists():
            old = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}")
            os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def open_results(path: str | Path) -> xr.Dataset:
    """Reopen results written by :func:`save_results` (or ``oodsim run --out``), in memory."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no results at {path}")
    with xr.open_zarr(path, consolidated=False) as results:
        results = results.load()
    for name in list(results.variables):
        variable = results[name]
        if variable.dtype.kind in "OT":  # object or numpy StringDType: back to numpy unicode
            values = np.array(variable.values.tolist(), dtype=str)
            if name in results.coords:
                results = results.assign_coords({name: (variable.dims, values)})
            else:
                results[name] = (variable.dims, values)
    return results
