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

import inspect
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint
from typing import Any

import attrs

from oodsim.errors import OodsimError
from oodsim.plugins import Registry

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
#: registration is checked against these names even before they are loaded (so that a
#: script registering "small_cnn" cannot break oodsim's own import)
BUILTIN_NAMES = ("small_cnn", "resnet18", "wrn40_2")


def _from_entry_point(name: str, ep: EntryPoint) -> Architecture:
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
        found = Architecture(name=name, build=obj)
    return attrs.evolve(found, name=name)


#: every architecture by name (:mod:`oodsim.plugins`); built-ins are added by
#: :mod:`oodsim.models.architectures`
REGISTRY: Registry[Architecture] = Registry(
    "architecture",
    field="arch",
    group=ENTRY_POINT_GROUP,
    from_entry_point=_from_entry_point,
    source="build",
)
BUILTINS = REGISTRY.builtins
_USER = REGISTRY.user
_LOADED = REGISTRY.loaded


def _registrar(
    builtin: bool, name: str, version: str, replace: bool
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(build: Callable[..., Any]) -> Callable[..., Any]:
        if name.startswith(TIMM_PREFIX):
            raise ValueError(f"names starting with {TIMM_PREFIX!r} are timm's architectures")
        record = Architecture(name=name, build=build, version=version)
        if builtin:
            REGISTRY.builtin(name, record)
        elif name in BUILTIN_NAMES:  # before the built-ins are loaded
            raise ValueError(f"an architecture named {name!r} is already registered")
        else:
            REGISTRY.register(name, record, replace=replace)
        build.__oodsim_architecture__ = record  # lets an entry point name the function
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
    return _registrar(False, name, version, replace)


def builtin_architecture(
    name: str, *, version: str = "1"
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator used by oodsim's own architectures."""
    return _registrar(True, name, version, False)


def _entry_points() -> dict[str, EntryPoint]:
    return REGISTRY.entry_points()


_entry_points.cache_clear = REGISTRY.cache_clear  # type: ignore[attr-defined]


def register_prefix(prefix: str, resolve: Callable[[str], Architecture]) -> None:
    """Resolve names starting with ``prefix`` with ``resolve(name)`` (the built-in
    architectures module registers ``timm:`` so that this module needs no torch); the names
    resolved so far are listed."""

    def used() -> list[str]:
        return [name for name in REGISTRY.loaded if name.startswith(prefix)]

    REGISTRY.add_prefix(prefix, resolve, used, hint=f"{prefix}<name>")


def available_architectures() -> list[str]:
    """Registered names: built-in, registered in this process, entry points, and the
    ``timm:<name>`` names used so far (any timm architecture is accepted). Built-ins are
    registered when :mod:`oodsim.models.architectures` is imported."""
    return REGISTRY.available()


def get_architecture(name: str) -> Architecture:
    """The architecture ``name``; an unknown one raises with a close match."""
    return REGISTRY.get(name)
