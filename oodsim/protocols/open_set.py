"""The open set protocol: split, train (or load), infer (or load), score every detector.

One seed is one simulation. :data:`PROTOCOL` plans one task per seed (:func:`compute_seed`,
run on a Dask worker by the engine), which consults the store for every artifact first and
computes only what is missing:

- ``checkpoint``: trained weights + input normalization, per (dataset, split, model, training,
  training streams);
- ``outputs``: logits, features, labels and sample indices of every subset of the split;
- ``ood_outputs``: the same for each extra OOD test set (another dataset, noise);
- ``kappa``: κ of a model-based detector (ODIN, MC dropout) on one evaluated subset.

Scoring (:meth:`OpenSetProtocol.score`) reads these entries; logit/feature detectors are cheap
and never cached, so adding one to a finished experiment reads the cached arrays only.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from oodsim.data.ood_sets import ood_images
from oodsim.data.registry import ImageData, dataset_info, load_dataset
from oodsim.data.splits import SUBSETS, OpenSetSplit, make_split, split_classes
from oodsim.detectors import confidence, get_detector
from oodsim.errors import SpecError
from oodsim.keys import digest
from oodsim.metrics import NonFiniteScoreError, evaluate
from oodsim.models import versions
from oodsim.models.architectures import BUILTINS
from oodsim.models.registry import get_architecture
from oodsim.outputs import Outputs
from oodsim.protocols.base import Protocol, SeedFailed, Task, checked_kappa, stored
from oodsim.protocols.degenerate import PREFIX as DEGENERATE
from oodsim.protocols.degenerate import degenerate_reason
from oodsim.protocols.tuning import choose
from oodsim.results import NO_SEVERITY, Layout, SeedResult, design_coord
from oodsim.seeds import TRAINING_STREAMS, SeedStreams
from oodsim.specs import DetectorSpec, ExperimentSpec, OODSetSpec, spec_from_dict
from oodsim.specs.params import is_grid
from oodsim.store import Store

CHECKPOINT = "checkpoint"
OUTPUTS = "outputs"
OOD_OUTPUTS = "ood_outputs"
KAPPA = "kappa"
HELD_OUT = "held_out"


class SimulationFailed(SeedFailed):
    """A seed that cannot produce scores (diverged training, non-finite outputs)."""


# --------------------------------------------------------------------------- keys


def checkpoint_key(spec: ExperimentSpec, streams: SeedStreams) -> str:
    return digest(
        CHECKPOINT,
        f"{versions.TRAINING}/{get_architecture(spec.model.arch).version}",
        {
            "dataset": spec.dataset.key,
            "split": spec.split.key,
            "model": spec.model.key,
            "training": spec.training.key,
            "streams": streams.entropies(TRAINING_STREAMS),
        },
    )


def outputs_key(checkpoint: str) -> str:
    return digest(OUTPUTS, versions.INFERENCE, {"checkpoint": checkpoint})


def ood_outputs_key(checkpoint: str, ood: OODSetSpec, streams: SeedStreams) -> str:
    return digest(
        OOD_OUTPUTS,
        versions.INFERENCE,
        {"checkpoint": checkpoint, "ood": ood.key, "ood_sampling": streams.entropy("ood_sampling")},
    )


def kappa_key(source: str, subset: str, detector: DetectorSpec, streams: SeedStreams) -> str:
    return digest(
        KAPPA,
        detector.version,
        {
            "source": source,
            "subset": subset,
            "detector": detector.key,
            "inference": streams.entropy("inference"),
        },
    )


def _needs_model(detector: DetectorSpec) -> bool:
    return "model" in get_detector(detector.name).needs


@attrs.frozen
class EvalSet:
    """A set of test samples scored against in-distribution test samples."""

    label: str
    entry: tuple[str, str]  # (kind, key) of the store entry holding its outputs
    prefix: str  # array name prefix inside that entry


def eval_sets(spec: ExperimentSpec, streams: SeedStreams, checkpoint: str) -> list[EvalSet]:
    """The in-distribution test set first, then each OOD test set of the spec."""
    split_entry = (OUTPUTS, outputs_key(checkpoint))
    sets = [EvalSet("in_test", split_entry, "in_test")]
    for ood in spec.ood:
        if ood.kind == HELD_OUT:
            sets.append(EvalSet(ood.label, split_entry, "out_test"))
        else:
            sets.append(
                EvalSet(ood.label, (OOD_OUTPUTS, ood_outputs_key(checkpoint, ood, streams)), "ood")
            )
    return sets


def entries(spec: ExperimentSpec, seed: int) -> list[tuple[str, str]]:
    """Every (kind, key) a finished simulation of ``seed`` has in the store (checkpoint first)."""
    streams = spec.seeds.streams(seed)
    checkpoint = checkpoint_key(spec, streams)
    needed = [(CHECKPOINT, checkpoint)]
    sets = eval_sets(spec, streams, checkpoint)
    needed += sorted({s.entry for s in sets})
    for detector in spec.detectors:
        if _needs_model(detector):
            needed += [(KAPPA, kappa_key(s.entry[1], s.prefix, detector, streams)) for s in sets]
    return needed


# --------------------------------------------------------------------------- compute


def _device() -> str:
    # imports torch: only when a model is built, trained or run
    from oodsim.models.tensors import device

    return device()


@attrs.define
class _Simulation:
    """Lazily loaded state of one simulation; each piece is read or computed at most once."""

    spec: ExperimentSpec
    seed: int
    store: Store
    streams: SeedStreams
    checkpoint: str
    _data: ImageData | None = None
    _split: OpenSetSplit | None = None
    _model: Any = None
    _norm: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def data(self) -> ImageData:
        if self._data is None:
            ds = self.spec.dataset
            self._data = load_dataset(ds.name, ds.root, ds.download, ds.image_size)
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

    def _train(self) -> None:
        # imports torch: only when a model is built, trained or run
        from oodsim.models.tensors import channel_stats
        from oodsim.models.training import TrainingDiverged, train

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
        self.store.ensure(OUTPUTS, outputs_key(self.checkpoint), self._compute_outputs)

    def _compute_outputs(self) -> None:
        key = outputs_key(self.checkpoint)
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
        self.store.put(
            OUTPUTS,
            key,
            arrays,
            {"describe": f"seed={self.seed} split outputs", "checkpoint": self.checkpoint},
        )

    def ensure_ood_outputs(self, ood: OODSetSpec) -> None:
        key = ood_outputs_key(self.checkpoint, ood, self.streams)
        self.store.ensure(OOD_OUTPUTS, key, lambda: self._compute_ood_outputs(ood, key))

    def _compute_ood_outputs(self, ood: OODSetSpec, key: str) -> None:
        logits, features = self._infer(ood_images(ood, self.data.shape, self.streams))
        self.store.put(
            OOD_OUTPUTS,
            key,
            {
                "ood.logits": logits,
                "ood.features": features,
                "ood.labels": np.full(len(logits), -1, dtype=np.int64),
            },
            {"describe": f"seed={self.seed} {ood.label}", "checkpoint": self.checkpoint},
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


def _outputs(arrays: dict[str, np.ndarray], prefix: str) -> Outputs:
    return Outputs(
        logits=arrays[f"{prefix}.logits"],
        features=arrays[f"{prefix}.features"],
        labels=arrays[f"{prefix}.labels"],
    )


def class_split_label(spec: ExperimentSpec, seed: int) -> str:
    """The known classes of a seed, e.g. "0-3-5-7-8-9": drawn again from its ``class_split``
    stream (milliseconds), never read from a stored record that could have been altered."""
    info = dataset_info(spec.dataset.name)
    n_classes = info.n_classes
    if n_classes is None:  # a folder of classes: as many as the data has
        ds = spec.dataset
        n_classes = load_dataset(ds.name, ds.root, ds.download, ds.image_size).n_classes
    streams = spec.seeds.streams(seed)
    return split_classes(n_classes, spec.split, streams).label


def compute_seed(spec: ExperimentSpec, seed: int, store: Store) -> None:
    """The task of one simulation: train (or load) its model and store every missing output
    and model-based κ of :func:`entries` (run on a Dask worker by the engine)."""
    sim = _simulation(spec, seed, store)
    missing = [entry for entry in entries(spec, seed) if not store.has(*entry)]
    if any(kind != KAPPA for kind, _ in missing):
        if not store.has(CHECKPOINT, sim.checkpoint):
            sim.model()
        sim.ensure_outputs()
        for ood in spec.ood:
            if ood.kind != HELD_OUT:
                sim.ensure_ood_outputs(ood)
    model_based = [d for d in spec.detectors if _needs_model(d)]
    if any(kind == KAPPA for kind, _ in missing) and model_based:
        prepared = _Prepared.load(spec, sim)
        for detector in model_based:
            checked_kappa(detector.label, sim.seed, partial(prepared.kappa, sim, detector))


def _simulation(spec: ExperimentSpec, seed: int, store: Store) -> _Simulation:
    streams = spec.seeds.streams(seed)
    return _Simulation(spec, seed, store, streams, checkpoint_key(spec, streams))


# --------------------------------------------------------------------------- scoring


def _model_kappa(
    sim: _Simulation,
    detector: DetectorSpec,
    eval_set: EvalSet,
    fit: Outputs | None,
    outputs: Outputs,
    choose_params: Callable[[], dict[str, Any]],
) -> np.ndarray:
    """κ of a model-based detector on one subset: cached, else computed and stored."""
    key = kappa_key(eval_set.entry[1], eval_set.prefix, detector, sim.streams)

    def compute() -> None:
        model, _, _ = sim.model()
        params = choose_params()
        kappa = confidence(
            detector.name, outputs, fit=fit, model=model, inputs=sim.inputs(eval_set), **params
        )
        sim.store.put(
            KAPPA,
            key,
            {"kappa": np.asarray(kappa, dtype=np.float64)},
            {"describe": f"seed={sim.seed} {detector.label} on {eval_set.label}"},
        )

    for _ in range(2):  # a corrupt entry is dropped on read and computed once more
        sim.store.ensure(KAPPA, key, compute)
        entry = sim.store.get(KAPPA, key)
        if entry is not None:
            return entry.arrays["kappa"]
    raise SimulationFailed(f"κ of {detector.label} on {eval_set.label} could not be stored")


def _model_params(
    sim: _Simulation,
    detector: DetectorSpec,
    fit: Outputs | None,
    split_arrays: dict[str, np.ndarray],
) -> dict[str, Any]:
    """A model-based detector's parameters: its seed from the ``inference`` stream, and grids
    chosen on D_in_val vs D_out_val (see :mod:`oodsim.protocols.tuning`)."""
    params = detector.kwargs
    if "seed" in get_detector(detector.name).defaults:
        params.setdefault("seed", sim.streams.torch_seed("inference"))
    if not is_grid(params):
        return params
    sets = [
        EvalSet(prefix, (OUTPUTS, outputs_key(sim.checkpoint)), prefix)
        for prefix in ("in_val", "out_val")
    ]

    def kappa_of(candidate: dict[str, Any]) -> np.ndarray:
        model, _, _ = sim.model()
        return np.concatenate(
            [
                confidence(
                    detector.name,
                    _outputs(split_arrays, s.prefix),
                    fit=fit,
                    model=model,
                    inputs=sim.inputs(s),
                    **candidate,
                )
                for s in sets
            ]
        )

    return choose(params, kappa_of, _validation_is_ood(split_arrays))


def _logit_params(
    detector: DetectorSpec, fit: Outputs | None, split_arrays: dict[str, np.ndarray]
) -> dict[str, Any]:
    """A logit/feature detector's parameters, grids chosen on D_in_val vs D_out_val."""
    if not is_grid(detector.kwargs):
        return detector.kwargs
    validation = Outputs.concat(
        [_outputs(split_arrays, "in_val"), _outputs(split_arrays, "out_val")]
    )
    return choose(
        detector.kwargs,
        lambda candidate: confidence(detector.name, validation, fit=fit, **candidate),
        _validation_is_ood(split_arrays),
    )


