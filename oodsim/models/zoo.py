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
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import math
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import torch
from torch import nn

from oodsim.data.imagenet_classes import imagenet1k_wnids
from oodsim.data.ood_sets import conform
from oodsim.errors import DataNotFoundError, SpecError, UnknownNameError
from oodsim.keys import digest, key_fields, no_key
from oodsim.models.inference import infer_batches
from oodsim.models.tensors import to_tensor
from oodsim.specs import ExperimentSpec, KeyedSpec

VERSION = "1"  # bump when loading or the feature contract changes: it enters output keys
PREFIXES = ("timm", "torchvision", "trained")
INTERPOLATIONS = ("nearest", "bilinear", "bicubic")


# --------------------------------------------------------------------------- names


def split_name(name: str) -> tuple[str, str, str]:
    """``"timm:resnet50.a1_in1k"`` → ``("timm", "resnet50", "a1_in1k")``; tag may be ``""``."""
    prefix, sep, rest = str(name).partition(":")
    if prefix == "trained" and not rest:
        return "trained", "", ""
    if not sep or prefix not in PREFIXES or not rest:
        raise SpecError(
            "model", name, "'timm:<model>[.<tag>]', 'torchvision:<model>[.<weights>]' or 'trained'"
        )
    arch, _, tag = rest.partition(".")
    return prefix, arch, tag


@functools.cache
def _torchvision_names() -> tuple[str, ...]:
    # torchvision loads only for torchvision: names
    import torchvision.models as tvm

    return tuple(tvm.list_models(module=tvm))


def _unknown(field: str, value: str, known: Sequence[str], where: str) -> SpecError:
    """An unknown name in a registry too large to list: name the closest matches instead."""
    close = difflib.get_close_matches(value, known, n=3)
    hint = f"Did you mean {', '.join(map(repr, close))}?" if close else ""
    return SpecError(field, value, f"one of the {len(known)} names of {where}", hint)


def check_name(name: str) -> None:
    """Raise :class:`SpecError` (naming close matches) for a model no library knows."""
    prefix, arch, tag = split_name(name)
    if prefix == "timm":
        # timm is optional (the zoo extra): imported only for timm: names
        import timm

        if not timm.is_model(arch):
            raise _unknown("timm model", arch, timm.list_models(), "timm.list_models()")
        tags = [n.partition(".")[2] for n in timm.list_pretrained(f"{arch}.*")]
        if tag and tag not in tags:
            raise UnknownNameError(f"timm {arch} tag", tag, tags)
    elif prefix == "torchvision":
        if arch not in _torchvision_names():
            raise _unknown(
                "torchvision model", arch, _torchvision_names(), "torchvision.models.list_models()"
            )
        if tag:
            enum = _torchvision_weights_enum(arch)
            if tag not in enum.__members__:
                raise UnknownNameError(f"torchvision {arch} weights", tag, enum.__members__)


def _torchvision_weights_enum(arch: str) -> Any:
    # torchvision loads only for torchvision: names
    from torchvision.models import get_model_weights

    return get_model_weights(arch)


# --------------------------------------------------------------------------- spec


def _check_name(_: Any, attribute: attrs.Attribute, value: str) -> None:
    check_name(value)


