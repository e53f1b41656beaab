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

The modules: :mod:`.names` (names, :class:`ModelRef`), :mod:`.weights` (finding local
weights), :mod:`.preprocessing` (each model's preprocessing, batches) and :mod:`.loading`
(:func:`load_model`).
"""

from oodsim.zoo.loading import (
    LoadedModel,
    SplitHead,
    TimmFeatures,
    create_model,
    load_model,
    split_final_linear,
)
from oodsim.zoo.names import (
    PREFIXES,
    VERSION,
    ModelRef,
    check_name,
    file_digest,
    model_refs,
    split_name,
    weights_identity,
)
from oodsim.zoo.preprocessing import (
    INTERPOLATIONS,
    Preprocessing,
    array_batches,
    file_batches,
    infer_tensors,
)
from oodsim.zoo.weights import (
    find_timm_weights,
    find_torchvision_weights,
    hf_cache_dir,
    missing_weights,
    torch_checkpoint_dir,
)

__all__ = [
    "INTERPOLATIONS",
    "LoadedModel",
    "ModelRef",
    "PREFIXES",
    "Preprocessing",
    "SplitHead",
    "TimmFeatures",
    "VERSION",
    "array_batches",
    "check_name",
    "create_model",
    "file_batches",
    "file_digest",
    "find_timm_weights",
    "find_torchvision_weights",
    "hf_cache_dir",
    "infer_tensors",
    "load_model",
    "missing_weights",
    "model_refs",
    "split_final_linear",
    "split_name",
    "torch_checkpoint_dir",
    "weights_identity",
]