def _validation_is_ood(split_arrays: dict[str, np.ndarray]) -> np.ndarray:
    n_in, n_out = len(split_arrays["in_val.labels"]), len(split_arrays["out_val.labels"])
    return np.r_[np.zeros(n_in, bool), np.ones(n_out, bool)]


@attrs.frozen(eq=False)
class _Prepared:
    """The cached outputs one seed is scored from: evaluated sets, fit splits, validation."""

    sets: list[EvalSet]
    outputs: list[Outputs]
    pooled: Outputs
    fits: dict[str, Outputs]
    split_arrays: dict[str, np.ndarray]

    @classmethod
    def load(cls, spec: ExperimentSpec, sim: _Simulation) -> _Prepared:
        sets = eval_sets(spec, sim.streams, sim.checkpoint)
        found = {
            entry: stored(sim.store, *entry, f"outputs of seed {sim.seed}").arrays
            for entry in sorted({s.entry for s in sets})
        }
        split_arrays = found[(OUTPUTS, outputs_key(sim.checkpoint))]
        outputs = [_outputs(found[s.entry], s.prefix) for s in sets]
        fits = {
            "train": _outputs(split_arrays, "in_train"),
            "val": _outputs(split_arrays, "in_val"),
        }
        return cls(sets, outputs, Outputs.concat(outputs), fits, split_arrays)

    def kappa(self, sim: _Simulation, detector: DetectorSpec) -> tuple[np.ndarray, dict]:
        """κ of one detector on the ID test set followed by every OOD test set, and the
        parameters it was scored with (grid choices, fitted values such as temperature
        scaling's T); a detector with a fit split is fitted once and applied to all of them."""
        info = get_detector(detector.name)
        fit = self.fits.get(info.fit_on) if info.fit_on else None
        if "model" in info.needs:
            params = functools.cache(partial(_model_params, sim, detector, fit, self.split_arrays))
            kappa = np.concatenate(
                [
                    _model_kappa(sim, detector, s, fit, o, params)
                    for s, o in zip(self.sets, self.outputs)
                ]
            )
            used = params()
        else:
            used = info.fitted(fit, _logit_params(detector, fit, self.split_arrays))
            kappa = confidence(detector.name, self.pooled, fit=fit, **used)
        return np.asarray(kappa, dtype=np.float64), used

    @property
    def id_test(self) -> Outputs:
        return self.outputs[0]


