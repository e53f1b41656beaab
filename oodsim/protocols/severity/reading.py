"""A severity spec from TOML data (:func:`severity_spec_from_dict`): tables in their short
forms, relative roots resolved against the spec file, the old ``[seeds]`` forms refused with
the new one."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from oodsim.errors import SpecError
from oodsim.protocols.severity.spec import SeveritySpec
from oodsim.specs import (
    load_spec,
)
from oodsim.specs.converter import structure

_OLD_SEED_HINT = (
    "severity specs take a [seeds] table like open set specs (n, start, values, pinned); a seed "
    "redraws the estimation/test split, the noise and the 'trained' models. "
    "For the old behaviour write [seeds] n = 1 (seed 0)"
)


def _model_data(value: Any, base: Path | None) -> Any:
    """A model entry with ``"trained:<file>"`` and an ``experiment`` file read (relative to
    ``base``); everything else is checked when the spec is structured."""
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, Mapping):
        return value
    table = dict(value)
    name = table.get("name")
    if isinstance(name, str) and name.startswith("trained:"):  # "trained:<open set spec file>"
        table["name"], table["experiment"] = "trained", name.removeprefix("trained:")
    experiment = table.get("experiment")
    if isinstance(experiment, str):
        path = Path(experiment).expanduser()
        table["experiment"] = load_spec(path if path.is_absolute() or base is None else base / path)
    return table


def _source_data(value: Any, base: Path | None) -> Any:
    """A source table with a relative ``root`` resolved against ``base``."""
    root = value.get("root") if isinstance(value, Mapping) else None
    if not isinstance(root, str) or not root or base is None:
        return value
    path = Path(root).expanduser()
    return {**value, "root": str(path if path.is_absolute() else base / path)}


def _pool_data(value: Any, field: str, base: Path | None) -> Any:
    """A ``[[datasets]]`` table (``field`` = its path, "" at the top) with its roots resolved."""
    if not isinstance(value, Mapping):
        return value
    at = f"{field}." if field else ""
    if "id" not in value:
        raise SpecError(f"{at}id", None, "an [id] table: the ID test set")
    if not isinstance(value.get("ood"), list) or not value["ood"]:
        raise SpecError(f"{at}ood", value.get("ood"), "one or more [[ood]] tables: the OOD pool")
    ood = [_source_data(source, base) for source in value["ood"]]
    return {**value, "id": _source_data(value["id"], base), "ood": ood}


def _pools_data(data: dict[str, Any], base: Path | None) -> bool:
    """Put the benchmarks of a spec under ``datasets``: its ``[[datasets]]`` tables, or the
    top-level ``id``/``ood`` as one (then returns True: paths are written without
    ``datasets[0].``)."""
    entries = data.get("datasets")
    if entries is None:
        top = {k: data.pop(k) for k in ("id", "ood") if k in data}
        name = data.get("name", "severity")
        top["label"] = name if isinstance(name, str) else "severity"
        data["datasets"] = [_pool_data(top, "", base)]
        return True
    if "id" in data or "ood" in data:
        raise SpecError(
            "id/ood", "top-level tables", "[id] and [[ood]] inside each [[datasets]] table"
        )
    if not isinstance(entries, list) or not entries:
        raise SpecError("datasets", entries, "a non-empty list of [[datasets]] tables")
    for i, entry in enumerate(entries):
        field = f"datasets[{i}]"
        if isinstance(entry, Mapping) and "seed" in entry:
            raise SpecError(f"{field}.seed", entry["seed"], "no seed here", _OLD_SEED_HINT)
        label = entry.get("label") if isinstance(entry, Mapping) else None
        if not isinstance(label, str) or not label:
            raise SpecError(f"{field}.label", label, "a name for this dataset")
    data["datasets"] = [_pool_data(e, f"datasets[{i}]", base) for i, e in enumerate(entries)]
    return False


def severity_spec_from_dict(
    data: Mapping[str, Any], base: str | Path | None = None
) -> SeveritySpec:
    """Build a :class:`SeveritySpec` from plain data; relative paths resolve against ``base``.

    One benchmark is written as top-level ``[id]`` and ``[[ood]]``; several as ``[[datasets]]``
    tables, each with a ``label``, an ``[id]`` and ``[[ood]]`` sources. Types are checked by
    the one strict converter of :func:`oodsim.specs.converter.structure`.
    """
    base = Path(base) if base is not None else None
    if not isinstance(data, Mapping):
        raise SpecError("severity spec", data, "a table of severity spec fields")
    data = dict(data)
    if "seed" in data:
        raise SpecError("seed", data["seed"], "no top-level seed", _OLD_SEED_HINT)
    if isinstance(data.get("models"), list):
        data["models"] = [_model_data(m, base) for m in data["models"]]
    if "fit" in data:
        data["fit"] = _source_data(data["fit"], base)
    one = _pools_data(data, base)

    def rename(path: str) -> str:  # one benchmark is written at the top, without datasets[0]
        return path.removeprefix("datasets[0]").removeprefix(".") if one else path

    return structure(data, SeveritySpec, "severity spec", rename)
