"""Strict spec types and the one spec converter, shared by every protocol's specs.

Types are strict, for every protocol's spec (see :func:`spec_class` and :func:`structure`): a
value of the wrong type is a :class:`SpecError` naming the field path, the value and the
expected type; nothing is coerced except an integer where a float is expected (it becomes that
float) and a list where a tuple is expected. Floats are finite, integers fit in 64 bits.

Why one module: open set, severity and ImageNet-O specs follow the same rules and build from
TOML data with the same cattrs converter, so a field error reads the same in every protocol.
Protocols say how their own tables read and write with :func:`register_table` and
:func:`register_unstructure`; this module knows no spec class.
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
import os
import re
import tomllib
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs
from cattrs.errors import AttributeValidationNote, IterableValidationNote

from oodsim.errors import SpecError, UnknownNameError
from oodsim.store.fs import NotARegularFile, TooLarge, read_limited

INT64_MAX = 2**63 - 1
#: The largest spec file read (a spec is a page of TOML; this is far beyond any).
SPEC_LIMIT = 4 << 20
#: A spec ``name`` names files (the default output ``results/<name>.zarr``): letters, digits,
#: ``.``, ``_`` and ``-``, at most 100 characters, not starting with a dot.
SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")

# --------------------------------------------------------------------------- strict types

#: How messages name a type: (singular, plural). Protocols add their tables with
#: :func:`register_table`.
_NOUNS: dict[Any, tuple[str, str]] = {
    int: ("an integer", "integers"),
    float: ("a finite number", "finite numbers"),
    bool: ("true or false", "true/false values"),
    str: ("a string", "strings"),
}
#: Tables that may be written as one string: ``"msp"`` → ``{name = "msp"}``.
_SHORTHAND: dict[type, str] = {}
#: Tables built by their own function from data (instead of field by field).
_FROM_DATA: dict[type, Callable[[Any], Any]] = {}


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
        _SHORTHAND[cls] = shorthand
    if nouns is not None:
        _NOUNS[cls] = nouns
    if from_data is not None:
        _FROM_DATA[cls] = from_data


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
def _field_types(cls: type) -> dict[str, Any]:
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
            return _conform(value, _field_types(type(instance))[field.name])
        except _Mismatch as mismatch:
            relative = field.name + mismatch.at
            raise spec_error(instance, relative, mismatch.value, mismatch.expected) from None

    return convert


def _strict_fields(cls: type, fields: list[attrs.Attribute]) -> list[attrs.Attribute]:
    """attrs field transformer: every field's value (after its own converter, which may only
    change the shape: a name to a spec, a table to sorted pairs) is checked by :func:`_conform`
    before any validator sees it."""
    return [
        field.evolve(
            converter=attrs.Converter(
                _strict_converter(field.converter), takes_self=True, takes_field=True
            )
        )
        for field in fields
    ]


def spec_class(cls: type) -> type:
    """``attrs.frozen(kw_only=True)`` with strict types: a value whose type does not match the
    field's annotation is a :class:`SpecError` (in Python, with ``attrs.evolve`` and from data)."""
    return attrs.frozen(cls, kw_only=True, field_transformer=_strict_fields)


def check_fields(obj: Any, path: str) -> None:
    """Type-check the fields of an attrs object of another module (e.g. a zoo ``ModelRef``) that
    a spec holds: the same rules as :func:`spec_class`, the message naming ``path.field``."""
    hints = _field_types(type(obj))
    for field in attrs.fields(type(obj)):
        try:
            _conform(getattr(obj, field.name), hints[field.name])
        except _Mismatch as mismatch:
            where = f"{path}.{field.name}{mismatch.at}"
            raise SpecError(where, mismatch.value, mismatch.expected) from None


