"""The one spec converter: TOML and plain data to specs and back (cattrs), with every error
naming its field path, line and column; shared by every protocol's specs."""

from __future__ import annotations

import contextlib
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
from oodsim.specs.types import TABLE_READERS, TABLE_SHORTHANDS, located, type_nouns
from oodsim.store.fs import NotARegularFile, TooLarge, read_limited

#: The largest spec file read (a spec is a page of TOML; this is far beyond any).
SPEC_LIMIT = 4 << 20


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

    def structure(value: Any, _: type) -> Any:
        if isinstance(value, cls):
            return value
        if cls in TABLE_READERS:
            return TABLE_READERS[cls](value)
        if isinstance(value, str) and cls in TABLE_SHORTHANDS:
            value = {TABLE_SHORTHANDS[cls]: value}
        if not isinstance(value, Mapping):
            raise located(SpecError("", value, type_nouns(cls)[0]), "")
        check = getattr(cls, "check_data", None)
        if check is not None:  # what the fields alone cannot tell (a default given again)
            check(value)
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
                allowed = [
                    f.name for f in attrs.fields(leaf.cl) if f.name not in _not_data(leaf.cl)
                ]
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
    # utf-8-sig: a byte order mark, which some Windows editors write, was a syntax error
    # ("Invalid statement (at line 1, column 1)"); TOML files are UTF-8 either way
    return data.decode("utf-8-sig")


def unstructure(spec: Any) -> Any:
    """Plain data of a spec (any protocol's), the inverse of :func:`structure`."""
    return _converter.unstructure(spec)
