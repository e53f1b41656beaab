"""Errors a user sees, and the close-match helper that makes them actionable."""

from __future__ import annotations

import contextlib
import difflib
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NoReturn

#: Set (by ``oodsim --debug``) to keep the tracebacks that oodsim otherwise leaves out, e.g.
#: the local workers' own log of a failed task.
DEBUG_ENV = "OODSIM_DEBUG"


#: oodsim's own code: a warning raised from here is oodsim's to word (:func:`one_line_warnings`)
PACKAGE = Path(__file__).resolve().parent


#: The longest name a detector, architecture or dataset may be registered under.
MAX_NAME_LENGTH = 64


def check_registry_name(what: str, name: object) -> None:
    """A registered name is a Python identifier (ASCII letters, digits and underscores, not
    starting with a digit) of at most :data:`MAX_NAME_LENGTH` characters: it is written in
    specs, keys, file names and table rows. ``ValueError`` otherwise (at registration)."""
    if not (
        isinstance(name, str)
        and name.isascii()
        and name.isidentifier()
        and len(name) <= MAX_NAME_LENGTH
    ):
        raise ValueError(
            f"{what} name {name!r} cannot be registered: use a Python identifier (letters, "
            f"digits and underscores, not starting with a digit) of at most {MAX_NAME_LENGTH} "
            "characters"
        )


def tell_interrupt(error: BaseException, line: str) -> None:
    """Attach ``line`` (what an interrupt left, and how to go on) to ``error`` as a note,
    unless a note of the code it interrupted already says so: the innermost teller knows
    most. ``oodsim``'s command prints the notes of an interrupt; a traceback shows them."""
    if not getattr(error, "__notes__", None):
        error.add_note(line)


@contextlib.contextmanager
def telling_interrupt(line: str) -> Iterator[None]:
    """The block's Ctrl-C (or SIGTERM, which ``oodsim`` raises the same way) goes on with
    ``line`` as its note (:func:`tell_interrupt`)."""
    try:
        yield
    except KeyboardInterrupt as error:
        tell_interrupt(error, line)
        raise


class OodsimError(Exception):
    """Base class of every error oodsim raises on purpose."""


class SpecError(OodsimError, ValueError):
    """A spec field holds a value that cannot work; raised before any compute.

    Read from a spec file, ``location`` says where (``specs/x.toml:12``, or the file alone
    where the field is not written in it) and leads the message; a spec built in Python has
    none. ``problems`` are every problem the error reports (:class:`SpecProblems` holds
    several)."""

    def __init__(self, field: str, value: object, allowed: str, hint: str = "") -> None:
        self.field, self.value, self.allowed, self.hint = field, value, allowed, hint
        self.location = ""
        super().__init__(self._message())

    def _message(self) -> str:
        message = f"{self.field}: {self.value!r} is not allowed; expected {self.allowed}"
        if self.hint:
            message += f". {self.hint}"
        return f"{self.location}: {message}" if self.location else message

    @property
    def problems(self) -> tuple[SpecError, ...]:
        return (self,)

    def moved(self, *, field: str | None = None, location: str | None = None) -> SpecError:
        """This error about ``field`` (its full path, where it was raised with a part of it)
        or at ``location``; its message says so. Returns the error itself."""
        if field is not None:
            self.field = field
        if location is not None:
            self.location = location
        self.args = (self._message(), *self.args[1:])
        return self

    def __reduce__(self) -> tuple:  # raised in Dask workers: must survive pickling
        return (_rebuild, (type(self), self.args, self.__dict__))


