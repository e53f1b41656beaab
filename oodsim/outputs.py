"""The arrays a trained classifier produces for a set of samples.

Their arrays are read-only views: every detector of a seed reads the same cached outputs, and
one that changed them in place (``z -= z.max(1, keepdims=True)``, a common numpy habit)
silently changed the scores of every detector after it (energy's AUROC fell from 0.91 to
0.15). Now such a detector fails with numpy's ``ValueError: ... read-only``, which
:func:`oodsim.detectors.confidence` explains. The arrays passed in stay writable for their
owner.
"""

from __future__ import annotations

import attrs
import numpy as np


def read_only(value: object) -> np.ndarray:
    """``value`` as an array that cannot be written through (a view: the owner's array, if
    any, is not changed)."""
    array = np.asarray(value)
    if array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    return array


def _optional_array(value: object) -> np.ndarray | None:
    return None if value is None else read_only(value)


@attrs.frozen(kw_only=True)
class Outputs:
    """Model outputs for n samples: logits (n, C), penultimate features (n, D), labels (n,).

    Labels are known-class indices for in-distribution samples and -1 for OOD samples.
    """

    logits: np.ndarray = attrs.field(converter=read_only)
    features: np.ndarray | None = attrs.field(default=None, converter=_optional_array)
    labels: np.ndarray | None = attrs.field(default=None, converter=_optional_array)

    def __attrs_post_init__(self) -> None:
        if self.logits.ndim != 2:
            raise ValueError(f"logits must have shape (n, classes), got {self.logits.shape}")
        n = len(self.logits)
        for name in ("features", "labels"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"{name} has {len(value)} rows but logits have {n}")

    def __len__(self) -> int:
        return len(self.logits)

    @classmethod
    def concat(cls, parts: list[Outputs]) -> Outputs:
        """Stack several sample sets (e.g. ID test + OOD sets) into one."""

        def stack(name: str) -> np.ndarray | None:
            values = [getattr(p, name) for p in parts]
            return None if any(v is None for v in values) else np.concatenate(values)

        return cls(logits=stack("logits"), features=stack("features"), labels=stack("labels"))

    def take(self, index: np.ndarray | slice) -> Outputs:
        """The outputs of a subset of samples."""

        def pick(value: np.ndarray | None) -> np.ndarray | None:
            return None if value is None else value[index]

        return Outputs(
            logits=self.logits[index], features=pick(self.features), labels=pick(self.labels)
        )
