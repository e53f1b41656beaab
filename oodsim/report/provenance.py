"""What was run, as the opening lines of ``summary.md``: the spec, the results' path, the
datasets, and the seeds, with those the estimates leave out grouped by why
(:func:`seed_exclusions`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from oodsim.results import DEGENERATE, FAILURE_KINDS, exclusions
from oodsim.results.access import as_text
from oodsim.stats import as_score

#: What an excluded "degenerate" seed is, in the summary.


def _seed_ranges(seeds: Iterable[int]) -> str:
    """Sorted seeds as runs of consecutive numbers: ``"0-4, 7, 9-12"``."""
    runs: list[list[int]] = []
    for seed in sorted(int(s) for s in seeds):
        if runs and seed == runs[-1][-1] + 1:
            runs[-1].append(seed)
        else:
            runs.append([seed])
    parts = [f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs]
    return ", ".join(parts)


def seed_exclusions(results: xr.Dataset | xr.DataArray) -> dict[str, list[tuple[int, str]]]:
    """The seeds every estimate leaves out, grouped by why, as :func:`oodsim.results.exclusions`
    gives them (``"degenerate"`` with a detail per seed, or the failure message), plus seeds
    without any score (``"no scores"``, e.g. a bare score DataArray)."""
    has_failure = isinstance(results, xr.Dataset) and "failure" in results
    groups = exclusions(results) if has_failure else {}
    listed = {seed for group in groups.values() for seed, _ in group}
    score = as_score(results)
    empty = np.isnan(score).all(dim=[d for d in score.dims if d != "seed"]).values
    for seed in score["seed"].values[empty]:
        if int(seed) not in listed:
            groups.setdefault("no scores", []).append((int(seed), ""))
    return dict(sorted(groups.items(), key=lambda item: -len(item[1])))


def _unique(names: Iterable[object]) -> list[str]:
    return list(dict.fromkeys(str(n) for n in names if n))


def _datasets(spec: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The datasets a spec reads (every ``dataset`` name, data source of kind ``dataset`` and
    data root, models' training data included) and the labels of its OOD sets."""
    names: list[object] = []

    def walk(node: object, key: str) -> None:
        if isinstance(node, dict):
            if key == "dataset" or node.get("kind") == "dataset":
                names.append(node.get("name"))
            names.extend(v for k, v in node.items() if k.endswith("_root") and k != "root")
            for child_key, child in node.items():
                walk(child, child_key)
        elif isinstance(node, list):
            for child in node:
                walk(child, key)

    walk(spec, "")
    groups = [spec, *(d for d in spec.get("datasets") or () if isinstance(d, dict))]
    oods = [o.get("label") for g in groups for o in g.get("ood") or () if isinstance(o, dict)]
    return _unique(names), _unique(oods)


def spec_lines(results: xr.Dataset | xr.DataArray, source: str | Path | None) -> list[str]:
    """What was run: spec name, protocol and key, the results' path, the datasets."""
    attrs = results.attrs
    lines = []
    if attrs.get("spec_key") or attrs.get("experiment"):
        lines.append(
            f"- spec: `{attrs.get('experiment', '?')}` (protocol "
            f"`{attrs.get('protocol', 'open_set')}`, key `{attrs.get('spec_key', '?')}`)"
        )
    if source is not None:
        lines.append(f"- results: `{source}`")
    try:
        spec = json.loads(attrs["spec"])
    except (KeyError, TypeError, ValueError):
        return lines
    datasets, oods = _datasets(spec)
    if datasets or oods:
        ood = f"; OOD sets: {', '.join(oods)}" if oods else ""
        lines.append(f"- datasets: {', '.join(datasets) or '–'}{ood}")
    return lines


def seed_lines(results: xr.Dataset | xr.DataArray, score: xr.DataArray) -> list[str]:
    """How many seeds, which ones, which were excluded from the estimates and why (grouped by
    reason, with each degenerate seed's accuracy), and degenerate seeds a spec chose to keep."""
    seeds = score["seed"].values
    excluded = seed_exclusions(results)
    n_excluded = sum(len(group) for group in excluded.values())
    head = f"- seeds: {len(seeds)} ({_seed_ranges(seeds)}); "
    lines = [head + "none excluded"]
    if n_excluded:
        lines = [
            head + f"{len(seeds) - n_excluded} in the estimates, {n_excluded} excluded from "
            "every estimate, table and figure:"
        ]
    for reason, group in excluded.items():
        unit = "seed" if len(group) == 1 else "seeds"
        kind = next((k for k in FAILURE_KINDS if k.name == reason), None)
        why = kind.meaning if kind is not None else reason
        lines.append(f"  - {len(group)} {unit}, {why}: {_seed_ranges(s for s, _ in group)}")
        lines += [f"    - seed {seed}: {detail}" for seed, detail in group if detail]
    listed = {seed for group in excluded.values() for seed, _ in group}
    kept = [seed for seed in _degenerate_seeds(results) if seed not in listed]
    if kept:
        lines.append(f"  - kept although {DEGENERATE.meaning}: {_seed_ranges(kept)}")
    return lines


def _degenerate_seeds(results: xr.Dataset | xr.DataArray) -> list[int]:
    """Seeds with a degenerate training (of any model) by the ``degenerate`` variable, which
    names them whether the spec excluded them or kept them."""
    if not isinstance(results, xr.Dataset) or "degenerate" not in results:
        return []
    reasons = results["degenerate"]
    if reasons.dtype.kind not in "UOT":  # T: numpy's StringDType, as xr.open_zarr reads it
        return []
    flagged = (as_text(reasons) != "").any([d for d in reasons.dims if d != "seed"])
    return [int(seed) for seed in results["seed"].values[flagged.values]]