class SpecProblems(SpecError):
    """Several problems of one spec, all found in one pass: ``problems`` (each a
    :class:`SpecError`), in the order of their lines where the spec was read from a file.
    Its ``field``, ``value``, ``allowed``, ``hint`` and ``location`` are those of the first
    problem."""

    def __init__(self, problems: Iterable[SpecError], where: str = "the spec") -> None:
        self._problems = tuple(p for problem in problems for p in problem.problems)
        self.where = where
        first = self._problems[0]
        super().__init__(first.field, first.value, first.allowed, first.hint)
        self.location = first.location

    def _message(self) -> str:
        lines = [f"  {problem}" for problem in self._problems]
        return "\n".join([f"{len(lines)} problems in {self.where}:", *lines])

    @property
    def problems(self) -> tuple[SpecError, ...]:
        return self._problems


def spec_problems(problems: Iterable[SpecError], where: str = "the spec") -> SpecError:
    """One error for ``problems`` (at least one): the problem itself when it is alone, else
    :class:`SpecProblems` (``where``: the spec file they were found in)."""
    found = [p for problem in problems for p in problem.problems]
    return found[0] if len(found) == 1 else SpecProblems(found, where)


def raise_alone(error: BaseException) -> NoReturn:
    """Raise ``error`` without the exception being handled as its context: a spec error
    raised on a worker is pickled back to the driver, and distributed's pickling of
    exceptions (tblib) carries the context along, which the converter's own errors (cattrs)
    cannot survive. ``raise error from None`` only hides the context; this drops it."""
    try:
        raise error
    except BaseException:
        error.__context__ = None
        raise


class SpecFileNotFound(SpecError, FileNotFoundError):
    """No spec file at the path given (nor, for a bare name, a shipped spec of that name): the
    message says where oodsim looked (``looked_in``), e.g. ``no such file: x.toml (looked in
    /home/me/project)``."""

    def __init__(self, given: str, looked_in: str, hint: str = "") -> None:
        self.looked_in = looked_in
        super().__init__("spec file", given, "an existing TOML file", hint)

    def _message(self) -> str:
        message = f"no such file: {self.value} (looked in {self.looked_in})"
        return f"{message}. {self.hint}" if self.hint else message


def _rebuild(cls: type, args: tuple, state: dict) -> Exception:
    error = Exception.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class DataNotFoundError(OodsimError, FileNotFoundError):
    """A dataset's files are not where oodsim looked."""


class UnknownNameError(SpecError, KeyError):
    """A name (dataset, model, detector, metric) that no registry knows."""

    def __init__(self, field: str, value: str, known: Iterable[str]) -> None:
        known = sorted(known)
        close = difflib.get_close_matches(str(value), known, n=1)
        hint = f"Did you mean {close[0]!r}?" if close else ""
        # an empty registry (an architecture that takes no parameters) has nothing to offer
        allowed = "one of " + ", ".join(map(repr, known)) if known else f"no {field} (it has none)"
        super().__init__(field, value, allowed, hint)

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return self.args[0]


class ClusterError(OodsimError):
    """The Dask scheduler could not be reached or the cluster could not start."""


class StoreError(OodsimError):
    """The cache directory cannot be used (not writable, full, corrupt beyond repair, or not
    an oodsim cache at all)."""


_PYTHON_FORMAT = warnings.formatwarning


def format_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    line: str | None = None,
) -> str:
    """A warning raised in oodsim's own code as one line, ``oodsim: warning: ...``, where
    Python's format prints the file, line and source line (``warnings.warn(``) after the
    message: two lines a user of the command cannot act on. Warnings from elsewhere (a
    script, torch) keep Python's format. ``warnings.formatwarning`` in the ``oodsim`` command
    (:func:`one_line_warnings`) and in its local workers."""
    if Path(filename).resolve().is_relative_to(PACKAGE):
        return f"oodsim: warning: {message}\n"
    return _PYTHON_FORMAT(message, category, filename, lineno, line)


@contextlib.contextmanager
def one_line_warnings() -> Iterator[None]:
    """:func:`format_warning` formats the warnings shown in the block."""
    before = warnings.formatwarning
    warnings.formatwarning = format_warning
    try:
        yield
    finally:
        warnings.formatwarning = before
