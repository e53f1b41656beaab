"""The artifacts' writers hold every protocol's model outputs and κ to the shape their readers
rely on: a malformed array is refused before anything reaches the store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from oodsim.artifacts.kappa import put_kappa
from oodsim.artifacts.keys import KAPPA
from oodsim.artifacts.outputs import OUTPUTS, put_outputs
from oodsim.keys import digest
from oodsim.protocols.severity.plan import KAPPA as SEVERITY_KAPPA
from oodsim.store import Store

KEY = digest("test_entry", 1, {"n": 0})


def test_kappa_is_one_value_per_sample_and_lands_under_its_kind(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache")
    with pytest.raises(ValueError, match=r"one value per sample; got an array of shape \(4, 2\)"):
        put_kappa(store, KEY, np.zeros((4, 2)), "κ of two detectors at once")
    assert not store.has(KAPPA, KEY)

    values = np.linspace(-1.0, 1.0, 5)
    put_kappa(store, KEY, values, "odin on in_test", kind=SEVERITY_KAPPA)
    assert not store.has(KAPPA, KEY)
    entry = store.get(SEVERITY_KAPPA, KEY)
    assert entry is not None
    np.testing.assert_array_equal(entry.arrays["kappa"], values)
    assert entry.meta["describe"] == "odin on in_test"


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"features": np.zeros((3, 4))}, r"a 2-D logits array, got \['features'\]"),
        ({"in_test.logits": np.zeros(3)}, r"a 2-D in_test\.logits array"),
        (
            {"logits": np.zeros((3, 2)), "labels": np.zeros(4, dtype=np.int64)},
            r"different numbers of rows: \{'logits': 3, 'labels': 4\}",
        ),
    ],
    ids=["no-logits", "1-D-logits", "rows-differ"],
)
def test_outputs_without_2d_logits_or_with_ragged_rows_are_refused(
    tmp_path: Path, arrays: dict, message: str
) -> None:
    store = Store(tmp_path / "cache")
    with pytest.raises(ValueError, match=message):
        put_outputs(store, KEY, arrays, {"describe": "malformed"})
    assert not store.has(OUTPUTS, KEY)
