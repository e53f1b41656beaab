"""The open set simulation's parts, each the realisation of one spec part: the class and sample
split of a dataset (:mod:`.splits`, a :class:`~oodsim.specs.SplitSpec`), the extra OOD test
sets (:mod:`.ood_sets`, an :class:`~oodsim.specs.OODSetSpec`), the training recipe
(:mod:`.training`, a :class:`~oodsim.specs.TrainingSpec`) and its augmentation
(:mod:`.augment`).

They sit above :mod:`oodsim.specs` (they read spec parts) and below the protocols that use
them (open set, severity's trained models); :mod:`oodsim.data` and :mod:`oodsim.models` hold
the datasets and architectures the specs name, and import no spec.
"""
