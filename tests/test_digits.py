"""The built-in digits reader against scikit-learn's loader (the oracle)."""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_digits as sklearn_digits

from oodsim.data.builtin import load_digits


def test_digits_are_sklearns_bundled_digits_times_16() -> None:
    """The reader opens scikit-learn's file itself (no ``sklearn.datasets`` import); its
    arrays are those of ``sklearn.datasets.load_digits``, gray levels 0..16 scaled to 0..255."""
    want = sklearn_digits()
    got = load_digits()
    expected = np.clip(want.images * 16.0, 0, 255).astype(np.uint8)[..., None]
    assert got.images.dtype == np.uint8 and got.images.shape == (1797, 8, 8, 1)
    np.testing.assert_array_equal(got.images, expected)
    np.testing.assert_array_equal(got.labels, want.target)
    assert got.labels.dtype == np.int64 and got.n_classes == 10
