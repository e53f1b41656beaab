"""The one spec converter: plain (TOML) data to specs and back (cattrs), with every problem
of the data in one error, each naming its field path; shared by every protocol's specs.
Reading spec files, and naming the line of each problem, is :mod:`oodsim.specs.files`."""

from __future__ import annotations

import contextlib
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs
import cattrs
from cattrs.errors import AttributeValidationNote, IterableValidationNote

from oodsim.errors import SpecError, UnknownNameError, raise_alone, spec_problems
from oodsim.specs.toml_lines import path_parts
from oodsim.specs.types import (
    TABLE_READERS,
    TABLE_SHORTHANDS,
    field_types,
    located,
    type_nouns,
)

_converter = cattrs.Converter(forbid_extra_keys=True)


def _is_table(tp: Any) -> bool:
    return isinstance(tp, type) and attrs.has(tp)


def _has_tables(tp: Any) -> bool:
    return _is_table(tp) or any(_has_tables(a) for a in typing.get_args(tp) if a is not Ellipsis)


def _not_data(cls: type) -> dict[str, Any]:
    """cattrs overrides omitting the fields of ``cls`` that are never data (metadata
    ``data=False``: where a spec was read from): a file cannot set them, and plain data, the
    spec JSON of results among it, never carries them."""
    omitted = cattrs.gen.override(omit=True)
    return {f.name: omitted for f in attrs.fields(cls) if f.metadata.get("data") is False}


def _table_hook(cls: type) -> Callable[[Any, type], Any]:
    """Structure a table of ``cls``: unknown keys and every field error carry their path."""
    generated = cattrs.gen.make_dict_structure_fn(cls, _converter, **_not_data(cls))
    required = {f.name for f in attrs.fields(cls) if f.default is attrs.NOTHING}

    def structure(value: Any, _: type) -> Any:
        if isinstance(value, cls):
            return value
        if cls in TABLE_READERS:
            return TABLE_READERS[cls](value)
        if isinstance(value, str) and cls in TABLE_SHORTHANDS:
            value = {TABLE_SHORTHANDS[cls]: value}
        if not isinstance(value, Mapping):
            raise located(SpecError("", value, type_nouns(cls)[0]), "")
        return _built(cls, generated, dict(value), required)

    return structure


def _built(
    cls: type, generated: Callable[[Any, type], Any], data: dict[str, Any], required: set[str]
) -> Any:
    """``cls`` built from the table ``data``, or every problem of the table found in one pass.

    cattrs collects the problems of nested tables and unknown keys, but the class checks its
    own fields one at a time and stops at the first bad one; so the table is built again
    without each bad key (its field's default instead) until no new problem shows, or a bad
    key has no default (then the fields left are checked alone: :func:`_alone`). Once a key
    is left out, a new problem counts only if it names a key still written and is no check
    across fields (``__attrs_post_init__``): against a default put in for a bad key, those
    could fail for nothing. What ``cls.check_data`` refuses (what the fields alone cannot
    tell) is a problem like any other."""
    check = getattr(cls, "check_data", None)
    problems: list[BaseException] = []
    while True:
        try:
            if check is not None:
                check(data)
            built = generated(data, cls)
        except cattrs.ClassValidationError as error:
            found = list(error.exceptions)
        except SpecError as error:  # from check_data
            found = [error]
        else:
            if not problems:
                return built
            break
        keys = [_keys_of(e) for e in found]
        written = all(k and k <= set(data) for k in keys) and not any(map(_across_fields, found))
        if problems and not written:  # it may be about a default put in for a bad key
            break
        problems += found
        bad = set().union(*keys)
        if not all(keys):  # a problem of the table as a whole: no key to leave out
            break
        if not bad <= set(data) - required:  # a bad key without default: it cannot be built
            problems += _alone(cls, {k: v for k, v in data.items() if k not in bad})
            break
        data = {key: value for key, value in data.items() if key not in bad}
    raise cattrs.ClassValidationError(f"While structuring {cls.__name__}", problems, cls)


def _alone(cls: type, data: dict[str, Any]) -> list[SpecError]:
    """The problems of the fields of a spec class in ``data`` that hold no table (those
    cattrs checked are its), each checked alone by its converter and validator, on a stand-in
    for the instance: what a table that cannot be built (a bad required field) would hide. A
    check that reads other fields (not set on the stand-in) waits for the table to build."""
    stand_in = object.__new__(cls)
    fields = attrs.fields_dict(cls)
    found = []
    for key, value in data.items():
        field = fields.get(key)
        convert = getattr(field, "converter", None)
        if not isinstance(convert, attrs.Converter) or _has_tables(field_types(cls)[key]):
            continue
        try:
            checked = convert.converter(value, stand_in, field)  # spec_class: self and field
            if field.validator is not None:
                field.validator(stand_in, field, checked)
        except SpecError as error:
            found.append(error)
        except AttributeError:  # another field read: checked once the table builds
            continue
    return found


