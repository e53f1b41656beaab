"""Classifiers by name, each with its own preprocessing: pretrained zoo models and open set CNNs.

Names: ``timm:<model>[.<tag>]`` (e.g. ``timm:resnet50.a1_in1k``),
``torchvision:<model>[.<weights>]`` (e.g. ``torchvision:resnet50.IMAGENET1K_V2``) and
``trained`` (the small CNN an open set :class:`~oodsim.specs.ExperimentSpec` trains per seed;
the severity protocol loads it from the open set checkpoint of the seed it runs, see
:func:`oodsim.protocols.severity.compute.load_model`).

Every loaded model gives logits and penultimate features in one pass
(``model.forward_with_features(x)``) and comes with the preprocessing it was trained with (timm's
data config, torchvision's ``weights.transforms()``, the open set normalization).

Pretrained weights are read **only from local files**: a ``weights=`` file, the torch hub
checkpoint folder (``$TORCH_HOME/hub/checkpoints``) or the Hugging Face cache
(``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ``~/.cache/huggingface/hub``). oodsim looks for the file
itself and hands timm/torchvision the path, so they never try a download; with no file the error
lists every place it looked. ``pretrained=False`` (random weights, seeded) works anywhere.

The modules: :mod:`.names` (names, :class:`ModelRef`), :mod:`.known` (the names timm and
torchvision know, recorded per installed version), :mod:`.weights` (finding local weights),
:mod:`.preprocessing` (each model's preprocessing, batches) and :mod:`.loading`
(:func:`load_model`). The names below load from their module on first use: a spec names and
checks its models (:class:`ModelRef`) without loading torch, which only the last three need.
"""

from __future__ import annotations

from oodsim.lazy import lazy_attributes

#: public name → the module of this package that defines it
_HOMES = {
    "LoadedModel": "loading",
    "SplitHead": "loading",
    "TimmFeatures": "loading",
    "create_model": "loading",
    "load_model": "loading",
    "split_final_linear": "loading",
    "PREFIXES": "names",
    "VERSION": "names",
    "ModelRef": "names",
    "check_name": "names",
    "file_digest": "names",
    "model_refs": "names",
    "split_name": "names",
    "weights_identity": "names",
    "INTERPOLATIONS": "preprocessing",
    "Preprocessing": "preprocessing",
    "array_batches": "preprocessing",
    "file_batches": "preprocessing",
    "infer_tensors": "preprocessing",
    "find_timm_weights": "weights",
    "find_torchvision_weights": "weights",
    "hf_cache_dir": "weights",
    "missing_weights": "weights",
    "torch_checkpoint_dir": "weights",
}

__all__ = sorted(_HOMES)


__getattr__, __dir__ = lazy_attributes(__name__, _HOMES, globals())
