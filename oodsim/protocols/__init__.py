"""Protocols: plug-ins of the engine that say what a seed needs and how to score it.

The built-ins are ``open_set`` (the randomness study's simulations), ``severity`` (the C-OOD
severity benchmark) and ``imagenet_o`` (the ImageNet-O evaluation); each module defines a
:class:`~oodsim.protocols.base.Protocol` subclass named ``PROTOCOL``, loaded lazily so that a
worker imports only the protocol it runs. Protocols register like detectors, datasets and
architectures: :func:`register_protocol` in a script, or an entry point in the group
``oodsim.protocols`` of an installed package. A spec file names its protocol (:func:`load`).
A run builds the spec's protocol from it once (:func:`bind`); that object travels to the
workers whole, so they need no registry.

Reading a spec (:func:`load`) imports its reader alone (:data:`SPEC_READERS`), not the protocol
nor the engine: a spec is read and checked, and a bad one refused, before anything heavy loads.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from oodsim.errors import SpecError
from oodsim.plugins import Registry
from oodsim.specs import RunSpec
from oodsim.specs.files import read_spec
from oodsim.specs.shipped import spec_file

if TYPE_CHECKING:
    from oodsim.protocols.base import Protocol

#: built-in protocol name → module defining ``PROTOCOL``
BUILTINS = {
    "open_set": "oodsim.protocols.open_set",
    "severity": "oodsim.protocols.severity",
    "imagenet_o": "oodsim.protocols.imagenet_o",
}
#: built-in protocol name → ``module:function`` reading its spec from TOML data and the spec
#: file's folder (what its ``PROTOCOL.from_data`` does), imported alone: a spec of each is
#: read and checked without torch, dask or xarray (zoo models' names against the names
#: recorded of timm and torchvision, :mod:`oodsim.zoo.known`)
SPEC_READERS = {
    "open_set": "oodsim.specs.experiment:spec_from_dict",
    "severity": "oodsim.protocols.severity.reading:severity_spec_from_dict",
    "imagenet_o": "oodsim.protocols.imagenet_o.spec:spec_from_data",
}
#: the protocol of a spec file without a ``protocol`` key
DEFAULT_PROTOCOL = "open_set"
#: entry point group of installed protocol plug-ins (``name = "package.module:TheProtocol"``,
#: a :class:`Protocol` subclass)
ENTRY_POINT_GROUP = "oodsim.protocols"

_NAME = re.compile(r"[a-z][a-z0-9_]*")
_P = TypeVar("_P", bound="type[Protocol]")


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SpecError("protocol name", name, "a lower-case name (letters, digits, _)")


def _taken(name: str, registered_here: bool) -> SpecError:
    return SpecError(
        "protocol name",
        name,
        "a name no other protocol has",
        "pass replace=True to register yours again"
        if registered_here
        else f"{name!r} is a built-in or installed protocol",
    )


def _from_entry_point(name: str, ep: EntryPoint) -> type[Protocol]:
    try:
        loaded = ep.load()
    except Exception as error:
        raise SpecError(
            f"protocol {name!r}",
            ep.value,
            f"an importable entry point of group {ENTRY_POINT_GROUP}",
            f"loading it failed: {type(error).__name__}: {error}",
        ) from None
    check_protocol(loaded)
    return loaded


#: every protocol by name (:mod:`oodsim.plugins`): the built-ins imported on first need
REGISTRY: Registry[type[Protocol]] = Registry(
    "protocol",
    group=ENTRY_POINT_GROUP,
    builtins={name: f"{module}:PROTOCOL" for name, module in BUILTINS.items()},
    order="builtins_first",
    from_entry_point=_from_entry_point,
    taken=_taken,
    check_name=_check_name,
    shadow_installed=False,
)
_USER = REGISTRY.user  # registered in this process (a script, a test module)
_LOADED = REGISTRY.loaded  # loaded from entry points


def __getattr__(name: str) -> Any:
    if name == "Protocol":  # the contract loads with the first protocol, not with a spec
        return _contract()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _contract() -> type[Protocol]:
    # the contract imports what a seed runs on (artifacts, results): not needed to read a spec
    from oodsim.protocols.base import Protocol

    return Protocol


def register_protocol(protocol: _P, *, replace: bool = False) -> _P:
    """Register a protocol (a :class:`Protocol` subclass): ``oodsim.load`` reads spec files
    with ``protocol = "<name>"``, and ``oodsim.run`` builds it from its specs, shipping it to
    the workers. Returns its argument, so it also decorates the class.

    The protocol is checked here, not at its first seed: a lower-case ``name`` that no other
    protocol has (``replace=True`` re-registers one of yours), a ``spec_type`` that subclasses
    :class:`~oodsim.specs.RunSpec`, and its own ``plan``, ``score`` and ``layout``.
    """
    check_protocol(protocol)
    REGISTRY.cache_clear()  # a plug-in installed since the last look is refused too
    REGISTRY.register(protocol.name, protocol, replace=replace)
    return protocol


def check_protocol(protocol: Any) -> None:
    """A clear error for an object that cannot be a protocol (before any run uses it)."""
    contract = _contract()
    if not (isinstance(protocol, type) and issubclass(protocol, contract)):
        hint = (
            "register the class; a run builds it from its spec"
            if isinstance(protocol, contract)
            else None
        )
        raise SpecError(
            f"protocol {getattr(protocol, '__name__', type(protocol).__name__)}",
            protocol,
            "a subclass of oodsim.protocols.base.Protocol",
            hint,
        )
    what = f"protocol {protocol.__name__}"
    name = getattr(protocol, "name", None)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SpecError(f"{what}.name", name, "a lower-case name (letters, digits, _)")
    spec_type = getattr(protocol, "spec_type", None)
    if not (isinstance(spec_type, type) and issubclass(spec_type, RunSpec)):
        raise SpecError(f"{what}.spec_type", spec_type, "a subclass of oodsim.specs.RunSpec")
    missing = [
        m for m in ("plan", "score", "layout") if getattr(protocol, m) is getattr(contract, m)
    ]
    if missing:
        raise SpecError(what, f"no {', '.join(missing)}", "its own plan, score and layout")


def available() -> list[str]:
    """Names of every protocol: built-in, registered here and installed."""
    return REGISTRY.available()


def get_protocol(name: str) -> type[Protocol]:
    """The protocol (class) registered as ``name``."""
    return REGISTRY.get(name)


def protocol_of(spec: Any) -> type[Protocol]:
    """The protocol (class) whose spec type ``spec`` is."""
    for protocol in [*_USER.values(), *_LOADED.values()]:
        if isinstance(spec, protocol.spec_type):
            return protocol
    for name in BUILTINS:
        protocol = get_protocol(name)
        if isinstance(spec, protocol.spec_type):
            return protocol
    for name in REGISTRY.entry_points():  # loaded only when no other protocol matches
        protocol = get_protocol(name)
        if isinstance(spec, protocol.spec_type):
            return protocol
    raise TypeError(
        f"{type(spec).__name__} is not a spec of any protocol ({', '.join(available())}); "
        "build one with oodsim.load(path) or the spec classes, or register its protocol "
        "with oodsim.protocols.register_protocol"
    )


def load(path: str | os.PathLike[str]) -> Any:
    """Read a spec file (TOML) of any protocol, or a shipped spec by name (``"digits"``: the
    stems of the checkout's ``specs/*.toml``; a file of that name here comes first).

    The top-level key ``protocol = "open_set" | "severity" | "imagenet_o"`` (or the name of a
    registered or installed protocol) picks the spec type (default ``"open_set"``, so older
    experiment files keep working); relative paths in the file resolve against its folder.
    The spec's ``source`` is the file's absolute path, None for a shipped spec read by name.
    Every problem of the file is one :class:`~oodsim.errors.SpecError` naming each by its file
    and line (``specs/x.toml:12: training.lr: ...``); a missing file is a
    :class:`~oodsim.errors.SpecFileNotFound` saying where oodsim looked.
    """
    return _read(path)[1]


def bind(spec: Any) -> Protocol:
    """The protocol of ``spec`` (a spec, or a spec file or shipped name: :func:`load`), built
    from it: the one object a run holds. A file's protocol is the one it names."""
    if not isinstance(spec, str | os.PathLike):
        return protocol_of(spec)(spec)
    name, spec = _read(spec)
    return get_protocol(name)(spec)


def _read(given: str | os.PathLike[str]) -> tuple[str, Any]:
    """The name of the protocol a spec file names, and its spec."""
    path, shipped = spec_file(given)

    def build(data: dict[str, Any]) -> tuple[str, Any]:
        name = data.pop("protocol", DEFAULT_PROTOCOL)
        return name, spec_reader(name)(data, path.parent)

    name, spec = read_spec(path, build, os.fspath(path if shipped else given))
    return name, spec if shipped else attrs.evolve(spec, source=str(path.resolve()))


def spec_reader(name: Any) -> Callable[[Mapping[str, Any], Path | None], Any]:
    """How the spec of protocol ``name`` is read from TOML data (without its ``protocol``
    key) and the spec file's folder: a built-in's reader alone (:data:`SPEC_READERS`), any
    other protocol's ``from_data``."""
    if isinstance(name, str) and name in SPEC_READERS:
        module, _, function = SPEC_READERS[name].partition(":")
        return getattr(importlib.import_module(module), function)
    names = available()
    if not isinstance(name, str) or name not in names:
        close = difflib.get_close_matches(str(name), names, n=1)
        meant = f"Did you mean {close[0]!r}?" if close else ""
        raise SpecError("protocol", name, "one of " + ", ".join(map(repr, names)), meant)
    return get_protocol(name).from_data


__all__ = [
    "BUILTINS",
    "DEFAULT_PROTOCOL",
    "ENTRY_POINT_GROUP",
    "SPEC_READERS",
    "Protocol",
    "available",
    "bind",
    "check_protocol",
    "get_protocol",
    "load",
    "protocol_of",
    "register_protocol",
    "spec_reader",
]
