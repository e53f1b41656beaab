"""Every ``OODSIM_*`` environment variable oodsim reads, what each may hold, and their checks.

:data:`VARIABLES` is the one table of them. :func:`check_environment` checks every variable
that is set (an empty value counts as unset) and raises one
:class:`~oodsim.errors.SpecError` that names the variable, its value and its range; the
``oodsim`` command and :func:`oodsim.run` call it before anything else, so a bad value stops
a command before it creates a folder or computes anything. The code that uses a variable
reads it with :func:`read`, which applies the same check. Variables of this table only:
other ``OODSIM_*`` names (a test's own) are left alone.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from oodsim import limits
from oodsim.errors import SpecError

#: the least ``$OODSIM_SCHEDULER_TIMEOUT`` (seconds): a run asks the scheduler every 2 s
#: and gives each request a quarter of the timeout, so below 5 s a healthy scheduler that
#: takes a second to answer (a busy one) or to hand over a result is taken for a silent one
#: (1e-9 failed a healthy run as its first result was fetched)
SCHEDULER_TIMEOUT_FLOOR = 5.0
#: the most ``$OODSIM_SCHEDULER_TIMEOUT`` (seconds): one week; more is a unit slip
SCHEDULER_TIMEOUT_CEILING = 7 * 24 * 3600.0

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@attrs.frozen
class Variable:
    """One environment variable: its ``name``, what it does (``meaning``), the values it
    takes in words (``allowed``, the range the error states) and ``parse``, which turns a
    set, non-empty value into what the code uses or raises ``ValueError`` outside
    ``allowed``."""

    name: str
    meaning: str
    allowed: str
    parse: Callable[[str], Any]


def _seconds(text: str) -> float:
    seconds = float(text)
    if not (SCHEDULER_TIMEOUT_FLOOR <= seconds <= SCHEDULER_TIMEOUT_CEILING):
        raise ValueError(text)  # nan and inf too
    return seconds


def _flag(text: str) -> bool:
    lowered = text.lower()
    if lowered not in _TRUE + _FALSE:
        raise ValueError(text)
    return lowered in _TRUE


def _folder_to_be(text: str) -> Path:
    """A folder that exists or can be made: not a file, nor below one."""
    path = Path(text).expanduser()
    for place in (path, *path.parents):
        if place.exists():
            if not place.is_dir():
                raise ValueError(text)
            break
    return path


#: ``scheme://`` at the start of a location (RFC 3986's scheme characters): an object store's
#: URL, not a path (:func:`oodsim.store.schemes.scheme_of`)
URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def _cache_location(text: str) -> str | Path:
    """An object store's URL (``s3://bucket/prefix``) as it is, else :func:`_folder_to_be`."""
    return text if URL_SCHEME.match(text) else _folder_to_be(text)


def _existing_folder(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_dir():
        raise ValueError(text)
    return path


def _record_file(text: str) -> Path:
    path = Path(text).expanduser()
    if path.is_dir() or not path.parent.is_dir():
        raise ValueError(text)
    return path


#: every ``OODSIM_*`` variable oodsim reads, by name
VARIABLES: dict[str, Variable] = {
    variable.name: variable
    for variable in (
        Variable(
            "OODSIM_CACHE",
            "the store of runs and of `oodsim cache` unless --cache is given",
            "a folder path (a folder, or where one can be made: not a file, nor below one), or "
            "an object store's URL (s3://bucket/prefix)",
            _cache_location,
        ),
        Variable(
            "OODSIM_RESULTS",
            "the folder of `oodsim run`'s results (<name>.zarr) unless --out is given",
            "a folder path: a folder, or where one can be made (not a file, nor below one)",
            _folder_to_be,
        ),
        Variable(
            "OODSIM_DATA",
            "where Fashion-MNIST's IDX files are looked for (itself and its fashion-mnist/)",
            "an existing folder",
            _existing_folder,
        ),
        Variable(
            "OODSIM_WORDNET",
            "the WordNet 3.0 database folder (default /usr/share/wordnet)",
            "an existing folder",
            _existing_folder,
        ),
        Variable(
            "OODSIM_LIMITS",
            "lifts the size limits of oodsim.limits for a run",
            limits.ALLOWED,
            limits.parse_limits,
        ),
        Variable(
            "OODSIM_SCHEDULER_TIMEOUT",
            "seconds a run waits for a Dask scheduler that does not answer (default 300)",
            f"a number of seconds from {SCHEDULER_TIMEOUT_FLOOR:g} to "
            f"{SCHEDULER_TIMEOUT_CEILING:g} (one week)",
            _seconds,
        ),
        Variable(
            "OODSIM_DEBUG",
            "keeps the tracebacks and worker logs oodsim leaves out (set by --debug)",
            "one of " + ", ".join(_TRUE + _FALSE) + " (any case)",
            _flag,
        ),
        Variable(
            "OODSIM_RECORD_LANDINGS",
            "a file that a run writes the time of each seed's landing to (benchmarks)",
            "a file path in an existing folder (not a folder)",
            _record_file,
        ),
    )
}


def read(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of the variable ``name`` of :data:`VARIABLES` as its code uses it (a path,
    seconds, a flag, the limits); None when it is unset or empty (or blank). A value outside
    its range is a :class:`SpecError` that names the variable, the value and the range."""
    variable = VARIABLES[name]
    text = (os.environ if environ is None else environ).get(name, "")
    if not text.strip():
        return None
    try:
        return variable.parse(text.strip())
    except (ValueError, OSError):
        raise SpecError(name, text, variable.allowed) from None


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Check every variable of :data:`VARIABLES` that is set; the first bad one is a
    :class:`SpecError` (see :func:`read`)."""
    for name in VARIABLES:
        read(name, environ)
