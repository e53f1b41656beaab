"""Zoo model names (``timm:<model>[.<tag>]``, ``torchvision:<model>[.<weights>]``,
``trained``), checked against what timm and torchvision know, and :class:`ModelRef`, a model of a
spec keyed by its name and the identity of its weights."""

from __future__ import annotations

import difflib
import functools
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from oodsim.errors import DataNotFoundError, SpecError, UnknownNameError
from oodsim.keys import digest, key_fields, no_key
from oodsim.specs import ExperimentSpec, KeyedSpec
from oodsim.specs.types import register_table
from oodsim.zoo.known import known_names

VERSION = "1"  # bump when loading or the feature contract changes: it enters output keys


PREFIXES = ("timm", "torchvision", "trained")


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


def _unknown(field: str, value: str, known: Sequence[str], where: str) -> SpecError:
    """An unknown name in a registry too large to list: name the closest matches instead."""
    close = difflib.get_close_matches(value, known, n=3)
    hint = f"Did you mean {', '.join(map(repr, close))}?" if close else ""
    return SpecError(field, value, f"one of the {len(known)} names of {where}", hint)


#: where the names of each library come from, as a spec error says it
_LISTED_BY = {"timm": "timm.list_models()", "torchvision": "torchvision.models.list_models()"}
#: what a model's tag is called in each library
_TAG_NOUN = {"timm": "tag", "torchvision": "weights"}


def check_name(name: str) -> None:
    """Raise :class:`SpecError` (naming close matches) for a model no library knows. The
    libraries' names are read from a record of their installed versions where one exists
    (:mod:`oodsim.zoo.known`): checking a spec need not import torch."""
    prefix, arch, tag = split_name(name)
    if prefix == "trained":
        return
    known = known_names(prefix)
    if arch not in known.tags:
        raise _unknown(f"{prefix} model", arch, known.listed, _LISTED_BY[prefix])
    if tag and tag not in known.tags[arch]:
        raise UnknownNameError(f"{prefix} {arch} {_TAG_NOUN[prefix]}", tag, known.tags[arch])


def torchvision_weights_enum(arch: str) -> Any:
    # torchvision loads only for torchvision: names
    from torchvision.models import get_model_weights

    return get_model_weights(arch)


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
        if self.weights:
            # torch loads only for a model with a weights file (names are checked without it)
            from oodsim.zoo.checkpoint_files import check_weights_file

            check_weights_file(self.weights, self.name)
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
    enum = torchvision_weights_enum(arch)
    return "torchvision:" + str(enum[tag] if tag else enum.DEFAULT)


def model_refs(value: Any) -> Any:
    """A spec's ``models``: each a :class:`ModelRef`, a bare name standing for one."""
    if not isinstance(value, list | tuple):
        return value
    return tuple(ModelRef(name=v) if isinstance(v, str) else v for v in value)


register_table(ModelRef, shorthand="name", nouns=("a model (a name or a table)", "models"))
