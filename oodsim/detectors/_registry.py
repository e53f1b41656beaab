"""The detector registry: built-ins in a dict, user functions, and lazy entry points.

A detector is a pure function ``func(outputs, *, fit=None, **params) -> κ`` (model-based ones
also take ``model=`` and ``inputs=``) plus the metadata the pipeline needs to call and cache it.
Names with a registered prefix (``pytorch_ood:<Class>``) are built on first use.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import EntryPoint
from typing import Any

import attrs

from oodsim.detectors._checks import Limit, UnknownParameterError
from oodsim.detectors.scales import check_scale
from oodsim.plugins import Registry

ENTRY_POINT_GROUP = "oodsim.detectors"
NEEDS = frozenset({"logits", "features", "model"})
FIT_SPLITS = (None, "train", "val")
#: Keyword arguments every detector function may take that are inputs, not parameters.
INPUT_ARGS = frozenset({"fit", "model", "inputs"})
#: Parameters that change how fast a detector runs, never its result: keep them out of keys.
EXECUTION_PARAMS = frozenset({"batch_size"})
#: The families of oodsim's own detectors, in the order a report lists them: what a detector
#: scores (softmax or logits, samples of a stochastic network, penultimate features). A
#: built-in record names its family; a report colours and groups methods by it.
FAMILIES = ("softmax / logit", "sampling (MC dropout)", "feature")
#: The family of every detector that is neither built in nor of a prefix with a family
#: (:func:`register_prefix`): what a report knows of it wherever it is drawn, since a report may
#: be drawn in a process where a script's detector is not registered.
OTHER_FAMILY = "other"


def _parameters(func: Callable) -> dict[str, inspect.Parameter]:
    """The keyword parameters of ``func`` that are detector parameters.

    The first positional parameter receives the outputs, whatever its name; ``fit``, ``model``
    and ``inputs`` are inputs, not parameters.
    """
    params = list(inspect.signature(func).parameters.values())
    if params and params[0].kind in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
        params = params[1:]
    return {
        p.name: p
        for p in params
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in INPUT_ARGS
    }


class FrozenParams(Mapping):
    """A read-only, picklable mapping of parameter names to defaults."""

    def __init__(self, items: Mapping[str, object] | None = None) -> None:
        self._items = dict(items or {})

    def __getitem__(self, key: str) -> object:
        return self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"FrozenParams({self._items!r})"


def _signature_defaults(self: Detector) -> Mapping[str, object]:
    """Every parameter of ``func`` with its default (``None`` where it has none)."""
    return {
        name: (None if p.default is inspect.Parameter.empty else p.default)
        for name, p in _parameters(self.func).items()
    }


def _first_paragraph(self: Detector) -> str:
    return inspect.cleandoc(self.func.__doc__ or "").split("\n\n")[0].replace("\n", " ")


def _check_needs(instance: Detector, attribute: attrs.Attribute, value: frozenset) -> None:
    if not value or not value <= NEEDS:
        raise ValueError(f"needs must be a non-empty subset of {sorted(NEEDS)}, got {set(value)}")


@attrs.frozen(kw_only=True)
class Detector:
    """A registered confidence function κ (higher = more in-distribution) and its metadata."""

    name: str
    func: Callable = attrs.field(validator=attrs.validators.is_callable())
    needs: frozenset[str] = attrs.field(converter=frozenset, validator=_check_needs)
    fit_on: str | None = attrs.field(default=None, validator=attrs.validators.in_(FIT_SPLITS))
    version: str = attrs.field(default="1", converter=str)
    stochastic: bool = False
    #: ``fit_params(fit, **params) -> dict``: the parameters ``func`` would fit on ``fit``
    #: itself (e.g. temperature scaling's T), so a caller can record them and pass them fixed.
    fit_params: Callable[..., dict[str, object]] | None = None
    #: The values each parameter allows beyond its type (see :class:`Limit`), checked where a
    #: spec is built and by ``confidence``.
    limits: Mapping[str, Limit] = attrs.field(default=(), converter=FrozenParams, hash=False)
    defaults: Mapping[str, object] = attrs.field(
        default=attrs.Factory(_signature_defaults, takes_self=True),
        converter=FrozenParams,
        hash=False,
    )
    doc: str = attrs.field(default=attrs.Factory(_first_paragraph, takes_self=True))
    #: The scale the papers average this confidence on (:mod:`oodsim.detectors.scales`):
    #: ``"kappa"`` (κ itself), ``"probability"`` (``expit(κ)``), ``"negative_entropy"``
    #: (``−exp(−κ)``). C-OOD class severity is a mean taken there; rankings never change.
    confidence_scale: str = attrs.field(default="kappa", converter=check_scale)
    #: What kind of detector it is (one of :data:`FAMILIES` for a built-in one, else
    #: :data:`OTHER_FAMILY`): how reports colour and group it, never part of a key.
    family: str = attrs.field(default=OTHER_FAMILY, validator=attrs.validators.instance_of(str))

    @property
    def takes_any_param(self) -> bool:
        """True when ``func`` has ``**kwargs``: any parameter name is accepted."""
        kinds = [p.kind for p in inspect.signature(self.func).parameters.values()]
        return inspect.Parameter.VAR_KEYWORD in kinds

    @property
    def takes_fit(self) -> bool:
        """True when ``func`` accepts a ``fit=`` keyword."""
        params = inspect.signature(self.func).parameters
        return "fit" in params or self.takes_any_param

    @property
    def fit_required(self) -> bool:
        """A fit split is declared and ``func`` gives ``fit`` no default."""
        fit = inspect.signature(self.func).parameters.get("fit")
        return self.fit_on is not None and (fit is None or fit.default is inspect.Parameter.empty)

    def resolve(self, params: Mapping[str, object]) -> dict[str, object]:
        """Defaults overridden by ``params``; an unknown name raises with the allowed ones."""
        if not self.takes_any_param:
            for key in params:
                if key not in self.defaults:
                    allowed = ", ".join(sorted(self.defaults)) or "none"
                    raise UnknownParameterError(
                        f"unknown parameter {key!r} for detector {self.name!r}; allowed: {allowed}"
                    )
        return {**self.defaults, **params}

    def check_limits(self, params: Mapping[str, object]) -> None:
        """Raise :class:`DetectorInputError` for a parameter value outside its limit."""
        for key, value in params.items():
            if key in self.limits:
                self.limits[key].check(self.name, key, value)

    def fitted(self, fit: object, params: Mapping[str, object]) -> dict[str, object]:
        """``params`` with every parameter the detector fits on ``fit`` filled in (unchanged
        without a ``fit_params`` hook or a fit split): κ with the result is the same, and the
        fitted values can be recorded."""
        if self.fit_params is None or fit is None:
            return dict(params)
        return {**params, **self.fit_params(fit, **params)}


#: every detector by name (:mod:`oodsim.plugins`); built-ins are added by their modules
REGISTRY: Registry[Detector] = Registry(
    "detector",
    group=ENTRY_POINT_GROUP,
    record_type=Detector,
    decorator="oodsim.detectors.register",
    source="func",
)
BUILTINS = REGISTRY.builtins
_USER = REGISTRY.user
_LOADED = REGISTRY.loaded
#: prefix → the family of every detector it names
_PREFIX_FAMILIES: dict[str, str] = {}


def register_prefix(
    prefix: str,
    build: Callable[[str], Detector],
    names: Callable[[], Iterable[str]],
    family: str = OTHER_FAMILY,
) -> None:
    """Names starting with ``prefix`` are detectors that ``build(name)`` makes on first use
    (and raises a :class:`~oodsim.errors.SpecError` for a name it cannot make); ``names()``
    lists the ones :func:`available` shows; ``family`` is the family of all of them
    (:func:`detector_family`, known without building one). Used by
    :mod:`oodsim.detectors.pytorch_ood`."""
    REGISTRY.add_prefix(prefix, build, names)
    _PREFIX_FAMILIES[prefix] = family


def _decorator(
    builtin: bool,
    name: str,
    *,
    needs,
    replace: bool,
    fit_on: str | None = None,
    version: str = "1",
    stochastic: bool = False,
    fit_params: Callable[..., dict[str, object]] | None = None,
    limits: Mapping[str, Limit] | None = None,
    confidence_scale: str = "kappa",
    family: str = OTHER_FAMILY,
) -> Callable[[Callable], Callable]:
    def decorate(func: Callable) -> Callable:
        detector = Detector(
            name=name,
            func=func,
            needs=frozenset(needs),
            fit_on=fit_on,
            version=version,
            stochastic=stochastic,
            fit_params=fit_params,
            limits=limits or {},
            confidence_scale=confidence_scale,
            family=family,
        )
        unknown = sorted(set(detector.limits) - set(detector.defaults))
        if unknown and not detector.takes_any_param:
            raise ValueError(f"limits name parameters that {name!r} does not take: {unknown}")
        if builtin:
            REGISTRY.builtin(name, detector)
        else:
            REGISTRY.register(name, detector, replace=replace)
        func.__oodsim_detector__ = detector  # lets an entry point name the plain function
        return func

    return decorate


def register(
    name: str,
    *,
    needs: frozenset[str] | set[str] | tuple[str, ...],
    fit_on: str | None = None,
    version: str = "1",
    stochastic: bool = False,
    replace: bool = False,
    fit_params: Callable[..., dict[str, object]] | None = None,
    limits: Mapping[str, Limit] | None = None,
    confidence_scale: str = "kappa",
    family: str = OTHER_FAMILY,
) -> Callable[[Callable], Callable]:
    """Decorator: register ``func(outputs, *, fit=None, **params) -> κ`` under ``name``.

    A name already taken raises ``ValueError``; ``replace=True`` lets a script re-register its own
    detector (a notebook cell run twice), never a built-in one. ``fit_params(fit, **params)``,
    optional, returns the parameters ``func`` fits on ``fit`` (recorded per seed in results).
    ``limits`` maps parameter names to the values they allow (``at_least(1)``,
    ``greater_than(0)``, ``one_of("a", "b")``), checked where a spec is built.
    ``confidence_scale`` says which scale the papers average κ on (class severity of the C-OOD
    benchmark): ``"kappa"`` (default: κ is the confidence), ``"probability"`` (κ is a log-odds,
    ``expit(κ)`` the probability) or ``"negative_entropy"`` (κ = −log H); see
    :mod:`oodsim.detectors.scales`. ``family`` (any short text, e.g. ``"density"``) groups
    and colours the detector in reports (:mod:`oodsim.report.styles`); a report drawn where
    the detector is neither registered nor installed draws it as :data:`OTHER_FAMILY`.
    """
    return _decorator(
        False,
        name,
        needs=needs,
        fit_on=fit_on,
        version=version,
        stochastic=stochastic,
        replace=replace,
        fit_params=fit_params,
        limits=limits,
        confidence_scale=confidence_scale,
        family=family,
    )


def builtin(name: str, *, family: str, **options: Any) -> Callable[[Callable], Callable]:
    """Decorator used by oodsim's own detector modules: :func:`register`'s options and the
    detector's ``family`` (one of :data:`FAMILIES`), into the built-in table (never
    replaced)."""
    if family not in FAMILIES:
        raise ValueError(f"a built-in detector's family is one of {FAMILIES}, got {family!r}")
    return _decorator(True, name, replace=False, family=family, **options)


def builtin_detectors() -> tuple[Detector, ...]:
    """oodsim's own detectors, by name."""
    return tuple(BUILTINS[name] for name in sorted(BUILTINS))


