"""The mixin every spec part shares: a content key (:mod:`oodsim.keys`) and dask
tokenization by that key."""

from __future__ import annotations

from oodsim.keys import content_key


class KeyedSpec:
    """Mixin: a content key and dask tokenization by that key."""

    @property
    def key(self) -> str:
        """sha256 content key (see :mod:`oodsim.keys`)."""
        return content_key(self)

    def __dask_tokenize__(self) -> str:
        return self.key
