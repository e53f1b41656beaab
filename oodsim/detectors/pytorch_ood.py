"""``pytorch_ood:<Class>``: a detector class of pytorch-ood run on cached outputs or the model.

With the extra ``oodsim[pytorch-ood]``, the name ``pytorch_ood:<Class>`` names the class
``pytorch_ood.detector.<Class>``: classes that score logits or penultimate features are fitted
(``fit_logits``/``fit_features``) and applied (``predict_logits``/``predict_features``) to the
cached outputs; classes that need the network run on the worker with ``model=`` and ``inputs=``
like oodsim's ``odin``. pytorch-ood's outlier scores are negated: κ = −score (float64).

Only the classes in :data:`SUPPORTED` can be named; :data:`UNSUPPORTED` says why the others
cannot run in oodsim (both in :mod:`.pytorch_ood_classes`). Nothing is imported from a name: a
name is looked up in these tables, and only then is the class of that name taken from
``pytorch_ood.detector``. The constructor's
parameters, less the inputs oodsim supplies (model, encoder, head, ``w``/``b``), are the
detector's parameters, with pytorch-ood's defaults; the installed pytorch-ood version is part of
the detector's version, hence of the key of every κ it computes.

Classes that need the classifier's final layer (``head``, or ``w``/``b``) get a
``torch.nn.Linear`` with (W, b) recovered from the fit split by least squares of the logits on
[features, 1], as oodsim's ``vim`` does (exact for the model contract's linear head), or the
``head_weight``/``head_bias`` arrays given to :func:`~oodsim.detectors.confidence`.
"""

from __future__ import annotations

import inspect
import operator
import re
import types
import typing
import warnings
from collections.abc import Callable
from functools import reduce
from typing import TYPE_CHECKING, Any

import numpy as np

from oodsim.detectors._checks import (
    DetectorInputError,
    Limit,
    at_least,
    fit_arrays,
    same_width,
)
from oodsim.detectors._registry import Detector, register_prefix
from oodsim.detectors._torch import check_model_inputs, device_of, eval_mode, row_batches
from oodsim.detectors.vim import recover_linear_head
from oodsim.errors import SpecError, UnknownNameError
from oodsim.outputs import Outputs

if TYPE_CHECKING:
    import torch
from oodsim.detectors.pytorch_ood_classes import (
    FIT_METHODS,
    PREDICT_METHODS,
    SUPPLIED,
    SUPPORTED,
    UNSUPPORTED,
    Use,
)

#: Bump when this adapter changes; pytorch-ood's own version enters each detector's version too.
ADAPTER_VERSION = "1"


PREFIX = "pytorch_ood:"


INSTALL = 'pip install "oodsim[pytorch-ood]"'


#: Rows per block of ``MCD``: each block draws its dropout masks from its own seed, so κ does
#: not depend on how the pipeline batches the inputs.
MCD_BLOCK = 256


#: The first pytorch-ood with the ``fit_logits``/``predict_logits`` API this adapter uses.
MIN_VERSION = (0, 4)


_SCALARS = (bool, int, float, str, type(None))


_NO_DEFAULT = inspect.Parameter.empty


class PytorchOodNameError(UnknownNameError):
    """A ``pytorch_ood:`` name oodsim cannot run: not a supported class, or pytorch-ood is not
    installed (the message says which, and what is allowed)."""

    def __init__(self, name: str, allowed: str, hint: str = "") -> None:
        SpecError.__init__(self, "detector", name, allowed, hint)


def names() -> list[str]:
    """Every name oodsim can run, listed whether or not pytorch-ood is installed."""
    return [PREFIX + name for name in SUPPORTED]


def _allowed() -> str:
    return "one of " + ", ".join(repr(PREFIX + name) for name in sorted(SUPPORTED))


def _pytorch_ood(name: str) -> Any:
    try:
        # pytorch-ood (and torch) load only when one of its detectors is named
        import pytorch_ood
        import pytorch_ood.detector
    except ImportError:
        raise PytorchOodNameError(
            name, "an installed pytorch-ood", f"pytorch-ood is not installed: {INSTALL}"
        ) from None
    version = tuple(int(part) for part in re.findall(r"\d+", pytorch_ood.__version__)[:2])
    if version < MIN_VERSION:
        raise PytorchOodNameError(
            name,
            "pytorch-ood >= " + ".".join(map(str, MIN_VERSION)),
            f"pytorch-ood {pytorch_ood.__version__} is installed: pip install -U "
            '"oodsim[pytorch-ood]"',
        )
    return pytorch_ood