def path_string(value: Any) -> Any:
    """Converter: a ``pathlib.Path`` (any ``os.PathLike``) becomes its string."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


# --------------------------------------------------------------------------- validators


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


# --------------------------------------------------------------------------- TOML / dict I/O

_converter = cattrs.Converter(forbid_extra_keys=True)


def _is_table(tp: Any) -> bool:
    return isinstance(tp, type) and attrs.has(tp)


def _has_tables(tp: Any) -> bool:
    return _is_table(tp) or any(_has_tables(a) for a in typing.get_args(tp) if a is not Ellipsis)


def _table_hook(cls: type) -> Callable[[Any, type], Any]:
    """Structure a table of ``cls``: unknown keys and every field error carry their path."""
    generated = cattrs.gen.make_dict_structure_fn(cls, _converter)

    def structure(value: Any, _: type) -> Any:
        if isinstance(value, cls):
            return value
        if cls in _FROM_DATA:
            return _FROM_DATA[cls](value)
        if isinstance(value, str) and cls in _SHORTHAND:
            value = {_SHORTHAND[cls]: value}
        if not isinstance(value, Mapping):
            raise located(SpecError("", value, type_nouns(cls)[0]), "")
        return generated(dict(value), cls)

    return structure


def _structure_items(value: Any, tp: Any) -> Any:
    """A list of tables, each structured with its index in the error path; anything but a list
    goes to the field as it is (its type check names what was expected)."""
    if not isinstance(value, list | tuple):
        return value
    args = typing.get_args(tp)
    items, errors = [], []
    for i, item in enumerate(value):
        if len(args) == 2 and args[1] is Ellipsis:
            item_type = args[0]
        else:
            item_type = args[i] if i < len(args) else Any
        try:
            items.append(_converter.structure(item, item_type))
        except Exception as error:  # collected like cattrs does, to name the index
            error.add_note(IterableValidationNote(f"Structuring {tp} @ index {i}", i, item_type))
            errors.append(error)
    if errors:
        raise cattrs.IterableValidationError(f"While structuring {tp!r}", errors, tp)
    return tuple(items)


def _structure_optional(value: Any, tp: Any) -> Any:
    """``Table | None``: a table (or its shorthand string) is structured, the rest left as is."""
    tables = [a for a in typing.get_args(tp) if _is_table(a)]
    if value is None or isinstance(value, tuple(tables)) or len(tables) != 1:
        return value
    if isinstance(value, Mapping) or (isinstance(value, str) and tables[0] in _SHORTHAND):
        return _converter.structure(value, tables[0])
    return value


def _raw(value: Any, _: Any) -> Any:
    return value


# Only tables are structured here; every other value reaches its field as written, where the
# one strict type check (_conform) refuses a wrong type instead of coercing it.
_converter.register_structure_hook_func(lambda t: not _has_tables(t), _raw)
for _scalar in (int, float, bool, str):
    _converter.register_structure_hook(_scalar, _raw)
_converter.register_structure_hook_factory(_is_table, _table_hook)
_converter.register_structure_hook_func(
    lambda t: typing.get_origin(t) is tuple and _has_tables(t), _structure_items
)
_converter.register_structure_hook_func(
    lambda t: typing.get_origin(t) in (typing.Union, types.UnionType) and _has_tables(t),
    _structure_optional,
)


def register_unstructure(tp: Any, hook: Callable[[Any], Any]) -> None:
    """Say how a spec part of type ``tp`` becomes plain data (a detector: its TOML table): a
    class by dispatch, any other type (an alias such as ``Params``) where it is exactly ``tp``."""
    if isinstance(tp, type):
        _converter.register_unstructure_hook(tp, hook)
    else:
        _converter.register_unstructure_hook_func(lambda t: t == tp, hook)


def _leaves(error: BaseException, parts: tuple = ()) -> Iterator[tuple[BaseException, tuple]]:
    """Every leaf error inside a (nested) cattrs error, with its path (field names and list
    indexes), in field order."""
    if not isinstance(error, cattrs.ClassValidationError | cattrs.IterableValidationError):
        yield error, parts
        return
    for inner in error.exceptions:
        step: tuple = ()
        for note in getattr(inner, "__notes__", ()):
            if isinstance(note, AttributeValidationNote):
                step = (note.name,)
                break
            if isinstance(note, IterableValidationNote):
                step = (note.index,)
                break
        yield from _leaves(inner, parts + step)


def _path(parts: tuple, relative: str = "") -> str:
    """``("ood", 2, "dataset")`` and ``"max_per_class"`` → ``ood[2].dataset.max_per_class``."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    if relative:
        text += relative if relative.startswith("[") or not text else f".{relative}"
    return text