@attrs.frozen(eq=False)
class _Scored:
    """What scoring one simulation gives: metric values, the degenerate-training verdict and
    the parameters every detector was scored with."""

    score: np.ndarray  # (method, metric, ood)
    degenerate: str  # "" or why the classifier is not above chance
    params: list[str]  # JSON per method


def score(spec: ExperimentSpec, sim: _Simulation) -> _Scored:
    """Metric values of shape (method, metric, ood) from cached outputs, and per-seed facts.

    Every κ metric of a test set is computed in one :func:`oodsim.metrics.evaluate` call on
    the ID test samples followed by that set's OOD samples (``correct``: whether the classifier
    got each ID sample right, for OSCR and AURC); the degenerate verdict is taken on the
    validation split, never on the test samples the metrics use."""
    prepared = _Prepared.load(spec, sim)
    scored = [
        checked_kappa(d.label, sim.seed, partial(prepared.kappa, sim, d)) for d in spec.detectors
    ]
    kappa = np.stack([k for k, _ in scored])  # (method, samples)
    sizes = np.cumsum([0] + [len(o) for o in prepared.outputs])
    id_part = slice(sizes[0], sizes[1])
    predicted = prepared.id_test.logits.argmax(axis=1)
    correct = predicted == prepared.id_test.labels
    kappa_metrics = [m for m in spec.metrics if m != "accuracy"]
    result = np.empty((len(spec.detectors), len(spec.metrics), len(spec.ood)))
    for j in range(len(spec.ood)):
        ood_part = slice(sizes[j + 1], sizes[j + 2])
        both = np.concatenate([kappa[:, id_part], kappa[:, ood_part]], axis=1)
        n_ood = ood_part.stop - ood_part.start
        is_ood = np.r_[np.zeros(correct.size, bool), np.ones(n_ood, bool)]
        try:
            values = kappa_metrics and evaluate(
                both, is_ood, kappa_metrics, correct=np.r_[correct, np.ones(n_ood, bool)]
            )
        except NonFiniteScoreError as error:
            bad = [d.label for d, k in zip(spec.detectors, both) if not np.isfinite(k).all()]
            raise SimulationFailed(
                f"detector {', '.join(bad)} gave non-finite κ on seed {sim.seed}: {error}"
            ) from None
        for m, metric in enumerate(spec.metrics):
            result[:, m, j] = float(correct.mean()) if metric == "accuracy" else values[metric]
    val_predicted = prepared.split_arrays["in_val.logits"].argmax(axis=1)
    return _Scored(
        result,
        degenerate_reason(
            val_predicted, prepared.split_arrays["in_val.labels"], spec.degenerate.alpha
        ),
        [json.dumps(used, sort_keys=True, default=_plain) for _, used in scored],
    )


