"""One registry for every kind of plug-in: detectors, architectures, datasets, protocols,
report views, metrics and store backends.

A :class:`Registry` holds the records of one kind by name, from four sources, looked up in this
order: built-ins (imported on first need from a ``"module:attribute"`` target, or added by the
module that defines them), registrations in this process (:meth:`Registry.register`), families
of names that share a prefix and are built on first use (``timm:``, ``pytorch_ood:``), and the
entry points of installed packages (one group per kind, listed once and loaded on first use).
Every kind answers the same two questions the same way: :func:`available` (the names) and
:func:`get` (the record, or an :class:`~oodsim.errors.UnknownNameError` with the closest name).

What a record is stays the kind's own (a ``Detector``, an ``Architecture``, a protocol class);
the registry reads nothing of it. Each kind's module keeps its public names (``register``,
``get_detector``, ``available_datasets``, ...) as thin aliases of its registry, and registers
the registry here under its kind (:func:`registry` imports that module on first need).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, Literal, TypeVar

import attrs

from oodsim.errors import UnknownNameError, check_registry_name

T = TypeVar("T")

#: kind → the module that defines its registry (imported by :func:`registry` on first need)
KINDS = {
    "architecture": "oodsim.models.registry",
    "dataset": "oodsim.data.registry",
    "detector": "oodsim.detectors._registry",
    "metric": "oodsim.metrics.facts",
    "protocol": "oodsim.protocols",
    "report": "oodsim.report.hooks",
    "store_backend": "oodsim.store.schemes",
}
#: the registries made so far, by kind
REGISTRIES: dict[str, Registry[Any]] = {}


def _import(target: str) -> Any:
    """The object a ``"module:attribute"`` target names (a module alone: the module)."""
    module, _, attribute = target.partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, attribute) if attribute else loaded


def _taken(kind: str, name: str, registered_here: bool) -> Exception:
    article = "an" if kind[0] in "aeiou" else "a"
    how = (
        "pass replace=True to register yours again"
        if registered_here
        else "a built-in or installed one: choose another name"
    )
    return ValueError(f"{article} {kind} named {name!r} is already registered: {how}")


class Registry(Generic[T]):
    """The records of one kind of plug-in by name (see the module docstring).

    ``field`` names the kind in errors (a spec's field: ``"arch"``); ``group`` is the
    entry-point group of installed plug-ins; ``builtins`` maps built-in names to the
    ``"module:attribute"`` of their record, imported on first need; ``order`` lists built-ins
    first (in their declared order) or every name sorted; ``from_entry_point(name, loaded)``
    turns what an entry point loads into a record (and checks it); ``taken(name, here)`` is
    the error of a name already in use (``here``: registered in this process);
    ``shadow_installed`` lets a registration shadow an installed plug-in of the same name.
    ``record_type`` and ``decorator`` say what an entry point names (a record, or a function
    the kind's decorator marked with ``__oodsim_<kind>__``: :meth:`record_of_entry_point`).
    Shipping to workers: ``source`` names the record's attribute holding the function whose
    source is fingerprinted to notice an edited plug-in (:meth:`sources`); :meth:`adopt`
    replaces a record only where ``identity`` differs (every time without one), and then
    calls ``on_change``."""

    def __init__(
        self,
        kind: str,
        *,
        field: str | None = None,
        group: str | None = None,
        builtins: Mapping[str, str] | None = None,
        order: Literal["sorted", "builtins_first"] = "sorted",
        from_entry_point: Callable[[str, Any], T] | None = None,
        taken: Callable[[str, bool], Exception] | None = None,
        check_name: Callable[[str], None] | None = None,
        shadow_installed: bool = True,
        source: str | None = None,
        identity: Callable[[T], Any] | None = None,
        on_change: Callable[[], None] | None = None,
        record_type: type | None = None,
        decorator: str = "",
    ) -> None:
        self.kind = kind
        self.field = field or kind
        self.group = group
        self.targets: dict[str, str] = dict(builtins or {})
        self.order = order
        self.builtins: dict[str, T] = {}  # built-ins loaded or added (builtin())
        self.user: dict[str, T] = {}  # registered in this process
        self.loaded: dict[str, T] = {}  # built on first use: prefixes, entry points
        self.prefixes: dict[str, tuple[Callable[[str], T], Callable[[], Iterable[str]], str]] = {}
        self._record_type = record_type
        self._decorator = decorator
        self._from_entry_point = from_entry_point or self.record_of_entry_point
        self._taken = taken or (lambda name, here: _taken(kind, name, here))
        self._check_name = check_name or (lambda name: check_registry_name(f"a {kind}", name))
        self._shadow_installed = shadow_installed
        self._source = source
        self._identity = identity
        self._on_change = on_change
        self._entry_points: dict[str, EntryPoint] | None = None
        REGISTRIES[kind] = self

    # ------------------------------------------------------------------ registering

    def builtin(self, name: str, record: T) -> T:
        """Add a built-in record (from the module that defines it); a name checked as any
        other, and never added twice."""
        self._check_name(name)
        if name in self.builtins:
            raise self._taken(name, False)
        self.builtins[name] = record
        return record

    def is_builtin(self, name: str) -> bool:
        return name in self.builtins or name in self.targets

    def register(self, name: str, record: T, *, replace: bool = False) -> T:
        """Register ``record`` as ``name`` in this process. A built-in's name, an installed
        plug-in's (unless the kind lets registrations shadow them), a prefix family's, or a
        name registered before (without ``replace=True``) is refused."""
        prefixed = [prefix for prefix in self.prefixes if name.startswith(prefix)]
        if prefixed:
            raise ValueError(f"{self.kind} names starting with {prefixed[0]!r} are reserved")
        self._check_name(name)
        installed = not self._shadow_installed and name in self.entry_points()
        if self.is_builtin(name) or installed or (name in self.user and not replace):
            raise self._taken(name, name in self.user)
        self.user[name] = record
        return record

    def add_prefix(
        self,
        prefix: str,
        build: Callable[[str], T],
        names: Callable[[], Iterable[str]] = tuple,
        hint: str = "",
    ) -> None:
        """Names starting with ``prefix`` are records that ``build(name)`` makes on first use;
        ``names()`` are those :meth:`available` lists; ``hint`` (``"timm:<name>"``) is offered
        in the error of an unknown name."""
        self.prefixes[prefix] = (build, names, hint)

    def shippable(self, names: Iterable[str]) -> dict[str, T]:
        """The records among ``names`` registered in this process: a worker never ran the
        script that registered them, so the engine ships them (:meth:`adopt` there)."""
        return {name: self.user[name] for name in dict.fromkeys(names) if name in self.user}

    def sources(self, records: Mapping[str, T]) -> list[tuple[str, str, str, Callable]]:
        """(kind, name, version, function) of ``records``, whose function's source the store
        fingerprints to notice a plug-in edited under the same name and version."""
        if self._source is None:
            return []
        return [
            (self.kind, name, str(getattr(record, "version", "1")), getattr(record, self._source))
            for name, record in records.items()
        ]

    def adopt(self, records: Mapping[str, T]) -> None:
        """Register records shipped from the driver in this (worker) process (never over a
        built-in); one equal to the record held (``identity``) is kept."""
        changed = False
        for name, record in records.items():
            if self.is_builtin(name):
                continue
            held = self.user.get(name)
            if (
                held is None
                or self._identity is None
                or self._identity(held) != self._identity(record)
            ):
                self.user[name] = record
                changed = True
        if changed and self._on_change is not None:
            self._on_change()

    def record_of_entry_point(self, name: str, ep: EntryPoint) -> Any:
        """What entry point ``ep`` names, as the record of ``name``: a ``record_type``, or a
        function the kind's decorator marked (``__oodsim_<kind>__``); ImportError naming the
        entry point where it fails to load, TypeError where it names something else."""
        try:
            loaded = ep.load()
        except Exception as error:  # a broken plug-in must say which one it is
            raise ImportError(
                f"{self.kind} entry point {name!r} ({ep.value}) failed to load: {error}"
            ) from error
        if self._record_type is None:
            return loaded
        record = getattr(loaded, f"__oodsim_{self.kind}__", loaded)
        if not isinstance(record, self._record_type):
            raise TypeError(
                f"{self.kind} entry point {name!r} ({ep.value}) must name a "
                f"{self._record_type.__name__} or a function decorated with "
                f"{self._decorator}, got {type(loaded).__name__}"
            )
        return record if record.name == name else attrs.evolve(record, name=name)

    # ------------------------------------------------------------------ looking up

    def entry_points(self) -> dict[str, EntryPoint]:
        """Installed plug-ins of this kind by name, listed once; a built-in's name shadows an
        installed plug-in's (with a warning)."""
        if self._entry_points is None:
            found = entry_points(group=self.group) if self.group else ()
            shadowed = sorted(ep.name for ep in found if self.is_builtin(ep.name))
            if shadowed:
                warnings.warn(
                    f"{self.kind} entry points {shadowed} are shadowed by built-in {self.kind}s",
                    stacklevel=3,
                )
            self._entry_points = {ep.name: ep for ep in found if not self.is_builtin(ep.name)}
        return self._entry_points

    def cache_clear(self) -> None:
        """List the installed plug-ins again on next use (a package installed meanwhile)."""
        self._entry_points = None

    def available(self) -> list[str]:
        """Every name: built-in, registered here, installed, and the listed names of prefix
        families."""
        prefixed = {name for _, names, _ in self.prefixes.values() for name in names()}
        others = set(self.user) | set(self.entry_points()) | prefixed
        builtins = [*self.targets, *(n for n in self.builtins if n not in self.targets)]
        if self.order == "builtins_first":
            return [*builtins, *sorted(others - set(builtins))]
        return sorted(set(builtins) | others)

    def get(self, name: str) -> T:
        """The record of ``name``; an unknown name raises with the closest known one."""
        if name in self.builtins:
            return self.builtins[name]
        if name in self.targets:
            return self.builtins.setdefault(name, _import(self.targets[name]))
        for table in (self.user, self.loaded):
            if name in table:
                return table[name]
        for prefix, (build, _, _) in self.prefixes.items():
            if name.startswith(prefix):
                self.loaded[name] = build(name)
                return self.loaded[name]
        installed = self.entry_points()
        if name in installed:
            self.loaded[name] = self._from_entry_point(name, installed[name])
            return self.loaded[name]
        hints = [hint for _, _, hint in self.prefixes.values() if hint]
        raise UnknownNameError(self.field, name, [*self.available(), *hints])

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.available()


class View(Mapping[str, Any]):
    """Every name of ``registry`` (:meth:`Registry.available`, in its order) mapped to
    ``value(record)``, read through the registry at each access: a module's public table
    (``DATASETS``, ``METRIC_INFO``) that stays true as plug-ins are registered or installed."""

    def __init__(self, registry: Registry[Any], value: Callable[[Any], Any] = lambda r: r):
        self._registry, self._value = registry, value

    def __getitem__(self, name: str) -> Any:
        if name not in self:
            raise KeyError(name)
        return self._value(self._registry.get(name))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._registry.available()

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry.available())

    def __len__(self) -> int:
        return len(self._registry.available())


def registry(kind: str) -> Registry[Any]:
    """The registry of ``kind`` (one of :data:`KINDS`)."""
    if kind not in REGISTRIES:
        if kind not in KINDS:
            raise UnknownNameError("plug-in kind", kind, KINDS)
        importlib.import_module(KINDS[kind])
    return REGISTRIES[kind]


def available(kind: str) -> list[str]:
    """The names of every plug-in of ``kind``."""
    return registry(kind).available()


def get(kind: str, name: str) -> Any:
    """The plug-in of ``kind`` registered as ``name``."""
    return registry(kind).get(name)
