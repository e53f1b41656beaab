"""One simulation on a worker: its split, its model (trained, or loaded from the store) and
its outputs on every subset and OOD set, each computed once and stored (:class:`Simulation`)."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from oodsim.artifacts.keys import (
    CHECKPOINT,
    HELD_OUT,
    OOD_OUTPUTS,
    OUTPUTS,
    EvalSet,
    PartKeys,
    SimulationKeys,
    simulation_keys,
)
from oodsim.artifacts.outputs import put_outputs
from oodsim.artifacts.tasks import SeedFailed
from oodsim.artifacts.verdicts import DEGENERATE_VERDICT
from oodsim.data.registry import ImageData, dataset_info
from oodsim.errors import SpecError
from oodsim.models.registry import BUILTINS
from oodsim.outputs import Outputs
from oodsim.seeds import TRAINING_STREAMS, SeedStreams
from oodsim.simulation.ood_sets import ood_images
from oodsim.simulation.splits import SUBSETS, OpenSetSplit, make_split
from oodsim.specs import ExperimentSpec, OODSetSpec
from oodsim.store import Store


class SimulationFailed(SeedFailed):
    """A seed that cannot produce scores (diverged training, non-finite outputs)."""


def _device() -> str:
    # imports torch: only when a model is built, trained or run
    from oodsim.models.tensors import device

    return device()


@attrs.define
class Simulation:
    """Lazily loaded state of one simulation; each piece is read or computed at most once."""

    spec: ExperimentSpec
    seed: int
    store: Store
    keys: SimulationKeys
    _data: ImageData | None = None
    _split: OpenSetSplit | None = None
    _model: Any = None
    _norm: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def streams(self) -> SeedStreams:
        return self.keys.streams

    @property
    def checkpoint(self) -> str:
        return self.keys.checkpoint

    @property
    def data(self) -> ImageData:
        if self._data is None:
            self._data = self.spec.dataset.load()
        return self._data

    @property
    def split(self) -> OpenSetSplit:
        if self._split is None:
            self._split = make_split(
                self.data.labels,
                self.data.n_classes,
                self.spec.split,
                self.streams,
                self.spec.dataset.max_per_class,
            )
        return self._split

    def check(self) -> None:
        """Find in the driver, before any training, what would fail this simulation on every
        worker: a dataset that cannot be read, fewer classes than the split needs, a sample
        split that leaves a subset empty, an architecture that fails to build or breaks the
        classifier contract. It runs the code a worker runs (``data``, ``split``, ``_build``)
        and writes nothing. The model is built only for a plug-in architecture or a built-in
        with parameters, and only when its checkpoint is not stored (the tests check the
        built-ins' contract; a cached run builds none, so the driver then needs no torch).
        Scoring may write a verdict of the degenerate rule (:mod:`.verdicts`), an entry no
        task plans: the room for its kind is checked here with the tasks' kinds."""
        spec = self.spec
        self.store.check_obstacles([DEGENERATE_VERDICT])
        needed = spec.split.n_classes_needed()
        if needed > self.data.n_classes:
            raise SpecError(
                "split",
                needed,
                f"at most {self.data.n_classes} classes (found in {spec.dataset.root})",
            )
        for ood in spec.ood:
            if ood.dataset is not None:
                ood.dataset.load()
        subsets = ["in_train", "in_val", "in_test"]
        subsets += ["out_test"] if any(o.kind == HELD_OUT for o in spec.ood) else []
        empty = [subset for subset in subsets if len(self.split.indices[subset]) == 0]
        if empty:
            raise SpecError(
                "split",
                f"fractions={list(spec.split.fractions)}, "
                f"dataset.max_per_class={spec.dataset.max_per_class}",
                "a sample split that leaves samples in every subset",
                f"Seed {self.seed} gets no samples in {', '.join(empty)}; raise max_per_class "
                "or the smallest fraction",
            )
        if spec.model.arch in BUILTINS and not spec.model.params:
            return
        if not self.store.has(CHECKPOINT, self.checkpoint):
            # imports torch: only when a model is built, trained or run
            from oodsim.models.architectures import check_contract

            height, width, channels = self.data.shape
            n_known = len(self.split.classes.known)
            check_contract(self._build(), spec.model.arch, (channels, height, width), n_known)

    def _build(self) -> Any:
        # imports torch: only when a model is built, trained or run
        from oodsim.models.architectures import build_model

        height, _, channels = self.data.shape
        model_spec = self.spec.model
        return build_model(
            model_spec.arch,
            in_channels=channels,
            n_classes=len(self.split.classes.known),
            image_size=height,
            dropout=model_spec.dropout,
            width=model_spec.width,
            init_seed=self.streams.torch_seed("init"),
            params=model_spec.kwargs,
        )

    def model(self) -> tuple[Any, np.ndarray, np.ndarray]:
        """The trained model and its input normalization: loaded, or trained and stored."""
        while self._model is None:
            # train unless stored; concurrent runs on one cache train a key only once
            self.store.ensure(CHECKPOINT, self.checkpoint, self._train)
            entry = None if self._model is not None else self.store.get(CHECKPOINT, self.checkpoint)
            if entry is not None:  # trained earlier or by another process (None: corrupt)
                self._check_data(entry.meta.get("data"))
                # torch loads only when a model runs
                import torch

                model = self._build()
                state = {
                    name.removeprefix("state."): torch.from_numpy(value)
                    for name, value in entry.arrays.items()
                    if name.startswith("state.")
                }
                model.load_state_dict(state)
                self._model = model.eval().to(_device())
                self._norm = (entry.arrays["norm_mean"], entry.arrays["norm_std"])
        assert self._norm is not None
        return self._model, *self._norm

    def _check_data(self, recorded: str | None) -> None:
        """The stored model is about to meet the data again (inference, a model-based κ): the
        loader must have returned the arrays it was trained on. One that did not (a shuffle or
        subsample without a seed) gave κ on other images than the cached outputs they are
        scored beside, with no error. Checkpoints of older versions record nothing."""
        if recorded is not None and recorded != self.data.digest:
            raise SimulationFailed(
                f"dataset {self.spec.dataset.name!r} returned other images or labels than when "
                "this seed's model was trained: its loader must return the same arrays, in the "
                "same order, every time (seed any random subsample or shuffle); bump its "
                "version when its data change"
            )

    def _train(self) -> None:
        # imports torch: only when a model is built, trained or run
        from oodsim.models.tensors import channel_stats
        from oodsim.simulation.training import TrainingDiverged, train

        split, data = self.split, self.data
        labels = split.known_labels(data.labels)
        train_idx, val_idx = split.indices["in_train"], split.indices["in_val"]
        if len(train_idx) == 0 or len(val_idx) == 0:
            raise SimulationFailed(
                "the split leaves no in-distribution training or validation "
                "samples; raise dataset.max_per_class or the fractions"
            )
        mean, std = channel_stats(data.images[train_idx])
        model = self._build()
        hflip = self.spec.training.augment.hflip
        hflip = dataset_info(self.spec.dataset.name).hflip if hflip is None else hflip
        try:
            log = train(
                model,
                data.images[train_idx],
                labels[train_idx],
                data.images[val_idx],
                labels[val_idx],
                mean=mean,
                std=std,
                spec=self.spec.training,
                hflip=hflip,
                streams=self.streams,
                device=_device(),
            )
        except TrainingDiverged as error:
            raise SimulationFailed(f"training diverged: {error}") from None
        arrays = {f"state.{k}": v.detach().cpu().numpy() for k, v in model.state_dict().items()}
        arrays |= {"norm_mean": mean, "norm_std": std}
        self.store.put(
            CHECKPOINT,
            self.checkpoint,
            arrays,
            {
                "describe": f"{self.spec.dataset.name} {self.spec.model.arch} seed={self.seed} "
                f"known={split.classes.label}",
                "class_split": attrs.asdict(split.classes),
                "training": attrs.asdict(log),
                "streams": self.streams.entropies(TRAINING_STREAMS),
                "data": data.digest,  # checked whenever the model meets the data again
            },
        )
        self._model, self._norm = model, (mean, std)

    def _infer(self, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # imports torch: only when a model is built, trained or run
        from oodsim.models.inference import infer

        model, mean, std = self.model()
        logits, features = infer(model, images, mean=mean, std=std, device=_device())
        if not (np.isfinite(logits).all() and np.isfinite(features).all()):
            raise SimulationFailed("the model produced non-finite logits or features")
        return logits, features

    def ensure_outputs(self) -> None:
        self.store.ensure(OUTPUTS, self.keys.outputs, self._compute_outputs)

    def _compute_outputs(self) -> None:
        key = self.keys.outputs
        labels = self.split.known_labels(self.data.labels)
        arrays = {}
        for subset in SUBSETS:
            index = self.split.indices[subset]
            if subset.startswith("out") and len(index) == 0:
                continue
            logits, features = self._infer(self.data.images[index])
            arrays |= {
                f"{subset}.logits": logits,
                f"{subset}.features": features,
                f"{subset}.labels": labels[index],
                f"{subset}.index": index,
            }
        put_outputs(
            self.store,
            key,
            arrays,
            {"describe": f"seed={self.seed} split outputs", "checkpoint": self.checkpoint},
        )

    def ensure_ood_outputs(self, ood: OODSetSpec) -> None:
        key = self.keys.outputs_of(ood.label)
        self.store.ensure(OOD_OUTPUTS, key, lambda: self._compute_ood_outputs(ood, key))

    def _compute_ood_outputs(self, ood: OODSetSpec, key: str) -> None:
        logits, features = self._infer(ood_images(ood, self.data.shape, self.streams))
        put_outputs(
            self.store,
            key,
            {
                "ood.logits": logits,
                "ood.features": features,
                "ood.labels": np.full(len(logits), -1, dtype=np.int64),
            },
            {"describe": f"seed={self.seed} {ood.label}", "checkpoint": self.checkpoint},
            kind=OOD_OUTPUTS,
        )

    def inputs(self, eval_set: EvalSet) -> Any:
        """Normalized input tensor of an evaluated subset (for model-based detectors)."""
        # imports torch: only when a model is built, trained or run
        from oodsim.models.tensors import to_tensor

        _, mean, std = self.model()
        if eval_set.entry[0] == OUTPUTS:
            images = self.data.images[self.split.indices[eval_set.prefix]]
        else:
            ood = next(o for o in self.spec.ood if o.label == eval_set.label)
            images = ood_images(ood, self.data.shape, self.streams)
        return to_tensor(images, mean, std, _device())


def subset_outputs(arrays: dict[str, np.ndarray], prefix: str) -> Outputs:
    return Outputs(
        logits=arrays[f"{prefix}.logits"],
        features=arrays[f"{prefix}.features"],
        labels=arrays[f"{prefix}.labels"],
    )


def simulation(
    spec: ExperimentSpec, seed: int, store: Store, parts: PartKeys | None = None
) -> Simulation:
    """Simulation ``seed`` of ``spec`` over ``store`` (``parts``: the spec's
    :class:`~oodsim.artifacts.keys.PartKeys`, hashed once for a run)."""
    return Simulation(spec, seed, store, simulation_keys(spec, seed, parts))


def trained_model(
    spec: ExperimentSpec, seed: int, store: Store
) -> tuple[Any, np.ndarray, np.ndarray, OpenSetSplit]:
    """The model of one simulation (trained and stored if missing), its input normalization
    (mean, std) and its split: for protocols that reuse open set training, e.g. severity."""
    sim = simulation(spec, seed, store)
    model, mean, std = sim.model()
    return model, mean, std, sim.split
