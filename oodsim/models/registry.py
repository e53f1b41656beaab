"""The architecture registry: names → builders of classifiers with oodsim's contract.

A builder is a function that returns a ``torch.nn.Module`` with ``embed(x)`` (penultimate
features), ``head`` (features → logits) and ``forward(x) == head(embed(x))``; the simplest way
is to return :class:`~oodsim.models.architectures.Classifier` (an encoder, dropout, a linear
layer). It is called with the keyword arguments it names among :data:`STANDARD_ARGS` (what the
data and the spec's ``[model]`` table fix) plus the spec's ``[model.params]``.

Built-ins are registered by :mod:`oodsim.models.architectures`; scripts use
:func:`register_architecture` (the engine ships their builders to the workers); packages use
the entry-point group ``oodsim.models``; ``timm:<name>`` is any timm architecture, trained from
scratch (a prefix family, see :func:`register_prefix`). An architecture's ``version``
enters the checkpoint key: bump it when the builder changes, and every checkpoint (and what
depends on it) is computed again, nothing else.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import attrs

from oodsim.errors import OodsimError, UnknownNameError, check_registry_name

ENTRY_POINT_GROUP = "oodsim.models"
TIMM_PREFIX = "timm:"
#: What a builder may name to receive from the data and the spec's ``[model]`` table.
STANDARD_ARGS = ("in_channels", "n_classes", "image_size", "dropout", "width")


class ArchitectureError(OodsimError, ValueError):
    """A builder that cannot be used, or a model that breaks the classifier contract."""


@attrs.frozen(kw_only=True)
class Architecture:
    """A registered architecture: its builder, version and one-line description."""

    name: str
    build: Callable[..., Any] = attrs.field(validator=attrs.validators.is_callable())
    version: str = attrs.field(default="1", converter=str)
    doc: str = ""

    def __attrs_post_init__(self) -> None:
        if not self.doc:
            text = inspect.cleandoc(self.build.__doc__ or "").split("\n\n")[0]
            object.__setattr__(self, "doc", text.replace("\n", " "))
        if "n_classes" not in self._signature_params and not self.takes_any_param:
            raise ArchitectureError(
                f"architecture {self.name!r}: the builder must take n_classes (the number of "
                "known classes, the size of the logits)"
            )

    @property
    def _signature_params(self) -> dict[str, inspect.Parameter]:
        return {
            p.name: p
            for p in inspect.signature(self.build).parameters.values()
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        }

    @property
    def takes_any_param(self) -> bool:
        """True when the builder takes ``**kwargs``: any parameter name is passed on."""
        kinds = [p.kind for p in inspect.signature(self.build).parameters.values()]
        return inspect.Parameter.VAR_KEYWORD in kinds

    @property
    def defaults(self) -> dict[str, object]:
        """The builder's own parameters (beyond :data:`STANDARD_ARGS`) with their defaults."""
        return {
            name: (None if p.default is inspect.Parameter.empty else p.default)
            for name, p in self._signature_params.items()
            if name not in STANDARD_ARGS
        }

    def takes(self, name: str) -> bool:
        """Whether the builder is passed the standard argument ``name`` (``width``, ...)."""
        return name in self._signature_params or self.takes_any_param

    def call(self, standard: Mapping[str, object], params: Mapping[str, object]) -> Any:
        """The builder called with the standard arguments it names and ``params``."""
        named = self._signature_params
        given = {k: v for k, v in standard.items() if k in named or self.takes_any_param}
        return self.build(**given, **params)


#: oodsim's own architectures (:mod:`oodsim.models.architectures` registers them): a script's
#: registration is checked against these names even before they are loaded (registering
#: "small_cnn" first used to break oodsim's own import)
BUILTIN_NAMES = ("small_cnn", "resnet18", "wrn40_2")
BUILTINS: dict[str, Architecture] = {}
_USER: dict[str, Architecture] = {}
_LOADED: dict[str, Architecture] = {}


