"""One result schema for every protocol: :class:`SeedResult` per seed, :func:`build` for all.

Layout: variable ``score`` with dims ``(seed, method, metric, severity, ...)`` where a protocol
adds ``model``, ``dataset`` or ``ood`` only when its spec varies them (``severity`` is the single
label ``"all"`` for protocols without severity levels), ``failure`` (seed,) holding the reason a
seed failed ("" when it did not), and whatever per-seed variables and coordinates the protocol's
:class:`Layout` declares (``class_split``, ``level_severity``, ...). Provenance (protocol, spec
JSON, key, versions, what the store computed vs loaded, the stopping decision) lives in
``attrs`` as JSON strings. Save and reopen with :func:`~oodsim.results.save_results` and
:func:`~oodsim.results.open_results`.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import attrs
import numpy as np
import xarray as xr

from oodsim.results.failures import failure_kind
from oodsim.specs.seeded import NO_SEVERITY  # noqa: F401  (re-exported: specs check stopping levels)
from oodsim.store import summarize_events

SCORE_DIMS = ("method", "metric", "severity")


def exclusions(results: xr.Dataset) -> dict[str, list[tuple[int, str]]]:
    """Seeds the estimates leave out, grouped by why: the name of an exclusion kind
    (``"degenerate"``: a classifier not above chance; the detail says its accuracy, see
    :mod:`oodsim.results.failures`) or the failure message itself (no detail), each group a
    list of ``(seed, detail)`` in seed order, the largest group first."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for seed, failure in zip(results["seed"].values, results["failure"].values):
        failure = str(failure)
        kind = failure_kind(failure)
        if kind is None:
            continue
        if kind.excluded:
            groups.setdefault(kind.name, []).append((int(seed), kind.detail(failure)))
        else:
            groups.setdefault(failure, []).append((int(seed), ""))
    return dict(sorted(groups.items(), key=lambda item: -len(item[1])))


def package_versions() -> dict[str, str]:
    """Versions of the packages that shape results (recorded, never part of a key)."""
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


@attrs.frozen(eq=False)
class SeedResult:
    """What one seed contributes to the result (small: arrays of scores, no model outputs).

    ``variables`` maps each per-seed variable of the :class:`Layout` to an array of its dims
    (without ``seed``); empty when the seed failed before it could be scored. A seed scored
    but excluded (``failure`` starting "degenerate: ") has both. ``coords`` holds the per-seed
    string coordinates (e.g. the class split); ``events`` the store events of scoring.
    """

    seed: int
    variables: Mapping[str, Any] = attrs.field(factory=dict)
    coords: Mapping[str, str | int] = attrs.field(factory=dict)
    failure: str = ""
    events: tuple[tuple[str, str, str], ...] = ()
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return bool(self.failure)


#: Per-seed coordinates of a ``[seeds.design]`` start with this: ``stream_class_split`` holds
#: the level of the class split stream in each seed.
DESIGN_PREFIX = "stream_"


def design_coord(stream: str) -> str:
    """The results coordinate holding a designed stream's level per seed."""
    return DESIGN_PREFIX + stream


@attrs.frozen
class Layout:
    """The shape of a protocol's result.

    ``coords``: labels of every non-seed dimension (``method``, ``metric`` and ``severity``
    always; ``model``, ``dataset``, ``ood`` where the spec varies them). ``variables``: the
    dims (without ``seed``) of each per-seed variable; ``score`` is required and starts with
    ``method, metric, severity``. ``seed_coords``: per-seed coordinates (strings; integers
    where every seed's value is one).
    ``static``: seed-independent variables as ``(dims, values)``. ``attrs``: labels the
    result carries in ``attrs`` beyond the engine's provenance (e.g. what a seed of ImageNet-O
    is, and which interval its seeds give).
    """

    coords: Mapping[str, Sequence[Any]]
    variables: Mapping[str, tuple[str, ...]]
    seed_coords: tuple[str, ...] = ()
    static: Mapping[str, tuple[tuple[str, ...], Any]] = attrs.field(factory=dict)
    attrs: Mapping[str, str] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        dims = self.variables.get("score", ())
        if tuple(dims[:3]) != SCORE_DIMS:
            raise ValueError(f"score must start with dims {SCORE_DIMS}, got {dims}")
        for name, var_dims in self.variables.items():
            missing = [d for d in var_dims if d not in self.coords]
            if missing:
                raise ValueError(f"variable {name!r}: dims {missing} have no coordinates")

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(len(self.coords[d]) for d in self.variables[name])


def _stack(layout: Layout, name: str, results: Sequence[SeedResult]) -> np.ndarray:
    """One variable over seeds; a seed without values (it failed before scoring) is NaN
    (numbers) or "" (strings). An excluded seed that was scored (a degenerate training) keeps
    its values: ``failure`` masks it in every estimate, the numbers stay inspectable."""
    shape = layout.shape(name)
    rows = [np.asarray(r.variables[name]) for r in results if r.variables]
    kind = rows[0].dtype.kind if rows else "f"
    fill: Any = "" if kind in "US" else np.nan
    dtype = str if kind in "US" else np.float64
    out = np.full((len(results), *shape), fill, dtype=object if dtype is str else dtype)
    for i, result in enumerate(results):
        if result.variables:
            value = np.asarray(result.variables[name])
            if value.shape != shape:
                raise ValueError(
                    f"seed {result.seed}: variable {name!r} has shape {value.shape}, "
                    f"expected {shape} from the layout"
                )
            out[i] = value
    return out.astype(str) if dtype is str else out


def build(
    spec: Any,
    protocol: str,
    layout: Layout,
    results: Sequence[SeedResult],
    events: Sequence[tuple[str, str, str]] = (),
    extra_attrs: Mapping[str, Any] | None = None,
) -> xr.Dataset:
    """The result Dataset of any protocol from its per-seed results (any order; sorted by seed).

    ``events`` are the store events of the run's tasks (each task counted once); the scoring
    events of every seed are added to them for ``attrs["store"]``.
    """
    results = sorted(results, key=lambda r: r.seed)
    variables: dict[str, Any] = {
        name: (("seed", *dims), _stack(layout, name, results))
        for name, dims in layout.variables.items()
    }
    variables["failure"] = ("seed", np.array([r.failure for r in results], dtype=str))
    variables.update(layout.static)
    coords: dict[str, Any] = {"seed": [r.seed for r in results]}
    coords |= {dim: list(labels) for dim, labels in layout.coords.items()}
    for name in layout.seed_coords:
        values = [r.coords.get(name, "") for r in results]
        numeric = values and all(isinstance(v, int) for v in values)
        coords[name] = ("seed", np.array(values, dtype=np.int64 if numeric else str))
    all_events = list(events) + [e for r in results for e in r.events]
    attrs_ = {
        "protocol": protocol,
        "spec": spec.to_json(),
        "spec_key": spec.key,
        "experiment": spec.name,
        "versions": json.dumps(package_versions()),
        "store": json.dumps(summarize_events(all_events)),
        "n_seeds": len(results),
        "n_failed": sum(r.failed for r in results),
        "simulation_seconds": float(sum(r.seconds for r in results)),
        **layout.attrs,
        **(extra_attrs or {}),
    }
    return xr.Dataset(variables, coords=coords, attrs=attrs_)


def store_counts(results: xr.Dataset) -> dict[str, dict[str, int]]:
    """What the run computed vs loaded, by artifact kind (from the result's provenance)."""
    return json.loads(results.attrs["store"])
