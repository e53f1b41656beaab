"""Strict spec types, shared by every protocol's specs.

Types are strict (see :func:`spec_class`): a value of the wrong type is a :class:`SpecError`
naming the field path, the value and the expected type; nothing is coerced except an integer
where a float is expected (it becomes that float) and a list where a tuple is expected. Floats
are finite, integers fit in 64 bits. Open set, severity and ImageNet-O specs follow the same
rules, so a field error reads the same in every protocol; protocols say how their own tables
read (:func:`register_table`) and the one converter (:mod:`oodsim.specs.converter`) builds
them from TOML data. This module knows no spec class.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import re
import types
import typing
from collections.abc import Callable
from typing import Any

import attrs

from oodsim.errors import SpecError, UnknownNameError

INT64_MAX = 2**63 - 1


#: A spec ``name`` names files (the default output ``results/<name>.zarr``): letters, digits,
#: ``.``, ``_`` and ``-``, at most 100 characters, not starting with a dot.
SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")


#: How messages name a type: (singular, plural). Protocols add their tables with
#: :func:`register_table`.
_NOUNS: dict[Any, tuple[str, str]] = {
    int: ("an integer", "integers"),
    float: ("a finite number", "finite numbers"),
    bool: ("true or false", "true/false values"),
    str: ("a string", "strings"),
}


#: Tables that may be written as one string: ``"msp"`` → ``{name = "msp"}``.
TABLE_SHORTHANDS: dict[type, str] = {}


#: Tables built by their own function from data (instead of field by field).
TABLE_READERS: dict[type, Callable[[Any], Any]] = {}


def register_table(
    cls: Any,
    *,
    shorthand: str | None = None,
    nouns: tuple[str, str] | None = None,
    from_data: Callable[[Any], Any] | None = None,
) -> None:
    """Say how data becomes a ``cls`` table: ``shorthand`` is the field a lone string fills
    (``"timm:resnet18"`` → ``{name = "timm:resnet18"}``); ``nouns`` name it in messages (any
    type, e.g. a type alias); ``from_data`` builds it from data instead of field by field."""
    if shorthand is not None:
        TABLE_SHORTHANDS[cls] = shorthand
    if nouns is not None:
        _NOUNS[cls] = nouns
    if from_data is not None:
        TABLE_READERS[cls] = from_data


def type_nouns(tp: Any) -> tuple[str, str]:
    """How an error message names a type: ``("an integer", "integers")``."""
    if tp in _NOUNS:
        return _NOUNS[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        named = [type_nouns(a) for a in args if a is not type(None)]
        return " or ".join(s for s, _ in named), " or ".join(p for _, p in named)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            plural = type_nouns(args[0])[1]
            return f"a list of {plural}", f"lists of {plural}"
        if len(set(args)) == 1:
            plural = type_nouns(args[0])[1]
            return f"a list of {len(args)} {plural}", f"lists of {len(args)} {plural}"
        listed = ", ".join(type_nouns(a)[0] for a in args)
        return f"a list [{listed}]", f"lists [{listed}]"
    if tp is Any:
        return "anything", "anything"
    table = getattr(tp, "TAG", getattr(tp, "__name__", str(tp)))
    return f"a {table} table", f"{table} tables"


class _Mismatch(Exception):
    """A value of the wrong type at ``at`` (e.g. ``[2]``) inside the value being checked."""

    def __init__(self, at: str, value: Any, expected: str) -> None:
        super().__init__(at, value, expected)
        self.at, self.value, self.expected = at, value, expected


def _conform(value: Any, tp: Any, at: str = "") -> Any:
    """``value`` checked against the type ``tp``, without coercion.

    Returns the value with lists as tuples and integers in float places as floats; raises
    :class:`_Mismatch` for anything else: a bool is no integer, a string no number or list, a
    float must be finite, an integer must fit in 64 bits.
    """
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _conform(value, option, at)
            except _Mismatch as mismatch:
                if mismatch.at != at:  # the right container with a wrong item: say which
                    raise
        raise _Mismatch(at, value, type_nouns(tp)[0])
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            raise _Mismatch(at, value, type_nouns(tp)[0])
        if len(args) == 2 and args[1] is Ellipsis:
            args = (args[0],) * len(value)
        elif len(value) != len(args):
            raise _Mismatch(at, value, type_nouns(tp)[0])
        return tuple(_conform(v, t, f"{at}[{i}]") for i, (v, t) in enumerate(zip(value, args)))
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            if -INT64_MAX - 1 <= value <= INT64_MAX:
                return int(value)
            raise _Mismatch(at, value, "an integer that fits in 64 bits")
    elif tp is float:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:
                number = math.inf
            if math.isfinite(number):
                return number
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is type(None):
        if value is None:
            return None
    elif isinstance(tp, type):
        if isinstance(value, tp):
            return value
    else:  # a typing construct specs do not use: not checked
        return value
    raise _Mismatch(at, value, type_nouns(tp)[0])


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """The annotations of a spec class's fields, resolved (``from __future__ import
    annotations`` leaves them as text)."""
    return typing.get_type_hints(cls)


def _table_of(instance: Any) -> str:
    """Where a spec class's fields sit in a file: ``dataset``, or "" for top-level specs and
    tables that appear in several places (a severity source)."""
    cls = type(instance)
    return getattr(cls, "TABLE", getattr(cls, "TAG", ""))


def located(error: SpecError, relative: str) -> SpecError:
    """Mark ``error`` as being about ``relative`` (a field, e.g. ``scale[1]``) of the table that
    raised it: building from data puts the table's path in front (``training.augment.scale[1]``)."""
    error.relative = relative  # type: ignore[attr-defined]
    return error