def _placed(error: SpecError, parts: tuple, rename: Callable[[str], str], what: str) -> SpecError:
    """``error`` with its field path completed by where in the data it was raised."""
    relative = getattr(error, "relative", None)
    if relative is None:
        return error
    path = rename(_path(parts, relative)) or what
    message = error.args[0]
    if message.startswith(f"{error.field}: "):
        error.args = (path + message[len(error.field) :], *error.args[1:])
    error.field = path
    del error.relative  # type: ignore[attr-defined]
    return error


@contextlib.contextmanager
def spec_errors(what: str = "spec", rename: Callable[[str], str] | None = None) -> Iterator[None]:
    """Turn the errors of building a spec from data into one :class:`SpecError` that names the
    field path (``training.augment.enabled``, ``ood[1].n_samples``): the first type or value
    error, else a misspelled field (with a close match) or a missing one, else cattrs' own
    messages. ``rename`` rewrites paths (a protocol's shorthand tables)."""
    rename = rename or (lambda path: path)
    try:
        yield
    except SpecError as error:
        raise _placed(error, (), rename, what) from None
    except cattrs.BaseValidationError as error:
        leaves = list(_leaves(error))
        for leaf, parts in leaves:
            if isinstance(leaf, SpecError):
                raise _placed(leaf, parts, rename, what) from None
        for leaf, parts in leaves:
            if isinstance(leaf, cattrs.ForbiddenExtraKeysError):
                table = rename(_path(parts))
                allowed = [f.name for f in attrs.fields(leaf.cl)]
                field = f"{table} field" if table else "field"
                raise UnknownNameError(field, sorted(leaf.extra_fields)[0], allowed) from None
            if isinstance(leaf, KeyError) and parts:
                field = rename(_path(parts)) or what
                raise SpecError(field, None, "a value (the field is required)") from None
        messages = cattrs.transform_error(error, path=what)
        raise SpecError(what, "; ".join(messages), "fields of the documented types") from None
    except (TypeError, ValueError) as error:
        raise SpecError(what, str(error), "fields of the documented types") from None


def structure(
    data: Any, cls: type, what: str = "spec", rename: Callable[[str], str] | None = None
) -> Any:
    """Build a spec of class ``cls`` (any protocol's) from plain data with the one converter:
    tables by field, every other value checked strictly at its field (see :func:`_conform`);
    errors name the field path (see :func:`spec_errors`)."""
    with spec_errors(what, rename):
        return _converter.structure(data, cls)


def read_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file as plain data; a missing file or a syntax error (with line and column) is a
    :class:`SpecError`, and so is anything that is not a regular file of at most
    :data:`SPEC_LIMIT` bytes (a FIFO or a device would block or never end)."""
    path = Path(path)
    try:
        return tomllib.loads(_spec_text(path))
    except FileNotFoundError:
        raise SpecError("spec file", str(path), "an existing TOML file") from None
    except IsADirectoryError:
        raise SpecError("spec file", str(path), "a TOML file, not a folder") from None
    except UnicodeDecodeError as error:
        raise SpecError(
            "spec file", str(path), f"a UTF-8 text file (byte {error.start} is not UTF-8)"
        ) from None
    except OSError as error:
        raise SpecError(
            "spec file", str(path), f"a readable TOML file ({error.strerror or error})"
        ) from None
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"spec file {path}", "TOML syntax", f"valid TOML ({error})") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise SpecError(
            "spec file", str(path), "TOML nested a few hundred levels at most"
        ) from None


def _spec_text(path: Path) -> str:
    """The text of a spec file: a regular file (a link to one is fine) of at most
    :data:`SPEC_LIMIT` bytes, opened without blocking."""
    try:
        data = read_limited(path, SPEC_LIMIT, follow_links=True)
    except NotARegularFile as error:
        if error.found == "folder":
            raise IsADirectoryError(path) from None
        raise SpecError(
            "spec file", str(path), "a regular TOML file, not a pipe or device"
        ) from None
    except TooLarge:
        raise SpecError(
            "spec file", str(path), f"a TOML file of at most {SPEC_LIMIT >> 20} MiB"
        ) from None
    return data.decode("utf-8")


def unstructure(spec: Any) -> Any:
    """Plain data of a spec (any protocol's), the inverse of :func:`structure`."""
    return _converter.unstructure(spec)