def pytorch_ood_detector(name: str) -> Detector:
    """The :class:`Detector` for ``pytorch_ood:<Class>``; a name that is not a supported class
    of ``pytorch_ood.detector`` raises :class:`PytorchOodNameError` naming what is allowed."""
    class_name = name[len(PREFIX) :]
    if class_name in UNSUPPORTED:
        raise PytorchOodNameError(
            name, _allowed(), f"{class_name} is not supported: {UNSUPPORTED[class_name]}"
        )
    if class_name not in SUPPORTED:
        raise UnknownNameError("detector", name, names())
    pytorch_ood = _pytorch_ood(name)
    cls = getattr(pytorch_ood.detector, class_name, None)
    if not (inspect.isclass(cls) and issubclass(cls, pytorch_ood.api.Detector)):
        raise PytorchOodNameError(
            name,
            "a class of the installed pytorch_ood.detector",
            f"pytorch-ood {pytorch_ood.__version__} has no {class_name}; upgrade it: {INSTALL}",
        )
    use = SUPPORTED[class_name]
    func = _function(name, cls, use)
    return Detector(
        name=name,
        func=func,
        needs=_needs(use),
        fit_on=use.fit_on,
        version=f"{ADAPTER_VERSION}+pytorch-ood-{pytorch_ood.__version__}",
        stochastic=class_name == "MCD",
        limits={**use.limits, **_execution_limits(class_name, use)},
    )


def _execution_limits(class_name: str, use: Use) -> dict[str, Limit]:
    """Limits of the parameters the adapter adds: ``seed`` (MCD), else ``batch_size``."""
    if class_name == "MCD":
        return {"seed": at_least(0)}
    return {"batch_size": at_least(1)} if use.data == "model" else {}


def _needs(use: Use) -> frozenset[str]:
    if use.data == "model":
        return frozenset({"model"})
    if use.head:
        return frozenset({"logits", "features"})
    return frozenset({use.data})


def _scalar_annotation(annotation: object, default: object) -> object:
    """The scalar types of a constructor annotation (``Optional[float] = 1.0`` → ``float``:
    None is allowed only where it is the default), ``empty`` when it names none."""
    if annotation is _NO_DEFAULT:
        kinds: tuple = () if default is None else (type(default),)
    elif typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kinds = typing.get_args(annotation)
    else:
        kinds = (annotation,)
    kinds = tuple(k for k in kinds if k in _SCALARS and k is not type(None))
    if default is None and kinds:
        kinds = (*kinds, type(None))
    return reduce(operator.or_, dict.fromkeys(kinds)) if kinds else _NO_DEFAULT


def _class_parameters(name: str, cls: type, use: Use) -> list[inspect.Parameter]:
    """The constructor's parameters that a spec sets: keyword-only, with their defaults."""
    try:
        signature = inspect.signature(cls.__init__, eval_str=True)
    except NameError:  # an annotation that does not evaluate: read it unevaluated
        signature = inspect.signature(cls.__init__)
    found = []
    for param in list(signature.parameters.values())[1:]:  # past self
        if param.name in SUPPLIED or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = use.defaults.get(param.name, param.default)
        if default is _NO_DEFAULT:
            raise PytorchOodNameError(
                name,
                _allowed(),
                f"its constructor requires {param.name!r}, which this oodsim version does "
                "not supply",
            )
        annotation = _scalar_annotation(param.annotation, default)
        found.append(
            inspect.Parameter(
                param.name, param.KEYWORD_ONLY, default=default, annotation=annotation
            )
        )
    return found


