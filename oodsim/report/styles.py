"""One look per method in every figure of every report: a colour from its family's palette, a
marker and a line style, decided by the method's name and family alone (:func:`method_style`),
so that two reports of a project, whatever methods each holds, draw a method alike.

A method's family is the one its detector declares (:func:`oodsim.detectors.detector_family`:
a built-in's record, the prefix of ``pytorch_ood:<Class>``, a registered or installed
detector's ``family``, else ``other``); the results' spec
says which detector each label names (:func:`method_detectors`). A built-in detector under its
own name has a fixed place: the n-th of its family by name takes the family's n-th colour, the
n-th built-in by name the n-th marker, a solid line. Any other label (a user's detector, a
detector with parameters, a pytorch-ood class) takes a colour of its family's palette, a marker
and a line style from a checksum of its name (CRC-32, the same in every process, unlike
``hash()``).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import xarray as xr

from oodsim.detectors import OTHER_FAMILY, builtin_detectors, detector_family, families

#: Colours of each family, by its place in :func:`oodsim.detectors.families`: hues of one kind
#: (blues and purples, oranges and reds, greens, pinks), of clearly different hue or lightness,
#: none of them grey (the colour of context lines, :data:`CONTEXT`).
_PALETTES: tuple[tuple[str, ...], ...] = (
    # softmax / logit: blues, cyans, purples
    ("#1f77b4", "#17becf", "#6a3d9a", "#0b2f6b", "#4fb3e8", "#9e7bd6", "#0a7d8c", "#3b5bdb"),
    # sampling: oranges, reds, browns
    ("#ff7f0e", "#b2182b", "#8c510a", "#e8590c", "#d6604d", "#7f2704"),
    # feature: greens
    ("#2ca02c", "#00582a", "#8cc63f", "#5a7d1a", "#1b9e77", "#0f8b3c"),
    # pytorch-ood: pinks, magentas
    ("#e7298a", "#91003f", "#f768a1", "#c51b7d", "#ae017e", "#d4559c"),
)
#: Colours of the families that users' detectors declare (``register(..., family=...)``), one
#: palette per family by a checksum of its name: teals, violets.
_MORE_PALETTES: tuple[tuple[str, ...], ...] = (
    ("#008080", "#20b2aa", "#006d5b", "#48c9b0", "#117a65", "#0b5345"),
    ("#4b0082", "#7b68ee", "#5b2c6f", "#a569bd", "#2e1a47", "#8e44ad"),
)
#: Colours of methods oodsim does not know: browns, black, gold, olive.
_OTHER_PALETTE = ("#8c564b", "#000000", "#bcbd22", "#c49a00", "#5c3a21", "#6b6b00", "#a0522d")
#: The colour of the methods a figure draws as context, behind its best few.
CONTEXT = "#b8b8b8"
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "p", "h", "d", "H", "8")
_LINESTYLES = ("-", "--", "-.")


def method_detectors(results: xr.Dataset | xr.DataArray) -> dict[str, str]:
    """Label → registry name of each detector of the spec that made ``results`` (empty when
    their attributes do not say)."""
    try:
        spec = json.loads(results.attrs["spec"])
        return {str(d["label"]): str(d["name"]) for d in spec.get("detectors") or ()}
    except (KeyError, TypeError, ValueError, AttributeError):
        return {}


def _builtin_names() -> list[str]:
    return [d.name for d in builtin_detectors()]


def detector_of(method: object, detectors: Mapping[str, str] | None = None) -> str:
    """The registry name of the detector ``method`` labels: from ``detectors`` (label → name,
    :func:`method_detectors`), else the label itself when it names a built-in detector, the
    part before ``(`` of a default label with parameters (``energy(temperature=2)``), or the
    longest built-in name it starts with followed by ``_`` (``energy_t2``); else the label."""
    label = str(method)
    if detectors and label in detectors:
        return detectors[label]
    builtins = _builtin_names()
    for candidate in (label, label.split("(")[0]):
        if candidate in builtins:
            return candidate
    prefixes = [name for name in builtins if label.startswith(name + "_")]
    return max(prefixes, key=len) if prefixes else label


def method_family(method: object, detectors: Mapping[str, str] | None = None) -> str:
    """The family of the detector ``method`` labels (:func:`detector_of`)."""
    return detector_family(detector_of(method, detectors))


def grouped(
    methods: Iterable[object], detectors: Mapping[str, str] | None = None
) -> dict[str, list[str]]:
    """The methods of each family present, families in the order of
    :func:`oodsim.detectors.families`, methods in the order given."""
    groups: dict[str, list[str]] = {family: [] for family in families()}
    for method in methods:
        groups.setdefault(method_family(method, detectors), []).append(str(method))
    return {family: names for family, names in groups.items() if names}


def _palette(family: str) -> tuple[str, ...]:
    """oodsim's families (its built-ins' and its prefixes') by their place; any family a
    detector declares by its name, so that every process colours it alike."""
    if family == OTHER_FAMILY:
        return _OTHER_PALETTE
    own = [f for f in families() if f != OTHER_FAMILY][: len(_PALETTES)]
    if family in own:
        return _PALETTES[own.index(family)]
    return _MORE_PALETTES[zlib.crc32(family.encode("utf-8")) % len(_MORE_PALETTES)]


def method_style(method: object, detectors: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Colour, marker and line style of ``method`` (``ax.plot(..., **style)``), by its name and
    family alone (see the module docstring)."""
    label = str(method)
    detector = detector_of(label, detectors)
    family = detector_family(detector)
    palette = _palette(family)
    builtins = builtin_detectors()
    if label == detector and detector in {d.name for d in builtins}:
        kin = [d.name for d in builtins if d.family == family]
        return {
            "color": palette[kin.index(detector) % len(palette)],
            "marker": MARKERS[[d.name for d in builtins].index(detector) % len(MARKERS)],
            "linestyle": "-",
        }
    checksum = zlib.crc32(label.encode("utf-8"))
    place, checksum = checksum % len(palette), checksum // len(palette)
    marker, checksum = checksum % len(MARKERS), checksum // len(MARKERS)
    return {
        "color": palette[place],
        "marker": MARKERS[marker],
        "linestyle": _LINESTYLES[checksum % len(_LINESTYLES)],
    }


def _look(style: Mapping[str, Any]) -> tuple[str, str, str]:
    return style["color"], style["marker"], style["linestyle"]


def method_styles(
    methods: Iterable[object], detectors: Mapping[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """:func:`method_style` of each method, in the order given. Two methods of one report never
    look alike: where two checksummed styles (never a built-in's) coincide, the one later by
    name takes the next marker, the only case where a report's other methods matter."""
    names = [str(m) for m in methods]
    fixed = set(_builtin_names())
    taken: set[tuple[str, str, str]] = set()
    styles: dict[str, dict[str, Any]] = {}
    for name in sorted(dict.fromkeys(names), key=lambda n: (n not in fixed, n)):
        style = method_style(name, detectors)
        for _ in range(len(MARKERS) * len(_LINESTYLES)):
            if _look(style) not in taken:
                break
            at = MARKERS.index(style["marker"]) + 1
            style["marker"] = MARKERS[at % len(MARKERS)]
            if at % len(MARKERS) == 0:
                line = _LINESTYLES.index(style["linestyle"]) + 1
                style["linestyle"] = _LINESTYLES[line % len(_LINESTYLES)]
        taken.add(_look(style))
        styles[name] = style
    return {name: styles[name] for name in names}
