"""Several datasets under one severity spec: models × κ × datasets.

A severity TOML may hold ``[[datasets]]`` tables, each with a ``label`` and its own ``id``,
``ood`` and ``fit`` sources (and any other field to override); everything else (models,
detectors, levels, metrics) is shared. Each dataset runs as its own :class:`SeveritySpec`
through :func:`run_severity` (so outputs are cached per (model, source) and shared between
datasets that reuse a source), and the results are stacked along a ``dataset`` dimension, which
exists only when the spec lists several datasets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import attrs
import xarray as xr

from oodsim.errors import SpecError
from oodsim.protocols.severity_run import run_severity
from oodsim.protocols.severity_spec import SeveritySpec, check_data, severity_spec_from_dict
from oodsim.results import save_results
from oodsim.specs import read_toml
from oodsim.store import summarize_events


@attrs.frozen
class SeveritySuite:
    """Named severity specs that share models and κ; ``name`` names the combined results."""

    name: str
    datasets: tuple[tuple[str, SeveritySpec], ...]

    @property
    def key(self) -> str:
        from oodsim.keys import digest

        return digest("severity_suite", "1", {label: s.key for label, s in self.datasets})


def suite_from_dict(data: Mapping[str, Any], base: str | Path | None = None) -> SeveritySuite:
    """A suite from TOML data: one spec without ``[[datasets]]``, else one per table."""
    data = dict(data)
    entries = data.pop("datasets", None)
    if entries is None:
        spec = severity_spec_from_dict(data, base)
        return SeveritySuite(spec.name, ((spec.name, spec),))
    if not isinstance(entries, list) or not entries:
        raise SpecError("datasets", entries, "a non-empty list of [[datasets]] tables")
    shared = {k: v for k, v in data.items() if k not in ("id", "ood", "fit")}
    datasets = []
    for i, entry in enumerate(entries):
        entry = dict(entry)
        label = entry.pop("label", None)
        if not isinstance(label, str) or not label:
            raise SpecError(f"datasets[{i}].label", label, "a name for this dataset")
        datasets.append((label, severity_spec_from_dict(shared | entry, base)))
    labels = [label for label, _ in datasets]
    if len(set(labels)) != len(labels):
        raise SpecError("datasets", labels, "distinct labels")
    return SeveritySuite(str(data.get("name", "severity")), tuple(datasets))


def load_severity_suite(path: str | Path, *, check_roots: bool = True) -> SeveritySuite:
    """Read a severity TOML (with or without ``[[datasets]]``); ``check_roots`` as in
    :func:`~oodsim.protocols.severity_spec.load_severity_spec`."""
    path = Path(path)
    suite = suite_from_dict(read_toml(path), base=path.parent)
    if check_roots:
        for _, spec in suite.datasets:
            check_data(spec)
    return suite


def run_severity_suite(
    suite: SeveritySuite | SeveritySpec | str | Path,
    *,
    address: str | None = None,
    n_workers: int | None = None,
    cache: str | Path | None = None,
    out: str | Path | None = None,
    progress: bool | TextIO = True,
) -> xr.Dataset:
    """Run every dataset of a suite; one dataset gives :func:`run_severity`'s result unchanged,
    several are stacked along ``dataset`` (provenance per dataset in ``attrs["datasets"]``)."""
    if isinstance(suite, SeveritySpec):
        suite = SeveritySuite(suite.name, ((suite.name, suite),))
    elif not isinstance(suite, SeveritySuite):
        suite = load_severity_suite(suite)
    options = {"address": address, "n_workers": n_workers, "cache": cache, "progress": progress}
    if len(suite.datasets) == 1:
        return run_severity(suite.datasets[0][1], out=out, **options)
    parts = {label: run_severity(spec, **options) for label, spec in suite.datasets}
    labels = list(parts)
    combined = xr.concat(
        [parts[label] for label in labels],
        dim="dataset",
        coords="different",
        compat="equals",
        join="outer",
        combine_attrs="drop",
    )
    combined = combined.assign_coords(dataset=labels)
    events = [
        (action, kind, "")
        for part in parts.values()
        for action, kinds in json.loads(part.attrs["store"]).items()
        for kind, n in kinds.items()
        for _ in range(n)
    ]
    combined.attrs = {
        "protocol": "severity",
        "experiment": suite.name,
        "suite_key": suite.key,
        "datasets": json.dumps(
            {
                label: {k: v for k, v in part.attrs.items() if k != "store"}
                for label, part in parts.items()
            },
            default=str,
        ),
        "store": json.dumps(summarize_events(events)),
        "wall_seconds": round(
            sum(float(p.attrs.get("wall_seconds", 0.0)) for p in parts.values()), 3
        ),
    }
    if out is not None:
        save_results(combined, out)
    return combined


def per_dataset(results: xr.Dataset) -> list[tuple[str, xr.Dataset]]:
    """(label, results of one dataset) pairs; one pair labelled "" without a dataset dim."""
    if "dataset" not in results.dims:
        return [("", results)]
    return [(str(label), results.sel(dataset=label)) for label in results["dataset"].values]