def spec_error(
    instance: Any, relative: str, value: Any, expected: str, hint: str = ""
) -> SpecError:
    """A :class:`SpecError` about field ``relative`` of the spec ``instance`` (e.g. ``seeds.n``
    in Python; from data, with its full path)."""
    table = _table_of(instance)
    field = f"{table}.{relative}" if table and relative else table or relative
    return located(SpecError(field, value, expected, hint), relative)


def _strict_converter(own: Callable[[Any], Any] | None) -> Callable[[Any, Any, Any], Any]:
    def convert(value: Any, instance: Any, field: attrs.Attribute) -> Any:
        if own is not None:
            value = own(value)
        try:
            return _conform(value, field_types(type(instance))[field.name])
        except _Mismatch as mismatch:
            relative = field.name + mismatch.at
            raise spec_error(instance, relative, mismatch.value, mismatch.expected) from None

    return convert


def _strict_fields(cls: type, fields: list[attrs.Attribute]) -> list[attrs.Attribute]:
    """attrs field transformer: every field's value (after its own converter, which may only
    change the shape: a name to a spec, a table to sorted pairs) is checked by :func:`_conform`
    before any validator sees it. Inherited fields (of a base such as
    :class:`~oodsim.specs.run.RunSpec`) are checked by the base's converter already."""
    return [
        field
        if field.inherited
        else field.evolve(
            converter=attrs.Converter(
                _strict_converter(field.converter), takes_self=True, takes_field=True
            )
        )
        for field in fields
    ]


def spec_class(cls: type) -> type:
    """``attrs.frozen(kw_only=True)`` with strict types: a value whose type does not match the
    field's annotation is a :class:`SpecError` (in Python, with ``attrs.evolve`` and from data).
    A :class:`SpecError` of its checks across fields (``__attrs_post_init__``) is marked
    ``across_fields``: reading a file, the converter reports it only while every field is the
    one written (:func:`oodsim.specs.converter._built`)."""
    built = attrs.frozen(cls, kw_only=True, field_transformer=_strict_fields)
    # wrapped after attrs: a slotted class's methods (their super() cells) are attrs' to move
    check = built.__dict__.get("__attrs_post_init__")
    if check is not None:
        built.__attrs_post_init__ = _across_fields(check)
    return built


def _across_fields(check: Callable[[Any], None]) -> Callable[[Any], None]:
    @functools.wraps(check)
    def checked(self: Any) -> None:
        try:
            check(self)
        except SpecError as error:
            error.across_fields = True  # type: ignore[attr-defined]
            raise

    return checked


def check_fields(obj: Any, path: str) -> None:
    """Type-check the fields of an attrs object of another module (e.g. a zoo ``ModelRef``) that
    a spec holds: the same rules as :func:`spec_class`, the message naming ``path.field``."""
    hints = field_types(type(obj))
    for field in attrs.fields(type(obj)):
        try:
            _conform(getattr(obj, field.name), hints[field.name])
        except _Mismatch as mismatch:
            where = f"{path}.{field.name}{mismatch.at}"
            raise SpecError(where, mismatch.value, mismatch.expected) from None


def path_string(value: Any) -> Any:
    """Converter: a ``pathlib.Path`` (any ``os.PathLike``) becomes its string."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _field(instance: Any, attribute: attrs.Attribute) -> str:
    """The field's path as a user writes it in TOML, e.g. ``dataset.name`` or ``seeds.n``."""
    table = _table_of(instance)
    return f"{table}.{attribute.name}" if table else attribute.name


def positive(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not value > 0:
        raise spec_error(instance, attribute.name, value, "a number > 0")


def non_negative(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not value >= 0:
        raise spec_error(instance, attribute.name, value, "a number >= 0")


def unit_interval(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise spec_error(instance, attribute.name, value, "a number in [0, 1)")


def open_unit_interval(instance: Any, attribute: attrs.Attribute, value: float) -> None:
    """A level such as a test's alpha: 0 and 1 would never (always) reject."""
    if not 0.0 < value < 1.0:
        raise spec_error(instance, attribute.name, value, "a number in (0, 1)")


def one_of(*allowed: str) -> Callable[[Any, attrs.Attribute, Any], None]:
    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value not in allowed:
            raise located(
                UnknownNameError(_field(instance, attribute), value, allowed), attribute.name
            )

    return check


def registered(names: Callable[[], list[str]]) -> Callable[[Any, attrs.Attribute, Any], None]:
    """Validate a name against a registry that is looked up lazily (plugins load late)."""

    def check(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
        known = names()
        if value not in known:
            raise located(
                UnknownNameError(_field(instance, attribute), value, known), attribute.name
            )

    return check


def safe_name(instance: Any, attribute: attrs.Attribute, value: str) -> None:
    """A spec ``name`` is a safe file name (it names the default output folder)."""
    if not SAFE_NAME.fullmatch(value):
        raise spec_error(
            instance,
            attribute.name,
            value,
            "a file name of 1 to 100 letters, digits, '.', '_' or '-', not starting with '.'",
            "The name labels the run and names its default output results/<name>.zarr",
        )


def label_text(instance: Any, attribute: attrs.Attribute, value: str) -> None:
    """A label names a row of results and tables: one line of printable text, not blank."""
    if not (isinstance(value, str) and value.strip() and value.isprintable()):
        raise spec_error(
            instance,
            attribute.name,
            value,
            "one line of printable text, not blank",
            "The label is a coordinate of the results and a row of every table",
        )
