"""ImageNet class lists and the WordNet filter that turns ImageNet-21k into C-OOD classes.

The filter follows the C-OOD severity benchmark (Galil, Dabbah, El-Yaniv): drop the ID classes,
their hypernyms and hyponyms (transitive), classes that are a part/member/substance of an ID
class or the other way round, classes sharing a name with an ID class, optional user-listed
biological and man-made look-alikes, and classes with too few images.
"""

from __future__ import annotations

import csv
import importlib.util
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

from oodsim.data.wordnet import WordNet, load_wordnet, wnid_to_offset
from oodsim.errors import DataNotFoundError, SpecError
from oodsim.store.fs import write_replacing

REASON_KINDS = (
    "id_class",
    "hypernym_of_id",
    "hyponym_of_id",
    "part_whole",
    "shared_lemma",
    "user_biological",
    "user_manmade",
    "too_few_samples",
)
"""Exclusion reasons in order of precedence: a class gets the first one that applies."""

_TIMM_LISTS = {
    "imagenet1k": "imagenet_synsets.txt",
    "imagenet21k": "imagenet21k_goog_synsets.txt",
}


def read_wnid_list(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """Read a file with one wnid a line (blank lines and ``#`` comments skipped), validated."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"wnid list not found: {path}")
    wnids = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            wnid_to_offset(line)  # validates the spelling
            wnids.append(line)
    return tuple(wnids)


@cache
def _timm_list(name: str) -> tuple[str, ...]:
    """Read a list from ``timm/data/_info`` without importing timm (which imports torch)."""
    filename = _TIMM_LISTS[name]
    spec = importlib.util.find_spec("timm")
    if spec is None:
        raise DataNotFoundError(
            f"the {name} class list ships with timm, which is not installed; "
            "install it with `pip install oodsim[zoo]` (or `pip install timm`)"
        )
    for location in spec.submodule_search_locations or ():
        path = Path(location) / "data" / "_info" / filename
        if path.is_file():
            return read_wnid_list(path)
    resource = resources.files("timm.data") / "_info" / filename  # e.g. a zipped install
    if not resource.is_file():
        raise DataNotFoundError(
            f"timm {getattr(spec, 'origin', '')} has no data/_info/{filename}; "
            "upgrade it with `pip install -U 'timm>=0.9'`"
        )
    with resources.as_file(resource) as path:
        return read_wnid_list(path)


def imagenet1k_wnids() -> tuple[str, ...]:
    """The 1,000 ImageNet-1k wnids in sorted order (the usual class-index order)."""
    return _timm_list("imagenet1k")


def imagenet21k_wnids() -> tuple[str, ...]:
    """The 21,843 ImageNet-21k (fall 2011, Google) wnids, in timm's order."""
    return _timm_list("imagenet21k")


def imagenet_o_wnids(path: str | os.PathLike[str] | None = None) -> tuple[str, ...]:
    """The 200 ImageNet-1k classes ImageNet-O is evaluated over, sorted.

    ``path`` defaults to the copy bundled with oodsim (``oodsim/data/imagenet_o_wnids.txt``).
    """
    if path is None:
        with resources.as_file(resources.files("oodsim.data") / "imagenet_o_wnids.txt") as p:
            return tuple(sorted(read_wnid_list(p)))
    return tuple(sorted(read_wnid_list(path)))


@dataclass(frozen=True)
class FilterResult:
    """Which candidate classes survive the filter, and why each other one was dropped."""

    candidates: tuple[str, ...]
    kept: tuple[str, ...]
    excluded: Mapping[str, str]
    lemmas: Mapping[str, str] = field(repr=False, default_factory=dict)

    def reason_kind(self, wnid: str) -> str | None:
        """``"hypernym_of_id"`` for ``"hypernym_of_id:n02132136"``; None for kept classes."""
        reason = self.excluded.get(wnid)
        return None if reason is None else reason.split(":", 1)[0]

    def counts(self) -> dict[str, int]:
        """Number of excluded candidates per reason kind (every kind listed, in precedence)."""
        counts = dict.fromkeys(REASON_KINDS, 0)
        for reason in self.excluded.values():
            counts[reason.split(":", 1)[0]] += 1
        return counts


def write_class_table(result: FilterResult, path: str | os.PathLike[str]) -> Path:
    """Write one row per candidate: ``wnid, lemma, kept, reason`` (reason empty when kept).
    Written into a new temporary sibling and renamed onto ``path``
    (:func:`~oodsim.store.fs.write_replacing`): an interrupted write leaves no half table, and
    a link at ``path`` or at ``<path>.tmp`` is never written through."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> None:
        with tmp.open("x", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["wnid", "lemma", "kept", "reason"])
            for wnid in result.candidates:
                reason = result.excluded.get(wnid, "")
                lemma = result.lemmas.get(wnid, "")
                writer.writerow([wnid, lemma, str(not reason).lower(), reason])

    return write_replacing(path, write)


def _checked(wordnet: WordNet, wnids: Iterable[str], name: str) -> tuple[str, ...]:
    """Deduplicate (keeping order) and require every id to be a noun synset in WordNet."""
    if isinstance(wnids, str):
        raise SpecError(name, wnids, "a sequence of wnids, not one string")
    wnids = tuple(dict.fromkeys(wnids))
    for wnid in wnids:
        wnid_to_offset(wnid)
    missing = [w for w in wnids if w not in wordnet]
    if missing:
        raise SpecError(
            name,
            missing[:5] + (["..."] if len(missing) > 5 else []),
            f"noun synsets of the WordNet in {wordnet.root} ({len(missing)} unknown)",
        )
    return wnids


def _first_owner(pairs: Iterable[tuple[str, Iterable[str]]]) -> dict[str, str]:
    """Map each related wnid to the smallest ID wnid it is related to (deterministic reasons)."""
    owner: dict[str, str] = {}
    for id_wnid, related in sorted(pairs, key=lambda pair: pair[0]):
        for wnid in related:
            owner.setdefault(wnid, id_wnid)
    return owner


def _normalize(lemma: str) -> str:
    return lemma.replace("_", " ").lower()


def filter_ood_classes(
    id_wnids: Iterable[str] | None = None,
    candidate_wnids: Iterable[str] | None = None,
    *,
    wordnet_root: str | os.PathLike[str] | None = None,
    exclude_id: bool = True,
    exclude_hypernyms: bool = True,
    exclude_hyponyms: bool = True,
    exclude_part_whole: bool = True,
    exclude_shared_lemma: bool = True,
    exclude_biological_lookalikes: Iterable[str] = (),
    exclude_manmade_lookalikes: Iterable[str] = (),
    min_samples: int | None = None,
    sample_counts: Mapping[str, int] | None = None,
) -> FilterResult:
    """Filter candidate OOD classes against ID classes with WordNet.

    Defaults: ID = ImageNet-1k, candidates = ImageNet-21k (both from timm). Hypernyms and
    hyponyms are transitive (``@``/``@i`` and ``~``/``~i``); part/whole uses direct member,
    substance and part holonym/meronym pointers in either direction; shared lemma compares
    all lemmas case-insensitively. Look-alike lists are empty by default, so such classes
    (e.g. viceroy, n02277268, next to ImageNet-1k's monarch) stay in as very hard OOD.
    ``min_samples`` needs ``sample_counts`` (wnid → number of images; missing counts as 0).
    """
    wordnet = load_wordnet(wordnet_root)
    ids = _checked(wordnet, imagenet1k_wnids() if id_wnids is None else id_wnids, "id_wnids")
    candidates = _checked(
        wordnet,
        imagenet21k_wnids() if candidate_wnids is None else candidate_wnids,
        "candidate_wnids",
    )
    biological = set(_checked(wordnet, exclude_biological_lookalikes, "biological_lookalikes"))
    manmade = set(_checked(wordnet, exclude_manmade_lookalikes, "manmade_lookalikes"))
    if min_samples is not None:
        if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 0:
            raise SpecError("min_samples", min_samples, "a non-negative integer or None")
        if sample_counts is None:
            raise SpecError(
                "sample_counts",
                None,
                "a mapping wnid → image count",
                hint="min_samples needs the number of images per class",
            )

    id_set = set(ids)
    hypernym_of = _first_owner((w, wordnet.hypernyms(w)) for w in ids) if exclude_hypernyms else {}
    hyponym_of = _first_owner((w, wordnet.hyponyms(w)) for w in ids) if exclude_hyponyms else {}
    part_whole_of: dict[str, str] = {}
    if exclude_part_whole:
        part_whole_of = _first_owner((w, wordnet.part_whole(w)) for w in ids)
        for wnid in candidates:  # WordNet pointers are usually, not always, reciprocal
            linked = wordnet.part_whole(wnid) & id_set
            if wnid in part_whole_of:
                linked.add(part_whole_of[wnid])
            if linked:
                part_whole_of[wnid] = min(linked)
    lemma_of: dict[str, str] = {}
    if exclude_shared_lemma:
        lemma_of = _first_owner((w, map(_normalize, wordnet.lemmas(w))) for w in ids)

    def reason(wnid: str) -> str | None:
        if exclude_id and wnid in id_set:
            return "id_class"
        for kind, owner in (
            ("hypernym_of_id", hypernym_of),
            ("hyponym_of_id", hyponym_of),
            ("part_whole", part_whole_of),
        ):
            if wnid in owner and owner[wnid] != wnid:
                return f"{kind}:{owner[wnid]}"
        shared = sorted(
            lemma_of[lemma]
            for lemma in map(_normalize, wordnet.lemmas(wnid))
            if lemma in lemma_of and lemma_of[lemma] != wnid
        )
        if shared:
            return f"shared_lemma:{shared[0]}"
        if wnid in biological:
            return "user_biological"
        if wnid in manmade:
            return "user_manmade"
        if min_samples is not None and int(sample_counts.get(wnid, 0)) < min_samples:
            return "too_few_samples"
        return None

    excluded = {}
    for wnid in candidates:
        why = reason(wnid)
        if why is not None:
            excluded[wnid] = why
    kept = tuple(w for w in candidates if w not in excluded)
    lemmas = {w: ", ".join(lem.replace("_", " ") for lem in wordnet.lemmas(w)) for w in candidates}
    return FilterResult(candidates, kept, excluded, lemmas)