def _positive(_: Any, attribute: attrs.Attribute, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise SpecError(attribute.name, value, "an integer >= 1")


def _seed(_: Any, attribute: attrs.Attribute, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise SpecError("models.seed", value, "an integer >= 0, or none to follow the run's seed")


@functools.lru_cache(maxsize=64)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            sha.update(block)
    return sha.hexdigest()


def file_digest(path: str | os.PathLike[str]) -> str:
    """sha256 of a weights file (remembered per path, size and mtime within a process)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataNotFoundError(f"weights file {path} does not exist")
    stat = path.stat()
    return _file_digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@attrs.frozen(kw_only=True)
class ModelRef(KeyedSpec):
    """Which classifier to load: a zoo name or the open set ``trained`` CNN.

    ``weights`` is a local file (its content, not its path, enters the key); ``image_size``
    overrides the input resolution (crop size); ``num_classes`` changes the head (random init
    or a fine-tuned file); ``init_seed`` seeds random weights. ``trained`` takes ``experiment``
    (an open set spec) and ``seed``: ``None`` (default) uses the model of the seed being run
    (a run with seeds 0..4 trains five CNNs), an integer pins one seed's model for every seed.
    Pretrained zoo models are the same for every seed.
    """

    TAG = "zoo_model"
    VERSION = "1"

    name: str = attrs.field(validator=_check_name)
    pretrained: bool = True
    weights: str | None = attrs.field(default=None, metadata=no_key())
    image_size: int | None = attrs.field(default=None, validator=_positive)
    num_classes: int | None = attrs.field(default=None, validator=_positive)
    init_seed: int = 0
    experiment: ExperimentSpec | None = None
    seed: int | None = attrs.field(default=None, validator=_seed)
    label: str = attrs.field(metadata=no_key())

    @label.default
    def _default_label(self) -> str:
        if self.prefix == "trained" and self.experiment is not None:
            pinned = "" if self.seed is None else f"@{self.seed}"
            return f"trained:{self.experiment.name}{pinned}"
        return self.name + ("" if self.pretrained or self.weights else "(random)")

    def __attrs_post_init__(self) -> None:
        if (self.prefix == "trained") != (self.experiment is not None):
            raise SpecError(
                f"models[{self.name}].experiment",
                None if self.experiment is None else self.experiment.name,
                "an open set experiment spec exactly when name = 'trained'",
            )
        if self.prefix == "trained" and (self.weights or self.image_size or self.num_classes):
            raise SpecError(
                f"models[{self.name}]", "weights/image_size/num_classes", "none for 'trained'"
            )
        if self.prefix != "trained" and self.seed is not None:
            raise SpecError(
                f"models[{self.name}].seed",
                self.seed,
                "no seed: only 'trained' models depend on a seed (pretrained ones are fixed)",
            )

    @property
    def prefix(self) -> str:
        return split_name(self.name)[0]

    @property
    def key(self) -> str:
        """Content key: the fields, plus the weights' identity (file digest or library tag)."""
        fields = key_fields(self)
        fields["weights"] = weights_identity(self)
        return digest(self.TAG, self.VERSION, fields)


def weights_identity(ref: ModelRef) -> str | None:
    """What determines the loaded weights: a file's sha256, a library tag, or None (random)."""
    if ref.weights:
        return "sha256:" + file_digest(ref.weights)
    if ref.prefix == "trained" or not ref.pretrained:
        return None
    prefix, arch, tag = split_name(ref.name)
    if prefix == "timm":
        # timm is optional (the zoo extra): imported only for timm: names
        from timm.models import get_pretrained_cfg

        cfg = get_pretrained_cfg(f"{arch}.{tag}" if tag else arch)
        return "timm:" + (cfg.hf_hub_id or cfg.url or f"{arch}.{cfg.tag}") if cfg else None
    enum = _torchvision_weights_enum(arch)
    return "torchvision:" + str(enum[tag] if tag else enum.DEFAULT)


# --------------------------------------------------------------------------- preprocessing


@attrs.frozen(kw_only=True, eq=False)
class Preprocessing:
    """From uint8 images to the normalized float tensors a model expects.

    ``kind="resize_crop"`` (zoo models): resize (an int = shorter side, keeping the aspect
    ratio; a pair = exact size), centre-crop to ``crop_size``, scale to [0, 1], normalize.
    ``kind="conform"`` (open set CNNs): :func:`oodsim.data.ood_sets.conform` to the training
    shape (bilinear, gray ↔ RGB), then the training normalization. ``pil_transform`` is the
    library's own PIL pipeline, used for image files so they match its evaluation exactly.
    """

    kind: str = attrs.field(validator=attrs.validators.in_(("resize_crop", "conform")))
    crop_size: tuple[int, int] = attrs.field(converter=lambda v: (int(v[0]), int(v[1])))
    resize_size: int | tuple[int, int] | None = None
    interpolation: str = attrs.field(
        default="bilinear", validator=attrs.validators.in_(INTERPOLATIONS)
    )
    mean: tuple[float, ...] = attrs.field(converter=lambda v: tuple(float(x) for x in v))
    std: tuple[float, ...] = attrs.field(converter=lambda v: tuple(float(x) for x in v))
    channels: int = 3
    pil_transform: Callable[[Any], Any] | None = None

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """(H, W, C) of the tensors the model sees."""
        return (*self.crop_size, self.channels)

    def describe(self) -> dict[str, Any]:
        """Plain-data form for meta data and docs."""
        return {
            "kind": self.kind,
            "crop_size": list(self.crop_size),
            "resize_size": self.resize_size,
            "interpolation": self.interpolation,
            "mean": list(self.mean),
            "std": list(self.std),
            "channels": self.channels,
        }

    def arrays(self, images: np.ndarray) -> torch.Tensor:
        """uint8 images (N, H, W, C) → float32 tensor (N, C, H', W'), normalized."""
        images = np.asarray(images)
        if images.ndim != 4 or images.dtype != np.uint8:
            raise ValueError(
                f"expected uint8 images (N, H, W, C), got {images.dtype} {images.shape}"
            )
        if self.kind == "conform":
            return to_tensor(conform(images, self.input_shape), self.mean, self.std)
        # torchvision loads only for zoo preprocessing
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as TF

        if images.shape[3] != self.channels:
            images = conform(images, (*images.shape[1:3], self.channels))
        tensor = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2)
        if self.resize_size is not None:
            size = (
                [self.resize_size] if isinstance(self.resize_size, int) else list(self.resize_size)
            )
            mode = InterpolationMode(self.interpolation)
            tensor = TF.resize(tensor, size, interpolation=mode, antialias=True)
        tensor = TF.center_crop(tensor, list(self.crop_size)).float().div_(255.0)
        mean = torch.tensor(self.mean).view(1, -1, 1, 1)
        std = torch.tensor(self.std).view(1, -1, 1, 1)
        return (tensor - mean) / std

    def image(self, image: Any) -> torch.Tensor:
        """One PIL image → float32 tensor (C, H, W), with the library's pipeline when known."""
        mode = "L" if self.channels == 1 else "RGB"
        image = image.convert(mode)
        if self.pil_transform is not None:
            return self.pil_transform(image)
        pixels = np.asarray(image, dtype=np.uint8)
        return self.arrays(pixels.reshape(1, *pixels.shape[:2], self.channels))[0]


def _timm_preprocessing(net: Any, image_size: int | None) -> Preprocessing:
    # timm is optional (the zoo extra): imported only for timm: names
    from timm.data import create_transform, resolve_data_config

    config = resolve_data_config({}, model=net)
    if image_size:
        config["input_size"] = (3, image_size, image_size)
    _, height, width = config["input_size"]
    crop_pct = config.get("crop_pct") or 1.0
    mode = config.get("crop_mode", "center")
    if height == width and mode == "center":
        resize: int | tuple[int, int] = math.floor(height / crop_pct)
    else:  # timm resizes both sides for non-square inputs and for "squash"
        resize = (math.floor(height / crop_pct), math.floor(width / crop_pct))
    if mode == "squash":
        resize = (height, width)
    interpolation = config.get("interpolation", "bilinear")
    return Preprocessing(
        kind="resize_crop",
        crop_size=(height, width),
        resize_size=resize,
        interpolation=interpolation if interpolation in INTERPOLATIONS else "bilinear",
        mean=config["mean"],
        std=config["std"],
        pil_transform=create_transform(**config),
    )


def _torchvision_preprocessing(weights: Any, image_size: int | None) -> Preprocessing:
    # torchvision loads only for torchvision: names
    from torchvision.transforms._presets import ImageClassification

    preset = weights.transforms()
    crop, resize = int(preset.crop_size[0]), int(preset.resize_size[0])
    if image_size:
        crop, resize = image_size, round(image_size * resize / crop)
        preset = ImageClassification(
            crop_size=crop,
            resize_size=resize,
            mean=preset.mean,
            std=preset.std,
            interpolation=preset.interpolation,
        )
    return Preprocessing(
        kind="resize_crop",
        crop_size=(crop, crop),
        resize_size=resize,
        interpolation=preset.interpolation.value,
        mean=preset.mean,
        std=preset.std,
        pil_transform=preset,
    )


# --------------------------------------------------------------------------- feature contract


class TimmFeatures(nn.Module):
    """A timm model: ``forward_features`` once, then the head with and without pre-logits."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def forward_with_features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.net.forward_features(x)
        features = self.net.forward_head(hidden, pre_logits=True).flatten(1)
        return self.net.forward_head(hidden), features


class SplitHead(nn.Module):
    """A torchvision model with its final linear layer taken out: ``classifier(body(x))``."""

    def __init__(self, body: nn.Module, classifier: nn.Linear) -> None:
        super().__init__()
        self.body, self.classifier = body, classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.body(x).flatten(1))

    def forward_with_features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.body(x).flatten(1)
        return self.classifier(features), features


def split_final_linear(net: nn.Module) -> nn.Module:
    """Replace a torchvision model's last ``nn.Linear`` by identity; return the split model."""
    linear = [(name, m) for name, m in net.named_modules() if isinstance(m, nn.Linear)]
    if not linear:
        raise SpecError("model", type(net).__name__, "a classifier whose last layer is nn.Linear")
    name, classifier = linear[-1]
    parent_name, _, child = name.rpartition(".")
    parent = net.get_submodule(parent_name) if parent_name else net
    parent._modules[child] = nn.Identity()
    return SplitHead(net, classifier)


# --------------------------------------------------------------------------- local weights


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, resolved from the environment at call time."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "huggingface" / "hub"


def torch_checkpoint_dir() -> Path:
    """torch hub's checkpoint folder (``$TORCH_HOME/hub/checkpoints``)."""
    return Path(torch.hub.get_dir()) / "checkpoints"


def _hf_cached(repo_id: str, filenames: Sequence[str]) -> tuple[Path | None, list[str]]:
    """A file of ``repo_id`` in the HF cache (no network), and the places looked at."""
    cache = hf_cache_dir()
    looked = [f"{cache}/models--{repo_id.replace('/', '--')}/snapshots/*/{f}" for f in filenames]
    try:
        # huggingface_hub is optional: without it the HF cache is not searched
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None, looked
    for filename in filenames:
        found = try_to_load_from_cache(repo_id, filename, cache_dir=cache)
        if isinstance(found, str) and Path(found).is_file():
            return Path(found), looked
    return None, looked


def find_timm_weights(arch: str, tag: str) -> tuple[Path | None, list[str]]:
    """Cached pretrained weights of a timm model: HF cache first, then torch hub checkpoints."""
    # timm is optional (the zoo extra): imported only for timm: names
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(f"{arch}.{tag}" if tag else arch)
    if cfg is None:
        raise DataNotFoundError(
            f"timm has no pretrained weights for {arch}{'.' + tag if tag else ''}"
        )
    looked: list[str] = []
    if cfg.hf_hub_id:
        names = [cfg.hf_hub_filename] if cfg.hf_hub_filename else []
        found, looked = _hf_cached(
            cfg.hf_hub_id, names or ["model.safetensors", "pytorch_model.bin"]
        )
        if found:
            return found, looked
    if cfg.url:
        path = torch_checkpoint_dir() / Path(cfg.url.split("?")[0]).name
        looked.append(str(path))
        if path.is_file():
            return path, looked
    return None, looked


def find_torchvision_weights(arch: str, tag: str) -> tuple[Any, Path | None, list[str]]:
    """(weights enum value, cached checkpoint or None, places looked at)."""
    enum = _torchvision_weights_enum(arch)
    weights = enum[tag] if tag else enum.DEFAULT
    path = torch_checkpoint_dir() / Path(weights.url.split("?")[0]).name
    return weights, (path if path.is_file() else None), [str(path)]


def missing_weights(name: str, looked: Sequence[str]) -> DataNotFoundError:
    """The error for pretrained weights that are not on disk, listing where oodsim looked."""
    return DataNotFoundError(
        f"no local pretrained weights for {name!r}; looked in: "
        + "; ".join(looked)
        + ". oodsim never downloads: fetch the weights on a machine with internet access (e.g. "
        "`timm.create_model(..., pretrained=True)` / torchvision `weights=`), copy the cache "
        "($TORCH_HOME, $HF_HOME) here, or pass weights=<file>; pretrained=false for random weights"
    )


# --------------------------------------------------------------------------- loading


@attrs.frozen(eq=False)
class LoadedModel:
    """A classifier in eval mode with ``forward_with_features``, and its preprocessing.

    Unpacks as ``model, preprocessing = load_model(...)``.
    """

    model: Any
    preprocessing: Preprocessing
    n_classes: int
    class_wnids: tuple[str, ...] | None
    source: str  # where the weights came from
    split: Any = None  # ``trained`` models: the open set split (OpenSetSplit) of its seed

    def __iter__(self) -> Iterator[Any]:
        return iter((self.model, self.preprocessing))


def _imagenet_wnids(n_classes: int) -> tuple[str, ...] | None:
    if n_classes != 1000:
        return None
    return imagenet1k_wnids()


def _state_dict(path: Path) -> dict[str, Any]:
    """A state dict from a .safetensors/.pth/.pt file, unwrapping common checkpoint layouts."""
    if path.suffix == ".safetensors":
        # safetensors is optional: needed only for .safetensors weights files
        from safetensors.torch import load_file

        return load_file(str(path))
    state = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("state_dict", "model", "model_state_dict"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    return {k.removeprefix("module."): v for k, v in state.items()}


@contextlib.contextmanager
def _weights_file(path: Path, arch: str) -> Iterator[None]:
    """Turn any failure to read ``path`` as ``arch``'s weights into one :class:`SpecError`: a
    file that is no checkpoint (``/etc/passwd``) used to end in ``IndexError: list index out
    of range`` deep inside torch or timm."""
    try:
        yield
    except (SpecError, DataNotFoundError):
        raise
    except Exception as error:  # torch, safetensors and timm raise many kinds on a bad file
        raise SpecError(
            "weights",
            str(path),
            f"a checkpoint of {arch} (a .pth, .pt or .safetensors state dict)",
            f"Reading it failed: {type(error).__name__}: {str(error)[:200]}",
        ) from error


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Random weights drawn from ``seed`` without touching the caller's global torch RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _load_timm(ref: ModelRef) -> LoadedModel:
    # timm is optional (the zoo extra): imported only for timm: names
    import timm

    _, arch, tag = split_name(ref.name)
    full = f"{arch}.{tag}" if tag else arch
    kwargs: dict[str, Any] = {}
    if ref.num_classes:
        kwargs["num_classes"] = ref.num_classes
    cfg = timm.models.get_pretrained_cfg(full)
    if ref.image_size and cfg is not None and cfg.fixed_input_size:
        kwargs["img_size"] = ref.image_size
    source = "random init"
    file = Path(ref.weights).expanduser() if ref.weights else None
    if file is None and ref.pretrained:
        file, looked = find_timm_weights(arch, tag)
        if file is None:
            raise missing_weights(ref.name, looked)
    with _seeded(ref.init_seed):
        if file is not None:
            if not file.is_file():
                raise DataNotFoundError(f"weights file {file} does not exist")
            with _weights_file(file, full):
                net = timm.create_model(
                    full, pretrained=True, pretrained_cfg_overlay={"file": str(file)}, **kwargs
                )
            source = str(file)
        else:
            net = timm.create_model(full, pretrained=False, **kwargs)
    net.eval()
    preprocessing = _timm_preprocessing(net, ref.image_size)
    return LoadedModel(
        TimmFeatures(net).eval(),
        preprocessing,
        net.num_classes,
        _imagenet_wnids(net.num_classes),
        source,
    )


def _load_torchvision(ref: ModelRef) -> LoadedModel:
    # torchvision loads only for torchvision: names
    from torchvision.models import get_model

    _, arch, tag = split_name(ref.name)
    weights, cached, looked = find_torchvision_weights(arch, tag)
    source = "random init"
    with _seeded(ref.init_seed):
        if ref.weights:
            path = Path(ref.weights).expanduser()
            if not path.is_file():
                raise DataNotFoundError(f"weights file {path} does not exist")
            with _weights_file(path, arch):
                state = _state_dict(path)
                net = get_model(arch, weights=None, num_classes=ref.num_classes or 1000)
                last = [n for n, m in net.named_modules() if isinstance(m, nn.Linear)][-1]
                rows = state.get(f"{last}.weight")
                if rows is not None and rows.shape[0] != (ref.num_classes or 1000):
                    net = get_model(arch, weights=None, num_classes=int(rows.shape[0]))
                net.load_state_dict(state)
            source = str(path)
        elif ref.pretrained:
            if cached is None:
                raise missing_weights(ref.name, looked)
            if ref.num_classes and ref.num_classes != len(weights.meta["categories"]):
                raise SpecError(
                    "num_classes", ref.num_classes, "the weights' classes, or pretrained = false"
                )
            net = get_model(arch, weights=weights)  # the file is cached: torchvision reads it
            source = str(cached)
        else:
            net = get_model(arch, weights=None, num_classes=ref.num_classes or 1000)
    split = split_final_linear(net.eval()).eval()
    n_classes = split.classifier.out_features
    return LoadedModel(
        split,
        _torchvision_preprocessing(weights, ref.image_size),
        n_classes,
        _imagenet_wnids(n_classes),
        source,
    )


def load_model(ref: ModelRef | str, **options: Any) -> LoadedModel:
    """Load a zoo classifier and its preprocessing; ``options`` are :class:`ModelRef` fields.

    Raises :class:`~oodsim.errors.DataNotFoundError` when pretrained weights are not on disk.
    ``trained`` CNNs belong to one seed of an open set experiment: the severity protocol loads
    them (:func:`oodsim.protocols.severity.compute.load_model`).
    """
    if not isinstance(ref, ModelRef):
        ref = ModelRef(name=ref, **options)
    elif options:
        ref = attrs.evolve(ref, **options)
    loader = {"timm": _load_timm, "torchvision": _load_torchvision}.get(ref.prefix)
    if loader is None:
        raise SpecError(
            "model",
            ref.name,
            "a timm: or torchvision: name",
            "a 'trained' CNN belongs to one seed of its open set experiment: load it with "
            "oodsim.protocols.severity.compute.load_model(ref, seed, store)",
        )
    loaded = loader(ref)
    loaded.model.eval()
    return loaded


def create_model(
    name: str, *, pretrained: bool = True, **options: Any
) -> tuple[Any, Preprocessing]:
    """``(model, preprocessing)`` for a ``timm:``/``torchvision:`` name (see :func:`load_model`)."""
    loaded = load_model(ModelRef(name=name, pretrained=pretrained, **options))
    return loaded.model, loaded.preprocessing


def infer_tensors(
    model: nn.Module, batches: Iterator[torch.Tensor], device: str = "cpu"
) -> tuple[np.ndarray, np.ndarray]:
    """(logits, features) float32 for preprocessed batches (the one inference loop of
    :func:`oodsim.models.inference.infer_batches`); empty input gives (0, 0) arrays."""
    logits, features = infer_batches(model, batches, device)
    if not logits:
        return np.zeros((0, 0), np.float32), np.zeros((0, 0), np.float32)
    return np.concatenate(logits), np.concatenate(features)


def array_batches(
    images: np.ndarray, preprocessing: Preprocessing, batch_size: int = 256
) -> Iterator[torch.Tensor]:
    """Preprocessed batches of uint8 images (N, H, W, C) held in memory."""
    for start in range(0, len(images), batch_size):
        yield preprocessing.arrays(images[start : start + batch_size])


def file_batches(
    files: Sequence[str | os.PathLike[str]], preprocessing: Preprocessing, batch_size: int = 64
) -> Iterator[torch.Tensor]:
    """Preprocessed batches of image files, each read with the model's own PIL pipeline."""
    # PIL loads only when image files are read
    from PIL import Image, UnidentifiedImageError

    for start in range(0, len(files), batch_size):
        tensors = []
        for path in files[start : start + batch_size]:
            try:
                with Image.open(path) as image:
                    tensors.append(preprocessing.image(image))
            except (UnidentifiedImageError, OSError) as error:
                raise DataNotFoundError(f"cannot read image {path}: {error}") from None
        yield torch.stack(tensors)
