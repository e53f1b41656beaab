"""The TOML locator (oodsim.specs.toml_lines): the line of every key, table, array table and
array item of a TOML text, so that spec errors name the line to edit."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oodsim.specs.toml_lines import key_lines, line_of, path_parts
from tests.conftest import ROOT

TRICKY = """\
# a comment with [brackets], = signs and "quotes"
name = "x # not a comment"   # a comment
title = 'literal [not a table]'
site."google.com".visits = 3
numbers = [
  1,   # one
  # a comment between items
  2,
  [3, 4],
]
when = 1979-05-27 07:32:00Z
after = true
text = \"\"\"
[not_a_table]
key = "not a key" \\\"\"\"
\"\"\"
lit = '''two
lines'''

[training]
lr = 0.05
augment = { rotation = 10.0, scale = [0.9, 1.1], nested = { deep = "}" } }

[training.schedule]
kind = "cosine"

[[detectors]]
name = "msp"

[[detectors]]
name = "odin"
params = { temperature = 1000.0 }

[[detectors.grid]]
t = 1

[[detectors.grid]]
t = 2

[detectors.extra]
note = "sub-table of the latest [[detectors]]"

[ "quoted table" . inner ]
x = 1
"""


def line_with(text: str, fragment: str, start: int = 1) -> int:
    """The first line (from ``start``) that holds ``fragment``."""
    lines = text.splitlines()
    return next(i for i in range(start, len(lines) + 1) if fragment in lines[i - 1])


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("name", 'name = "x'),
        ("title", "title ="),
        ("site", "site."),
        ('site."google.com".visits', "site."),
        (("site", "google.com", "visits"), "site."),
        ("numbers", "numbers = ["),
        ("numbers[0]", "1,   # one"),
        ("numbers[1]", "  2,"),
        ("numbers[2][1]", "[3, 4]"),
        ("when", "when ="),
        ("after", "after = true"),
        ("text", "text ="),
        ("lit", "lit ="),
        ("training", "[training]"),
        ("training.lr", "lr = 0.05"),
        ("training.augment.scale[1]", "augment ="),
        ("training.augment.nested.deep", "augment ="),
        ("training.schedule.kind", 'kind = "cosine"'),
        ("detectors[0].name", 'name = "msp"'),
        ("detectors[1]", "[[detectors]]"),
        ("detectors[1].params.temperature", "params = { temperature"),
        ("detectors[1].grid[1].t", "t = 2"),
        ("detectors[1].extra.note", "note ="),
        (("quoted table", "inner", "x"), "x = 1"),
    ],
)
def test_each_kind_of_toml_path_is_found_on_its_line(path: Any, fragment: str) -> None:
    expected = line_with(TRICKY, fragment)
    if path == "detectors[1]":  # the second [[detectors]] header
        expected = line_with(TRICKY, fragment, line_with(TRICKY, "[[detectors]]") + 1)
    assert line_of(TRICKY, path) == expected


def test_text_inside_strings_and_comments_is_no_key() -> None:
    lines = key_lines(TRICKY)
    assert ("not_a_table",) not in lines and ("key",) not in lines
    assert ("brackets",) not in lines
    assert line_of(TRICKY, "after") == line_with(TRICKY, "after = true")  # after """ and '''


def test_a_path_deeper_than_the_text_is_found_at_its_deepest_written_part() -> None:
    assert line_of(TRICKY, "training.epochs") == line_with(TRICKY, "[training]")
    assert line_of(TRICKY, "detectors[1].label") == line_of(TRICKY, "detectors[1]")
    assert line_of(TRICKY, "detectors[1].params.epsilon") == line_with(TRICKY, "params = {")
    assert line_of(TRICKY, "dataset.name") is None and line_of(TRICKY, "") is None


def test_field_paths_are_split_into_keys_and_indexes() -> None:
    assert path_parts("detectors[2].name") == ("detectors", 2, "name")
    assert path_parts("split.known_classes[0][2]") == ("split", "known_classes", 0, 2)
    assert path_parts("seeds") == ("seeds",) and path_parts("") == ()


def test_every_value_of_every_shipped_spec_is_found_on_a_line_that_names_it() -> None:
    """Each leaf of what tomllib reads, and each table, is located: a key or table on a line
    that writes its key (a header, a key or a dotted key), the items of an array of tables on
    their ``[[headers]]`` and other items in order, from the array's line on."""
    for path in sorted((ROOT / "specs").glob("*.toml")):
        text = path.read_text()
        lines = key_lines(text)
        for parts in _walk(tomllib.loads(text)):
            assert parts in lines, (path.name, parts)
            written = text.splitlines()[lines[parts] - 1]
            *outer, last = parts
            if isinstance(last, str):
                assert last in written, (path.name, parts, written)
                continue
            before = lines[(*outer, last - 1)] if last else lines[tuple(outer)]
            assert lines[parts] >= before, (path.name, parts)
            assert not written.startswith("[[") or written.rstrip("]").endswith(outer[-1])


def _walk(data: Any, parts: tuple = ()) -> Any:
    """Every path of TOML data: keys, tables and array items."""
    if parts:
        yield parts
    items = (
        data.items()
        if isinstance(data, dict)
        else enumerate(data)
        if isinstance(data, list)
        else ()
    )
    for key, value in items:
        yield from _walk(value, (*parts, key))


# --------------------------------------------------------------------------- a property

_KEYS = st.one_of(
    st.from_regex(r"[a-z_][a-z0-9_-]{0,6}", fullmatch=True),
    st.text(alphabet=st.sampled_from('ab .#=[]"'), min_size=1, max_size=5),  # quoted keys
)
_SCALARS = st.one_of(
    st.integers(-5, 5),
    st.booleans(),
    st.text(alphabet=st.sampled_from('ab#[]{}=",\n'), max_size=6),
)
_TABLES = st.recursive(
    st.dictionaries(_KEYS, _SCALARS, min_size=1, max_size=3),
    lambda inner: st.dictionaries(_KEYS, st.one_of(_SCALARS, inner), min_size=1, max_size=3),
    max_leaves=12,
)


def _key(key: str) -> str:
    bare = key and all(c.isalnum() or c in "_-" for c in key)
    return key if bare else '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return str(value)


def _emit(table: dict, parts: tuple, seed: int, lines: list[str], where: dict) -> None:
    """Write ``table`` at ``parts`` as TOML, noting in ``where`` the line of each path:
    scalars as keys, then each nested table (its style drawn from ``seed``) as an inline
    table, as dotted keys or under a ``[header]`` (headers last: keys after one are its)."""
    tables = [key for key, value in table.items() if isinstance(value, dict)]
    style = {key: (seed >> (2 * i)) % 3 for i, key in enumerate(tables)}
    for key, value in table.items():
        if key not in style:
            where[(*parts, key)] = len(lines) + 1
            lines.append(f"{_key(key)} = {_value(value)}")
    for key in (k for k in tables if style[k] == 2):
        where[(*parts, key)] = len(lines) + 1
        lines.append(f"{_key(key)} = {_inline(table[key])}")
        for inner, _ in _leaves(table[key], ()):
            for end in range(1, len(inner) + 1):
                where[(*parts, key, *inner[:end])] = len(lines)
    for key in (k for k in tables if style[k] == 1):
        for inner, leaf in _leaves(table[key], ()):
            for end in range(len(inner) + 1):
                where.setdefault((*parts, key, *inner[:end]), len(lines) + 1)
            lines.append(f"{'.'.join(map(_key, (key, *inner)))} = {_value(leaf)}")
    for key in (k for k in tables if style[k] == 0):
        where[(*parts, key)] = len(lines) + 1
        lines.append("[" + ".".join(map(_key, (*parts, key))) + "]")
        _emit(table[key], (*parts, key), seed // 7 + 1, lines, where)


def _leaves(table: dict, parts: tuple) -> Any:
    for key, value in table.items():
        if isinstance(value, dict):
            yield from _leaves(value, (*parts, key))
        else:
            yield (*parts, key), value


def _inline(table: dict) -> str:
    items = (
        f"{_key(k)} = {_inline(v) if isinstance(v, dict) else _value(v)}" for k, v in table.items()
    )
    return "{ " + ", ".join(items) + " }"


@settings(max_examples=25, deadline=None)
@given(_TABLES, st.integers(0, 2**20))
def test_written_tables_are_located_where_they_were_written(table: dict, seed: int) -> None:
    """TOML written with headers, dotted keys and inline tables (quoted keys with dots,
    brackets and quotes in them, strings with them too): tomllib reads the data back, and
    every path of it is found on the line it was written on."""
    lines: list[str] = []
    where: dict[tuple, int] = {}
    _emit(table, (), seed, lines, where)
    text = "\n".join(lines) + "\n"
    assert tomllib.loads(text) == table
    found = key_lines(text)
    for path, line in where.items():
        assert found.get(path) == line, (path, text)