def families() -> tuple[str, ...]:
    """Every family a detector can have, in the order a report lists them: the built-ins'
    (:data:`FAMILIES`), the prefixes' (in the order registered), :data:`OTHER_FAMILY` last."""
    prefixed = [f for f in dict.fromkeys(_PREFIX_FAMILIES.values()) if f not in FAMILIES]
    return (*FAMILIES, *[f for f in prefixed if f != OTHER_FAMILY], OTHER_FAMILY)


def detector_family(name: str) -> str:
    """The family the detector registered as ``name`` declares: a built-in's
    (:data:`FAMILIES`), its prefix's (``pytorch_ood:<Class>``, known without building one),
    the one it was registered or installed with (an installed plug-in is loaded to read it),
    else :data:`OTHER_FAMILY` (a name no detector has here)."""
    for prefix, family in _PREFIX_FAMILIES.items():
        if name.startswith(prefix):
            return family
    if name in BUILTINS or name in _USER or name in _LOADED or name in _entry_points():
        try:
            return get_detector(name).family
        except (ImportError, TypeError):  # a broken plug-in: its error comes where it is used
            return OTHER_FAMILY
    return OTHER_FAMILY


def _entry_points() -> dict[str, EntryPoint]:
    """Third-party detectors by name; listed once, loaded only when asked for."""
    return REGISTRY.entry_points()


_entry_points.cache_clear = REGISTRY.cache_clear  # type: ignore[attr-defined]


def user_detectors(names: Iterable[str]) -> tuple[Detector, ...]:
    """The detectors among ``names`` that a script registered in this process: worker processes
    do not run the script, so the executor ships these to them (see :func:`adopt`)."""
    return tuple(_USER[name] for name in dict.fromkeys(names) if name in _USER)


def adopt(detectors: Iterable[Detector]) -> None:
    """Register detectors shipped from the driver in this (worker) process."""
    REGISTRY.adopt({detector.name: detector for detector in detectors})


def available() -> list[str]:
    """Names of all detectors: built-in, registered in this process, entry points, and the
    names of prefixed families (``pytorch_ood:<Class>``, listed even where the extra they need
    is missing, so that using one says how to install it)."""
    return REGISTRY.available()


def get_detector(name: str) -> Detector:
    """The detector registered as ``name``; an unknown name raises with a close match."""
    return REGISTRY.get(name)