def _signature(name: str, cls: type, use: Use) -> inspect.Signature:
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("outputs", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    fit_default = _NO_DEFAULT if use.fit_on else None
    params.append(inspect.Parameter("fit", keyword, default=fit_default))
    if use.data == "model":
        params += [inspect.Parameter("model", keyword), inspect.Parameter("inputs", keyword)]
    params += _class_parameters(name, cls, use)
    if use.head:
        params += [
            inspect.Parameter("head_weight", keyword, default=None),
            inspect.Parameter("head_bias", keyword, default=None),
        ]
    if cls.__name__ == "MCD":
        params.append(inspect.Parameter("seed", keyword, default=0, annotation=int))
    elif use.data == "model":
        params.append(inspect.Parameter("batch_size", keyword, default=256, annotation=int))
    return inspect.Signature(params)


def _function(name: str, cls: type, use: Use) -> Callable[..., np.ndarray]:
    """``func(outputs, *, fit, [model, inputs,] **params) -> κ`` with the class's parameters in
    its signature, so specs check names, types and limits as for any detector."""

    signature = _signature(name, cls, use)
    defaults = {
        p.name: p.default
        for p in signature.parameters.values()
        if p.kind is p.KEYWORD_ONLY and p.name not in ("fit", "model", "inputs")
    }

    def func(outputs: Outputs | None, **call: Any) -> np.ndarray:
        given = {k: v for k, v in call.items() if k not in ("fit", "model", "inputs")}
        params = {**defaults, **given}
        fit = call.get("fit")
        if use.data == "model":
            return _on_model(name, cls, use, call["model"], call["inputs"], fit, params)
        return _on_outputs(name, cls, use, outputs, fit, params)

    func.__signature__ = signature  # type: ignore[attr-defined]
    func.__name__ = func.__qualname__ = "pytorch_ood_" + cls.__name__
    inputs = {"logits": "the cached logits", "features": "the cached features"}
    where = inputs.get(use.data, "the model (on the worker)")
    if use.head:
        where += " and the final layer"
    func.__doc__ = f"pytorch-ood's {cls.__name__} on {where}, κ = −score."
    return func


def _failed(name: str, cls: type, error: Exception) -> DetectorInputError:
    return DetectorInputError(
        f"detector {name!r}: pytorch-ood's {cls.__name__} raised {type(error).__name__}: {error}"
    )


def _kappa(score: torch.Tensor) -> np.ndarray:
    """κ = −score as float64 numpy, one per row."""
    return -np.asarray(score.detach().cpu().double().numpy(), dtype=np.float64).reshape(-1)


def _method(detector: object, names: tuple[str, ...]) -> Callable:
    return next(getattr(detector, n) for n in names if hasattr(detector, n))


def _float32(array: np.ndarray) -> torch.Tensor:
    """A float32 tensor of its own (cached outputs are read-only, which torch cannot share)."""
    # torch loads only for the detectors that use it
    import torch

    return torch.tensor(array, dtype=torch.float32)


def _labels(array: np.ndarray) -> torch.Tensor:
    """The labels as a tensor of their own (see :func:`_float32`)."""
    # torch loads only for the detectors that use it
    import torch

    return torch.tensor(array)


def _linear_head(
    name: str, train: Any, head_weight: Any, head_bias: Any
) -> tuple[np.ndarray, np.ndarray]:
    """(W (C, D), b (C,)): given, or recovered from the fit split as oodsim's ``vim`` does."""
    n_classes, n_features = train.logits.shape[1], train.features.shape[1]
    if head_weight is not None:
        weight = np.asarray(head_weight, dtype=np.float64)
        bias = np.zeros(n_classes) if head_bias is None else np.asarray(head_bias, np.float64)
        if weight.shape != (n_classes, n_features) or bias.shape != (n_classes,):
            raise DetectorInputError(
                f"detector {name!r}: head_weight must have shape ({n_classes}, {n_features}) and "
                f"head_bias ({n_classes},), got {weight.shape} and {bias.shape}"
            )
        return weight, bias
    if head_bias is not None:
        raise DetectorInputError(f"detector {name!r}: head_bias= needs head_weight=")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            weight, bias = recover_linear_head(train.features, train.logits)
    except DetectorInputError as error:
        reason = str(error).split(": ", 1)[-1]
        raise DetectorInputError(f"detector {name!r}: {reason}") from None
    for warning in caught:
        text = str(warning.message).removeprefix("vim: ")
        warnings.warn(f"{name}: {text}", warning.category, stacklevel=4)
    return weight, bias


def _supplied(cls: type, **values: Any) -> dict[str, Any]:
    """The inputs oodsim supplies that ``cls``'s constructor takes."""
    accepted = inspect.signature(cls.__init__).parameters
    return {k: v for k, v in values.items() if k in accepted}


def _on_outputs(
    name: str, cls: type, use: Use, outputs: Outputs, fit: Outputs | None, params: dict
) -> np.ndarray:
    # torch loads only for the detectors that use it
    import torch

    head_weight, head_bias = params.pop("head_weight", None), params.pop("head_bias", None)
    data = use.data
    scored = outputs.logits if data == "logits" else outputs.features
    train = None
    if use.fit_on is not None:
        train = fit_arrays(name, fit, use.fit_on, features=data == "features", labels=True)
        if data == "features":
            same_width(name, "features", outputs.features, train.features)
    supplied: dict[str, Any] = {"model": None, "encoder": None, "backbone": None}
    if use.head:
        weight, bias = _linear_head(name, train, head_weight, head_bias)
        with torch.inference_mode(False), torch.no_grad():
            head = torch.nn.Linear(weight.shape[1], weight.shape[0])
            head.weight.copy_(_float32(weight))
            head.bias.copy_(_float32(bias))
            w, b = _float32(weight), _float32(bias)
        head.requires_grad_(False)
        supplied |= {"head": head, "w": w, "b": b}
        if cls.__name__ == "ViM" and params.get("d") is None:
            params["d"] = max(1, weight.shape[1] // 2)  # as oodsim's vim
    fits = use.fits and not (cls.__name__ == "ReAct" and params.get("threshold") is not None)
    try:
        # normal tensors even inside inference_mode: TemperatureScaling fits T with L-BFGS
        with torch.inference_mode(False):
            detector = cls(**_supplied(cls, **supplied), **params)
            if fits:
                fit_x = train.logits if data == "logits" else train.features
                with torch.enable_grad():
                    _method(detector, FIT_METHODS[data])(_float32(fit_x), _labels(train.labels))
            with torch.no_grad():
                score = _method(detector, PREDICT_METHODS[data])(_float32(scored))
    except (ValueError, AssertionError, RuntimeError, IndexError) as error:
        raise _failed(name, cls, error) from error
    return _kappa(score)


def _block_seed(seed: int, block: int) -> int:
    """The torch seed of one ``MCD`` block of rows."""
    return int(np.random.SeedSequence([seed, block]).generate_state(1, np.uint64)[0] >> 1)


def _on_model(
    name: str, cls: type, use: Use, model: Any, inputs: Any, fit: Outputs | None, params: dict
) -> np.ndarray:
    # torch loads only for the detectors that use it
    import torch

    mcd = cls.__name__ == "MCD"
    seed = params.pop("seed", 0)
    batch_size = MCD_BLOCK if mcd else params.pop("batch_size", 256)
    batch_size = check_model_inputs(name, model, inputs, batch_size)
    device = device_of(model)
    parameters = list(model.parameters())
    grads = [p.grad for p in parameters]  # MahalanobisODIN calls backward(): put .grad back
    parts = []
    try:
        # normal tensors even inside inference_mode: these classes take gradients
        with eval_mode(model), torch.inference_mode(False):
            embed = getattr(model, "embed", None)
            if embed is None and "encoder" in inspect.signature(cls.__init__).parameters:
                raise DetectorInputError(
                    f"detector {name!r} needs model.embed(x), the penultimate features "
                    "(see the model contract)"
                )
            detector = cls(**_supplied(cls, model=model, encoder=embed), **params)
            if use.fits:
                train = fit_arrays(name, fit, use.fit_on, features=True, labels=True)
                detector.fit_features(
                    _float32(train.features).to(device), _labels(train.labels).to(device)
                )
            for block, rows in enumerate(row_batches(len(inputs), batch_size)):
                x = inputs[rows].to(device).clone()
                if mcd:
                    cuda = [device] if device.type == "cuda" else []
                    with torch.random.fork_rng(devices=cuda):
                        torch.manual_seed(_block_seed(seed, block))
                        parts.append(_kappa(detector.predict(x)))
                else:
                    parts.append(_kappa(detector.predict(x)))
    except (ValueError, AssertionError, RuntimeError, IndexError) as error:
        raise _failed(name, cls, error) from error
    finally:
        for parameter, grad in zip(parameters, grads):
            parameter.grad = grad
    return np.concatenate(parts) if parts else np.zeros(0)


register_prefix(PREFIX, pytorch_ood_detector, names, family="pytorch-ood")