def _note_of(error: BaseException) -> AttributeValidationNote | IterableValidationNote | None:
    """The note cattrs put on an error raised at a field (or list item) it structured."""
    for note in getattr(error, "__notes__", ()):
        if isinstance(note, AttributeValidationNote | IterableValidationNote):
            return note
    return None


def _across_fields(error: BaseException) -> bool:
    """Whether ``error`` came from the table's check across its fields (not a nested table's)."""
    return _note_of(error) is None and getattr(error, "across_fields", False)


def _keys_of(error: BaseException) -> set[str]:
    """The keys of the table that ``error``, raised building it, is about (empty: not known)."""
    if isinstance(error, cattrs.ForbiddenExtraKeysError):
        return set(error.extra_fields)
    note = _note_of(error)
    if isinstance(note, AttributeValidationNote):
        return {note.name}
    relative = getattr(error, "relative", None)
    first = path_parts(relative)[:1] if relative else ()
    return {first[0]} if first and isinstance(first[0], str) else set()


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
    if isinstance(value, Mapping) or (isinstance(value, str) and tables[0] in TABLE_SHORTHANDS):
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
_converter.register_unstructure_hook_factory(
    lambda t: _is_table(t) and bool(_not_data(t)),
    lambda cls: cattrs.gen.make_dict_unstructure_fn(cls, _converter, **_not_data(cls)),
)


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
        note = _note_of(inner)
        step: tuple = ()
        if isinstance(note, AttributeValidationNote):
            step = (note.name,)
        elif isinstance(note, IterableValidationNote):
            step = (note.index,)
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
    """``error`` with its field path completed by where in the data it was raised; its
    ``data_path`` (keys and indexes of the data, before ``rename``) says where it is written."""
    relative = getattr(error, "relative", None)
    if relative is None:
        if parts:
            error.data_path = parts  # type: ignore[attr-defined]
        return error
    error.data_path = parts + path_parts(relative)  # type: ignore[attr-defined]
    del error.relative  # type: ignore[attr-defined]
    return error.moved(field=rename(_path(parts, relative)) or what)


def _problems(
    leaf: BaseException, parts: tuple, rename: Callable[[str], str], what: str
) -> list[SpecError]:
    """The problems one leaf error of building a spec reports, each naming its field path."""
    if isinstance(leaf, SpecError):
        return [_placed(leaf, parts, rename, what)]
    if isinstance(leaf, cattrs.ForbiddenExtraKeysError):
        allowed = [f.name for f in attrs.fields(leaf.cl) if f.name not in _not_data(leaf.cl)]
        misspelled = []
        for key in sorted(leaf.extra_fields):
            error = UnknownNameError(rename(_path(parts, key)), key, allowed)
            error.data_path = (*parts, key)  # type: ignore[attr-defined]
            misspelled.append(error)
        return misspelled
    if isinstance(leaf, KeyError) and parts:
        error = SpecError(rename(_path(parts)) or what, None, "a value (the field is required)")
        error.data_path = parts[:-1]  # type: ignore[attr-defined]  (the table it is missing in)
        return [error]
    field = rename(_path(parts)) or what
    return [SpecError(field, str(leaf), "fields of the documented types")]


@contextlib.contextmanager
def spec_errors(what: str = "spec", rename: Callable[[str], str] | None = None) -> Iterator[None]:
    """Turn the errors of building a spec from data into one :class:`SpecError` that names
    every problem found (:func:`~oodsim.errors.spec_problems`), each by its field path
    (``training.augment.enabled``, ``ood[1].n_samples``): wrong types and values, misspelled
    fields (with a close match) and missing ones. ``rename`` rewrites paths (a protocol's
    shorthand tables)."""
    rename = rename or (lambda path: path)
    try:
        yield
    except SpecError as error:
        raise_alone(_placed(error, (), rename, what))
    except cattrs.BaseValidationError as error:
        found = [p for leaf, parts in _leaves(error) for p in _problems(leaf, parts, rename, what)]
        raise_alone(spec_problems(found))
    except (TypeError, ValueError) as error:
        raise_alone(SpecError(what, str(error), "fields of the documented types"))


def structure(
    data: Any, cls: type, what: str = "spec", rename: Callable[[str], str] | None = None
) -> Any:
    """Build a spec of class ``cls`` (any protocol's) from plain data with the one converter:
    tables by field, every other value checked strictly at its field (see :func:`_conform`);
    errors name the field path (see :func:`spec_errors`)."""
    with spec_errors(what, rename):
        return _converter.structure(data, cls)


def unstructure(spec: Any) -> Any:
    """Plain data of a spec (any protocol's), the inverse of :func:`structure`."""
    return _converter.unstructure(spec)
