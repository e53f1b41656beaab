"""The arrays a trained classifier produces for a set of samples."""

from __future__ import annotations

import attrs
import numpy as np


def _optional_array(value: object) -> np.ndarray | None:
    return None if value is None else np.asarray(value)


@attrs.frozen(kw_only=True)
class Outputs:
    """Model outputs for n samples: logits (n, C), penultimate features (n, D), labels (n,).

    Labels are known-class indices for in-distribution samples and -1 for OOD samples.
    """

    logits: np.ndarray = attrs.field(converter=np.asarray)
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
