"""Parameter tables of models and detectors: a sorted tuple of ``(name, value)`` pairs, checked
against the annotations of the function or class that takes them. A parameter given as a list
makes the table a grid (:func:`is_grid`, :func:`grid`), tuned on validation data by
:mod:`oodsim.artifacts.tuning`."""

from __future__ import annotations

import inspect
import itertools
import math
import numbers
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from oodsim.errors import SpecError, UnknownNameError
from oodsim.specs.converter import register_unstructure
from oodsim.specs.types import INT64_MAX, located, register_table, type_nouns

Params = tuple[tuple[str, Any], ...]


register_table(Params, nouns=("a table of parameters", "tables of parameters"))


def param_table(value: Any) -> Any:
    """Converter: a table (or pairs) → sorted ``(name, value)`` pairs, a list value → a tuple
    (a grid); anything else is left for the type check to refuse."""
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, list | tuple):
        items = list(value)
        if not all(isinstance(item, list | tuple) and len(item) == 2 for item in items):
            return value
    else:
        return value
    items = [(k, tuple(v) if isinstance(v, list) else v) for k, v in items]
    return tuple(sorted(items, key=lambda item: (not isinstance(item[0], str), str(item[0]))))


_PARAM_TYPES = {"int": int, "float": float, "bool": bool, "str": str, "None": type(None)}


def _annotated_types(func: Callable, param: str) -> tuple[type, ...] | None:
    """The scalar types a detector parameter's annotation names (``float | None`` →
    ``(float, NoneType)``), read from the signature without evaluating it (no imports);
    None when the annotation is missing or names anything else (an array, a module)."""
    try:
        parameter = inspect.signature(func).parameters.get(param)
    except (TypeError, ValueError):
        return None
    if parameter is None or parameter.annotation is inspect.Parameter.empty:
        return None
    annotation = parameter.annotation
    if isinstance(annotation, str):
        parts: Sequence[Any] = [_PARAM_TYPES.get(p.strip()) for p in annotation.split("|")]
    elif typing.get_origin(annotation) in (typing.Union, types.UnionType):
        parts = typing.get_args(annotation)
    else:
        parts = [annotation]
    if not all(p in _PARAM_TYPES.values() for p in parts):
        return None
    return tuple(parts)


def _param_mismatch(value: Any, kinds: tuple[type, ...] | None) -> str | None:
    """What a detector parameter value should be, or None when it is fine: a finite number,
    a string, true/false or none, of the types the parameter's annotation names."""
    allowed = kinds or (bool, int, float, str, type(None))
    expected = " or ".join(type_nouns(k)[0] for k in allowed if k is not type(None))
    if value is None:
        ok = type(None) in allowed
    elif isinstance(value, bool):
        ok = bool in allowed
    elif isinstance(value, numbers.Integral):
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            return "an integer that fits in 64 bits"
        ok = int in allowed or float in allowed
    elif isinstance(value, numbers.Real):
        ok = float in allowed and math.isfinite(value)
    elif isinstance(value, str):
        ok = str in allowed
    else:
        ok = False
    return None if ok else expected or "none"


def check_param_table(
    owner: str,
    func: Callable,
    allowed: Mapping[str, object],
    takes_any: bool,
    params: Params,
    *,
    limits: Mapping[str, Any] | None = None,
    grids: bool = True,
) -> None:
    """Check a parameter table against the function that takes it (a detector, an
    architecture's builder): names (unless it takes ``**kwargs``), types its annotations name,
    finite numbers, declared ``limits``; with ``grids``, a list is a flat grid of such values.
    Errors name ``<owner> parameter <name>[i]``."""

    def refuse(at: str, value: Any, expected: str) -> SpecError:
        return located(SpecError(f"{owner} parameter {at}", value, expected), at)

    for name, param in params:
        if not takes_any and name not in allowed:
            raise UnknownNameError(f"{owner} parameter", name, allowed)
        kinds = _annotated_types(func, name)
        grid = isinstance(param, tuple)
        if grid and not grids:
            raise refuse(name, list(param), "one value (not a list)")
        if grid and not param:
            raise refuse(name, param, "a value or a non-empty list (a grid)")
        for i, item in enumerate(param if grid else (param,)):
            at = f"{name}[{i}]" if grid else name
            if isinstance(item, list | tuple):
                raise refuse(at, item, "one value (a grid is a flat list)")
            expected = _param_mismatch(item, kinds)
            limit = (limits or {}).get(name)
            if expected is None and limit is not None and not limit.allows(item):
                expected = limit.expected
            if expected is not None:
                raise refuse(at, item, expected)


register_unstructure(Params, dict)


def is_grid(params: Mapping[str, Any]) -> bool:
    """Whether any parameter lists several values to choose from."""
    return any(isinstance(v, list | tuple) for v in params.values())


def grid(params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every combination of the listed values (scalars stay fixed), in a stable order."""
    names = sorted(params)
    options = [list(v) if isinstance(v, list | tuple) else [v] for v in (params[n] for n in names)]
    return [dict(zip(names, values)) for values in itertools.product(*options)]