def _plain(value: Any) -> Any:
    """JSON form of a parameter value numpy or a detector handed over (e.g. ``np.float64``)."""
    return value.item() if isinstance(value, np.generic) else str(value)


def trained_model(
    spec: ExperimentSpec, seed: int, store: Store
) -> tuple[Any, np.ndarray, np.ndarray, OpenSetSplit]:
    """The model of one simulation (trained and stored if missing), its input normalization
    (mean, std) and its split: for protocols that reuse open set training, e.g. severity."""
    sim = _simulation(spec, seed, store)
    model, mean, std = sim.model()
    return model, mean, std, sim.split


# --------------------------------------------------------------------------- the plug-in


def _check_sample_split(spec: ExperimentSpec, data: Any) -> None:
    """Build the first seed's split here (labels only, milliseconds): a sample split that
    leaves a subset every seed needs empty (e.g. ``max_per_class = 1``) fails before any
    training instead of failing every seed on the cluster."""
    seed = spec.seeds.all()[0]
    streams = spec.seeds.streams(seed)
    split = make_split(data.labels, data.n_classes, spec.split, streams, spec.dataset.max_per_class)
    needed = ["in_train", "in_val", "in_test"]
    needed += ["out_test"] if any(o.kind == HELD_OUT for o in spec.ood) else []
    empty = [subset for subset in needed if len(split.indices[subset]) == 0]
    if empty:
        raise SpecError(
            "split",
            f"fractions={list(spec.split.fractions)}, "
            f"dataset.max_per_class={spec.dataset.max_per_class}",
            "a sample split that leaves samples in every subset",
            f"Seed {seed} gets no samples in {', '.join(empty)}; raise max_per_class or the "
            "smallest fraction",
        )


