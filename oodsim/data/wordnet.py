"""A small reader of WordNet's noun database (WNDB format) and the graph walks oodsim needs.

WordNet synset ids in ImageNet ("wnids") are ``"n%08d" % offset`` of WordNet 3.0's
``data.noun``. Debian's ``wordnet-base`` package ships that file in ``/usr/share/wordnet``.
Only nouns are read; pointers to other parts of speech are dropped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

from oodsim.environment import read
from oodsim.errors import DataNotFoundError, SpecError

DEFAULT_WORDNET_ROOT = Path("/usr/share/wordnet")
ENV_VAR = "OODSIM_WORDNET"

HYPERNYM = ("@", "@i")
HYPONYM = ("~", "~i")
HOLONYM = ("#m", "#s", "#p")
MERONYM = ("%m", "%s", "%p")
PART_WHOLE = HOLONYM + MERONYM

_WNID = re.compile(r"n\d{8}")


@dataclass(frozen=True, slots=True)
class Synset:
    """One noun synset: its lemmas (WordNet spelling) and noun pointers by symbol."""

    offset: int
    lemmas: tuple[str, ...]
    pointers: Mapping[str, tuple[int, ...]]
    gloss: str

    @property
    def wnid(self) -> str:
        return offset_to_wnid(self.offset)

    def targets(self, symbols: Iterable[str]) -> Iterator[int]:
        """Offsets this synset points to through any of ``symbols``."""
        for symbol in symbols:
            yield from self.pointers.get(symbol, ())


def wnid_to_offset(wnid: str) -> int:
    """``"n02132136"`` → ``2132136``; rejects anything that is not a noun wnid."""
    if not isinstance(wnid, str) or not _WNID.fullmatch(wnid):
        raise SpecError("wnid", wnid, "a WordNet noun id like 'n02132136'")
    return int(wnid[1:])


def offset_to_wnid(offset: int) -> str:
    return f"n{offset:08d}"


def resolve_root(wordnet_root: str | os.PathLike[str] | None = None) -> Path:
    """The WordNet folder: the argument, else ``$OODSIM_WORDNET``, else /usr/share/wordnet."""
    if wordnet_root is not None:
        return Path(wordnet_root)
    return read(ENV_VAR) or Path(DEFAULT_WORDNET_ROOT)


def parse_data_line(line: str) -> Synset:
    """Parse one ``data.noun`` line (see wndb(5WN)): offset, lemmas, pointers, gloss."""
    head, _, gloss = line.partition(" | ")
    fields = head.split()
    offset = int(fields[0])
    n_words = int(fields[3], 16)  # w_cnt is two hexadecimal digits
    lemmas = tuple(fields[4 : 4 + 2 * n_words : 2])
    at = 4 + 2 * n_words
    n_pointers = int(fields[at])
    pointers: dict[str, list[int]] = {}
    for k in range(n_pointers):
        symbol, target, pos = fields[at + 1 + 4 * k : at + 4 + 4 * k]
        if pos == "n":
            pointers.setdefault(symbol, []).append(int(target))
    frozen = MappingProxyType({s: tuple(t) for s, t in pointers.items()})
    return Synset(offset, lemmas, frozen, gloss.strip())


class WordNet:
    """The noun graph: synsets by offset, with transitive walks over pointer symbols."""

    def __init__(self, synsets: Mapping[int, Synset], root: Path) -> None:
        self.synsets = synsets
        self.root = root

    def __len__(self) -> int:
        return len(self.synsets)

    def __contains__(self, wnid: object) -> bool:
        return (
            isinstance(wnid, str) and bool(_WNID.fullmatch(wnid)) and int(wnid[1:]) in self.synsets
        )

    def synset(self, wnid: str) -> Synset:
        """The synset of ``wnid``; an unknown id raises a clear error."""
        offset = wnid_to_offset(wnid)
        try:
            return self.synsets[offset]
        except KeyError:
            raise SpecError(
                "wnid", wnid, f"a noun synset of the WordNet in {self.root}/data.noun"
            ) from None

    def lemmas(self, wnid: str) -> tuple[str, ...]:
        return self.synset(wnid).lemmas

    def closure(self, wnid: str, symbols: Iterable[str]) -> set[str]:
        """Every wnid reachable from ``wnid`` through ``symbols`` (itself excluded)."""
        symbols = tuple(symbols)
        seen: set[int] = set()
        stack = [wnid_to_offset(wnid)]
        while stack:
            for target in self.synsets[stack.pop()].targets(symbols):
                if target not in seen:
                    seen.add(target)
                    stack.append(target)
        seen.discard(wnid_to_offset(wnid))
        return {offset_to_wnid(o) for o in seen}

    def hypernyms(self, wnid: str) -> set[str]:
        """All ancestors (``@`` and ``@i``, transitive)."""
        return self.closure(wnid, HYPERNYM)

    def hyponyms(self, wnid: str) -> set[str]:
        """All descendants (``~`` and ``~i``, transitive)."""
        return self.closure(wnid, HYPONYM)

    def part_whole(self, wnid: str) -> set[str]:
        """Direct holonyms and meronyms (member, substance, part), not transitive."""
        return {offset_to_wnid(o) for o in self.synset(wnid).targets(PART_WHOLE)}


def load_wordnet(wordnet_root: str | os.PathLike[str] | None = None) -> WordNet:
    """Parse ``data.noun`` under ``wordnet_root`` (cached per process and resolved folder)."""
    return _load(resolve_root(wordnet_root).resolve())


@lru_cache(maxsize=4)
def _load(root: Path) -> WordNet:
    path = root / "data.noun"
    if not path.is_file():
        raise DataNotFoundError(
            f"WordNet noun database not found: looked for {path} "
            f"(argument wordnet_root=, else ${ENV_VAR}, else {DEFAULT_WORDNET_ROOT}). "
            "Install it with `apt-get install wordnet-base` or point wordnet_root= at a "
            "WordNet 3.0 'dict' folder holding data.noun."
        )
    synsets: dict[int, Synset] = {}
    with path.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if line[:1].isdigit():  # the licence header lines start with two spaces
                synset = parse_data_line(line)
                synsets[synset.offset] = synset
    return WordNet(MappingProxyType(synsets), root)
