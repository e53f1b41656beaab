"""The ImageNet-O evaluation (Hendrycks et al., "Natural Adversarial Examples", 2019).

Restrict a 1000-way ImageNet classifier to the 200 ImageNet-O classes, take the softmax over
those 200 logits, score each image by −max softmax (the anomaly score) and report the area
under the precision-recall curve with ImageNet-O images as positives (trapezoidal
``auc(recall, precision)`` over ``precision_recall_curve``). The ID set is the ImageNet
validation images of the 200 classes (10,000), the OOD set ImageNet-O's 2,000 images; chance
AUPR is the OOD share, 2,000 / 12,000 ≈ 16.7 %.

Three ways in:

- the recipe on logits: :func:`evaluate_logits` (or ``.npy`` files, :func:`evaluate_logit_files`);
- one model on the two image folders, in this process: :func:`evaluate_folders`;
- a spec of several models (:class:`ImageNetOSpec`, ``specs/imagenet_o.toml``) run by the
  engine, ``oodsim.run(spec)``: :data:`PROTOCOL` plans one task per model that infers the
  1000-way logits of the ID and OOD files and stores them (``outputs`` entries, keyed by
  the model, the file listing and the inference version; the same for every seed), and scores
  each seed from the store. With ``bootstrap = true`` a seed scores a bootstrap resample of the
  ID and the OOD images (stream ``bootstrap``): a replicate of the one fixed test set; without
  it every seed scores the full sets. :func:`bootstrap_interval` turns the replicates into the
  point estimate on the full test set and its percentile interval (test-set sampling
  uncertainty). Stopping rules are refused when the spec is made (:data:`STOPPING_REFUSED`).

The modules follow the flow: :mod:`.recipe` (the recipe on logits, bootstrap replicates),
:mod:`.folders` (one model on image folders), :mod:`.spec` (:class:`ImageNetOSpec`),
:mod:`.compute` (the logits task), :mod:`.scoring` (a seed from the store, the interval) and
:mod:`.protocol` (:class:`~.protocol.ImageNetOProtocol`, the plug-in the engine runs). The names
below load from their module on first use: reading a spec (:mod:`.spec`, what ``oodsim.load``
imports) loads neither torch nor the engine's results.

Two AUPRs: ``aupr`` is the card's trapezoid ``auc(recall, precision)``, ``ap`` the authors'
code's ``average_precision_score``; both with ImageNet-O as positives and score −max softmax."""

from __future__ import annotations

from oodsim.lazy import lazy_attributes

#: public name → the module of this package that defines it
_HOMES = {
    "PROTOCOL": "protocol",
    "ImageNetOProtocol": "protocol",
    "ImageNetOSpec": "spec",
    "spec_from_data": "spec",
    "LOGITS": "recipe",
    "SEED_MEANING": "recipe",
    "STOPPING_REFUSED": "recipe",
    "bootstrap_indices": "recipe",
    "check_bootstrap": "recipe",
    "check_seed": "recipe",
    "evaluate_logits": "recipe",
    "max_softmax": "recipe",
    "ood_metrics": "recipe",
    "restrict_logits": "recipe",
    "subset_columns": "recipe",
    "check_options": "folders",
    "evaluate_folders": "folders",
    "evaluate_logit_files": "folders",
    "id_files": "folders",
    "ood_files": "folders",
    "file_sets": "compute",
    "logits_key": "compute",
    "bootstrap_interval": "scoring",
}

__all__ = sorted(_HOMES)


__getattr__, __dir__ = lazy_attributes(__name__, _HOMES, globals())
