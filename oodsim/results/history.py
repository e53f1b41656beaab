"""Earlier results of a spec name, kept by key beside the latest.

The results of a spec name live at one stable path (``results/digits.zarr``: the latest). When
the spec is edited (a detector added, more seeds) and run again, its new results take that
path and the ones they replace move beside it, by their spec key:
``results/digits.history/<key[:12]>.zarr``. Each key has one place, the latest or the history:
results of a key that was kept earlier replace its kept copy. :func:`versions` lists them,
:func:`spec_changes` says how two specs differ, field by field.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from oodsim.results.manifest import MANIFEST_LIMIT, read_manifest
from oodsim.store.fs import read_json

#: the suffix of the folder that keeps the earlier results of a results path
HISTORY_SUFFIX = ".history"
#: the key digits that name a kept store
KEY_DIGITS = 12


def history_folder(path: str | Path) -> Path:
    """Where the earlier results of ``path`` are kept: ``x.zarr`` → ``x.history``."""
    path = Path(path)
    stem = path.name.removesuffix(".zarr") or path.name
    return path.with_name(stem + HISTORY_SUFFIX)


def kept_path(path: str | Path, key: str) -> Path:
    """The path that keeps results of spec ``key`` replaced at ``path``."""
    return history_folder(path) / f"{key[:KEY_DIGITS]}.zarr"


@attrs.frozen
class Saved:
    """What a results store says of itself, read from its manifest and zarr attributes
    without opening its arrays: its path, spec key, spec name and spec (plain data), when it
    was saved (ISO 8601, UTC; None for results saved before oodsim recorded it), its seeds and
    methods, and whether it is the latest of its name (at the stable path)."""

    path: Path
    key: str
    name: str | None
    spec: Mapping[str, Any] | None
    saved: str | None
    n_seeds: int | None
    methods: tuple[str, ...]
    latest: bool


def read_saved(path: str | Path, latest: bool = True) -> Saved | None:
    """:class:`Saved` of the results at ``path``, or None where there are none (a missing
    path, a folder of other things, a manifest that cannot be trusted)."""
    path = Path(path)
    manifest = read_manifest(path)
    try:
        attributes = read_json(path / "zarr.json", MANIFEST_LIMIT).get("attributes", {})
        spec = json.loads(attributes.get("spec") or "null")
    except (OSError, ValueError, AttributeError):
        return None
    key = manifest.get("spec_key") if isinstance(manifest, dict) else attributes.get("spec_key")
    if not isinstance(key, str) or not key:
        return None
    spec = spec if isinstance(spec, dict) else None
    name = spec.get("name") if spec is not None else None
    saved = manifest.get("saved") if isinstance(manifest, dict) else None
    n_seeds = attributes.get("n_seeds")
    return Saved(
        path=path,
        key=key,
        name=name if isinstance(name, str) else None,
        spec=spec,
        saved=saved if isinstance(saved, str) else None,
        n_seeds=n_seeds if isinstance(n_seeds, int) else None,
        methods=_methods(spec),
        latest=latest,
    )


def _methods(spec: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The detector labels of a spec's plain data (a name, or a table's label or name)."""
    if spec is None:
        return ()
    return tuple(_label(d) for d in spec.get("detectors") or ())


def _label(item: Any) -> str:
    if isinstance(item, Mapping):
        return str(item.get("label") or item.get("name") or json.dumps(item, sort_keys=True))
    return str(item)


def versions(path: str | Path) -> list[Saved]:
    """The results of one spec name: the latest (at ``path``) first, then the earlier ones
    kept by key beside it, newest first. Empty where ``path`` holds no results and nothing
    was kept."""
    path = Path(path)
    latest = read_saved(path)
    found = [latest] if latest is not None else []
    kept = [read_saved(p, latest=False) for p in _kept_stores(path)]
    earlier = sorted((s for s in kept if s is not None), key=lambda s: s.saved or "", reverse=True)
    return found + earlier


def _kept_stores(path: Path) -> Iterator[Path]:
    folder = history_folder(path)
    if folder.is_dir() and not folder.is_symlink():
        yield from sorted(p for p in folder.glob("*.zarr") if p.is_dir() and not p.is_symlink())


def spec_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """How spec ``after`` differs from ``before`` (both plain data: ``spec.to_dict()``), one
    phrase a changed field: ``"seeds.n 50 → 100"``, ``"detectors + knn, − odin"``,
    ``"training.augment added"``. Empty when they are equal."""
    return list(_changes(dict(before), dict(after), ""))


def _changes(before: Any, after: Any, path: str) -> Iterator[str]:
    if before == after:
        return
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        for name in sorted(set(before) | set(after)):
            where = f"{path}.{name}" if path else str(name)
            if name not in before:
                yield f"{where} added ({_shown(after[name])})"
            elif name not in after:
                yield f"{where} removed"
            else:
                yield from _changes(before[name], after[name], where)
        return
    if isinstance(before, list | tuple) and isinstance(after, list | tuple):
        old, new = [_label(i) for i in before], [_label(i) for i in after]
        added = [i for i in new if i not in old]
        removed = [i for i in old if i not in new]
        if added or removed:
            parts = [f"+ {', '.join(added)}"] if added else []
            parts += [f"− {', '.join(removed)}"] if removed else []
            yield f"{path} {'; '.join(parts)}"
            return
        if old != new and sorted(old) == sorted(new):
            yield f"{path} reordered"
            return
        if old == new and len(set(old)) == len(old):  # the same items, changed inside
            for label, a, b in zip(old, before, after, strict=True):
                yield from _changes(a, b, f"{path}[{label}]")
            return
    yield f"{path} {_shown(before)} → {_shown(after)}"


def _shown(value: Any) -> str:
    """A value as it reads in TOML-like text, cut at 40 characters."""
    text = json.dumps(value, sort_keys=True) if isinstance(value, Mapping | list) else str(value)
    if isinstance(value, str):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
