"""The classes of ``pytorch_ood.detector`` oodsim runs and how (:data:`SUPPORTED`: what each
scores, fits on, takes and allows), the ones it cannot run and why (:data:`UNSUPPORTED`), and the
constructor arguments oodsim supplies (:data:`SUPPLIED`): data, no pytorch-ood import."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from oodsim.detectors._checks import (
    Limit,
    at_least,
    between,
    greater_than,
    one_of,
)

if TYPE_CHECKING:
    pass


@attrs.frozen(kw_only=True)
class Use:
    """How oodsim runs one pytorch-ood class."""

    #: what the class scores: "logits" or "features" (cached), or "model" (run on the worker)
    data: str
    #: the in-distribution split passed as ``fit`` (None: no fit split)
    fit_on: str | None = None
    #: the class's own ``fit_*`` is called on the fit split (False: the split only gives the head)
    fits: bool = False
    #: the class takes the final layer (``head`` or ``w``/``b``), recovered from the fit split
    head: bool = False
    #: oodsim's defaults where pytorch-ood's constructor has none (None: chosen from the data)
    defaults: Mapping[str, object] = attrs.field(factory=dict)
    #: the values parameters allow beyond their type, checked where a spec is built
    limits: Mapping[str, Limit] = attrs.field(factory=dict)


_FRACTION = between(0, 1)  # pytorch-ood checks it too, but only once the model is trained


#: The classes of ``pytorch_ood.detector`` oodsim can run, and how.
SUPPORTED: dict[str, Use] = {
    # logits only
    "MaxSoftmax": Use(data="logits", limits={"t": greater_than(0)}),
    "EnergyBased": Use(data="logits", limits={"t": greater_than(0)}),
    "MaxLogit": Use(data="logits"),
    "Entropy": Use(data="logits"),
    "GEN": Use(data="logits", limits={"gamma": greater_than(0), "M": at_least(1)}),
    "KLMatching": Use(data="logits", fit_on="val", fits=True),
    "TemperatureScaling": Use(data="logits", fit_on="val", fits=True),
    "OpenMax": Use(
        data="logits",
        fit_on="train",
        fits=True,
        limits={"tailsize": at_least(1), "alpha": at_least(1), "euclid_weight": at_least(0)},
    ),
    # penultimate features
    "Mahalanobis": Use(data="features", fit_on="train", fits=True),
    "RMD": Use(data="features", fit_on="train", fits=True),
    "GMM": Use(data="features", fit_on="train", fits=True, limits={"reg": at_least(0)}),
    "KNN": Use(data="features", fit_on="train", fits=True, limits={"k": at_least(1)}),
    # penultimate features and the final layer
    "ViM": Use(
        data="features",
        fit_on="train",
        fits=True,
        head=True,
        defaults={"d": None},
        limits={"d": at_least(1)},
    ),
    "DICE": Use(
        data="features",
        fit_on="train",
        fits=True,
        head=True,
        defaults={"p": 0.9},
        limits={"p": _FRACTION},
    ),
    "LTS": Use(data="features", fit_on="train", head=True, limits={"p": _FRACTION}),
    "NCI": Use(data="features", fit_on="train", fits=True, head=True),
    "NNGuide": Use(
        data="features", fit_on="train", fits=True, head=True, limits={"k": at_least(1)}
    ),
    "PNML": Use(data="features", fit_on="train", fits=True, head=True, limits={"eps": at_least(0)}),
    "SHE": Use(data="features", fit_on="train", fits=True, head=True),
    "fDBD": Use(data="features", fit_on="train", fits=True, head=True),
    "ReAct": Use(
        data="features", fit_on="train", fits=True, head=True, limits={"percentile": _FRACTION}
    ),
    "VRA": Use(
        data="features",
        fit_on="train",
        fits=True,
        head=True,
        limits={"lower_percentile": _FRACTION, "upper_percentile": _FRACTION},
    ),
    # the network, on the worker
    "ODIN": Use(data="model", limits={"eps": at_least(0), "temperature": greater_than(0)}),
    "MCD": Use(data="model", limits={"samples": at_least(1), "mode": one_of("var", "mean")}),
    "GradNorm": Use(
        data="model", limits={"micro_batch_size": at_least(1), "temperature": greater_than(0)}
    ),
    "GradUncertainty": Use(data="model"),
    "MahalanobisODIN": Use(data="model", fit_on="train", fits=True, limits={"eps": at_least(0)}),
}


#: The classes of ``pytorch_ood.detector`` oodsim cannot run, and why.
UNSUPPORTED: dict[str, str] = {
    "ASH": "prunes convolutional feature maps (B, C, H, W) before global pooling; oodsim caches "
    "pooled features and its model contract has no feature-map hook",
    "SCALE": "scales convolutional feature maps (B, C, H, W) before global pooling; oodsim caches "
    "pooled features and its model contract has no feature-map hook",
    "RankFeat": "removes the rank-1 part of convolutional feature maps (B, C, H, W); oodsim caches "
    "pooled features and its model contract has no feature-map hook",
    "Gram": "needs a list of intermediate layers (feature_layers) to hook",
    "NACUE": "needs a list of intermediate layers to hook and their gradients",
    "MultiMahalanobis": "needs a list of per-layer encoders",
    "MCM": "needs the text embeddings of the class names (a CLIP-like vision-language model)",
    "WeightedEBO": "needs per-class weights learned with VOS training, neither a spec value nor "
    "recoverable from cached outputs",
}


#: Constructor arguments oodsim supplies, or leaves at pytorch-ood's default: never parameters.
SUPPLIED = frozenset(
    {
        "model",  # the network, or None for cached outputs
        "encoder",  # model.embed for MahalanobisODIN, else None
        "backbone",
        "head",  # torch.nn.Linear of the recovered (W, b)
        "w",
        "b",
        "detector",  # the score applied to the logits of DICE, LTS, ReAct, VRA: its default
        "criterion",  # ODIN's loss: its default, cross-entropy
        "norm_std",  # ODIN's per-channel step scaling: None (ε in normalized units, as `odin`)
        "param_filter",  # GradNorm's parameter selection: all parameters
    }
)


#: The methods that fit and score cached arrays (pytorch-ood >= 0.4): ReAct and VRA, feature-map
#: detectors there, have only ``*_feature_maps``, which clip pooled features element-wise too.
FIT_METHODS = {"logits": ("fit_logits",), "features": ("fit_features", "fit_feature_maps")}


PREDICT_METHODS = {
    "logits": ("predict_logits",),
    "features": ("predict_features", "predict_feature_maps"),
}