def _check_architecture(spec: ExperimentSpec, data: Any, store: Store) -> None:
    """Build the first seed's model here and run two blank images through it: a builder
    that fails, or a model that breaks the classifier contract, is one clear error before
    any training instead of a failure of every seed on the cluster. Skipped for a built-in
    architecture with its default parameters (the tests check their contract, and the driver
    then needs no torch) and when that seed's checkpoint is stored: this architecture has
    trained already (a cached run builds none)."""
    if spec.model.arch in BUILTINS and not spec.model.params:
        return
    seed = spec.seeds.all()[0]
    if store.has(CHECKPOINT, checkpoint_key(spec, spec.seeds.streams(seed))):
        return
    # imports torch: only when a model is built, trained or run
    from oodsim.models.architectures import build_model, check_contract

    height, width, channels = data.shape
    n_known = spec.split.n_known or len(spec.split.known_classes[0])
    model = build_model(
        spec.model.arch,
        in_channels=channels,
        n_classes=n_known,
        image_size=height,
        dropout=spec.model.dropout,
        width=spec.model.width,
        init_seed=0,
        params=spec.model.kwargs,
    )
    check_contract(model, spec.model.arch, (channels, height, width), n_known)


class OpenSetProtocol(Protocol):
    """Open set simulations (the randomness study): one seed is one simulation."""

    name = "open_set"
    spec_type = ExperimentSpec
    unit = "simulations"

    def from_data(self, data: Mapping[str, Any], base: Path | None) -> ExperimentSpec:
        return spec_from_dict(data)

    def preflight(self, spec: ExperimentSpec, store: Store) -> None:
        """Data present and consistent, cache writable. The data is checked first (reading
        only), so bad input leaves the cache directory untouched."""
        for dataset in [spec.dataset] + [o.dataset for o in spec.ood if o.dataset is not None]:
            data = load_dataset(dataset.name, dataset.root, dataset.download, dataset.image_size)
            if dataset is spec.dataset:
                if spec.split.n_classes_needed() > data.n_classes:
                    raise SpecError(
                        "split",
                        spec.split.n_classes_needed(),
                        f"at most {data.n_classes} classes (found in {dataset.root})",
                    )
                _check_sample_split(spec, data)
                _check_architecture(spec, data, store)
        store.ensure_writable()

    def plan(self, spec: ExperimentSpec, seed: int) -> list[Task]:
        needed = entries(spec, seed)
        return [
            Task(
                key=digest("simulation", "1", {"spec": spec.key, "seed": seed}),
                entries=tuple(needed),
                compute=partial(compute_seed, spec, seed),
                verify=(needed[0],),  # the checkpoint: scoring never reads it
                label=f"simulation {seed}",
            )
        ]

    def score(self, spec: ExperimentSpec, seed: int, store: Store) -> SeedResult:
        sim = _simulation(spec, seed, store)
        scored = score(spec, sim)
        scores = scored.score[:, :, None, :]  # severity axis
        variables = {
            "score": scores if spec.varies_ood else scores[..., 0],
            "degenerate": np.array(scored.degenerate),
            "detector_params": np.array(scored.params),
        }
        excluded = scored.degenerate and not spec.degenerate.keep
        return SeedResult(
            seed,
            variables,
            self.seed_coords(spec, seed, store),
            failure=DEGENERATE + scored.degenerate if excluded else "",
        )

    def seed_coords(self, spec: ExperimentSpec, seed: int, store: Store) -> dict[str, Any]:
        """The seed's class split and, under ``[seeds.design]``, the level of each designed
        stream (``stream_<name>``, an integer: the grid the variance components fit)."""
        levels = spec.seeds.design_levels(seed)
        return {"class_split": class_split_label(spec, seed)} | {
            design_coord(stream): level for stream, level in levels.items()
        }

    def layout(self, spec: ExperimentSpec) -> Layout:
        coords: dict[str, list[str]] = {
            "method": [d.label for d in spec.detectors],
            "metric": list(spec.metrics),
            "severity": [NO_SEVERITY],
        }
        dims = ("method", "metric", "severity")
        if spec.varies_ood:
            coords["ood"] = [o.label for o in spec.ood]
            dims += ("ood",)
        variables = {"score": dims, "degenerate": (), "detector_params": ("method",)}
        designed = tuple(design_coord(stream) for stream, _ in spec.seeds.designed_streams())
        return Layout(coords, variables, seed_coords=("class_split", *designed))

    def dataset_names(self, spec: ExperimentSpec) -> list[str]:
        return [spec.dataset.name] + [o.dataset.name for o in spec.ood if o.dataset is not None]

    def architecture_names(self, spec: ExperimentSpec) -> list[str]:
        return [spec.model.arch]


PROTOCOL = OpenSetProtocol()