def _registrar(
    table: dict[str, Architecture], name: str, version: str, replace: bool
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(build: Callable[..., Any]) -> Callable[..., Any]:
        if name.startswith(TIMM_PREFIX):
            raise ValueError(f"names starting with {TIMM_PREFIX!r} are timm's architectures")
        check_registry_name("an architecture", name)
        builtin = name in BUILTINS or (table is _USER and name in BUILTIN_NAMES)
        if builtin or (name in _USER and not replace):
            raise ValueError(f"an architecture named {name!r} is already registered")
        table[name] = Architecture(name=name, build=build, version=version)
        build.__oodsim_architecture__ = table[name]  # lets an entry point name the function
        return build

    return decorate


def register_architecture(
    name: str, *, version: str = "1", replace: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``build(*, n_classes, [in_channels, image_size, dropout, width],
    **params)`` returning a classifier with ``embed``, ``head`` and ``forward``.

    ``version`` enters the checkpoint key. A name already taken raises ``ValueError``;
    ``replace=True`` re-registers a script's own architecture, never a built-in one.
    """
    return _registrar(_USER, name, version, replace)


def builtin_architecture(
    name: str, *, version: str = "1"
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator used by oodsim's own architectures."""
    return _registrar(BUILTINS, name, version, False)


@functools.cache
def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in BUILTINS}


def _load(ep: EntryPoint) -> Architecture:
    try:
        obj = ep.load()
    except Exception as error:  # a broken plugin must say which one it is
        raise ArchitectureError(
            f"architecture entry point {ep.name!r} ({ep.value}) failed to load: {error}"
        ) from error
    found = getattr(obj, "__oodsim_architecture__", None)
    if isinstance(obj, Architecture):
        found = obj
    if found is None:
        if not callable(obj):
            raise ArchitectureError(
                f"architecture entry point {ep.name!r} ({ep.value}) must name a builder "
                f"function, got {type(obj).__name__}"
            )
        found = Architecture(name=ep.name, build=obj)
    return attrs.evolve(found, name=ep.name)


#: Families of names resolved on first use (``timm:`` → any timm model), by prefix.
_PREFIXES: dict[str, Callable[[str], Architecture]] = {}


def register_prefix(prefix: str, resolve: Callable[[str], Architecture]) -> None:
    """Resolve names starting with ``prefix`` with ``resolve(name)`` (the built-in
    architectures module registers ``timm:`` so that this module needs no torch)."""
    _PREFIXES[prefix] = resolve


def available_architectures() -> list[str]:
    """Registered names: built-in, registered in this process, and entry points (``timm:<name>``
    names are not listed: any timm architecture is accepted). Built-ins are registered when
    :mod:`oodsim.models.architectures` is imported."""
    return sorted(set(BUILTINS) | set(_USER) | set(_LOADED) | set(_entry_points()))


def get_architecture(name: str) -> Architecture:
    """The architecture ``name``; an unknown one raises with a close match."""
    for table in (BUILTINS, _USER, _LOADED):
        if name in table:
            return table[name]
    for prefix, resolve in _PREFIXES.items():
        if name.startswith(prefix):
            _LOADED[name] = resolve(name)
            return _LOADED[name]
    eps = _entry_points()
    if name in eps:
        _LOADED[name] = _load(eps[name])
        return _LOADED[name]
    raise UnknownNameError("arch", name, [*available_architectures(), f"{TIMM_PREFIX}<name>"])


def user_architectures(names: Iterable[str]) -> tuple[Architecture, ...]:
    """The architectures among ``names`` that a script registered in this process: worker
    processes do not run the script, so the engine ships these (see :func:`adopt`)."""
    return tuple(_USER[name] for name in dict.fromkeys(names) if name in _USER)


def adopt_architectures(architectures: Iterable[Architecture]) -> None:
    """Register architectures shipped from the driver in this (worker) process."""
    for architecture in architectures:
        if architecture.name not in BUILTINS:
            _USER[architecture.name] = architecture
