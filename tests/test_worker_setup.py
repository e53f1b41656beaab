"""The driver's registrations reach a run's workers once, when they join (a worker plugin,
:mod:`oodsim.engine.worker_setup`), not with every task; a worker that cannot take them stops
the run in one line, before any compute. Workers that join later (batch jobs) are checked in
``tests/test_clusters.py``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import oodsim
from oodsim.engine import ClusterError
from tests.conftest import small_digits

VANISHING = """
def top_logit(outputs, *, fit=None):
    return outputs.logits.max(axis=1)
"""


def test_a_registration_the_workers_cannot_import_stops_the_run_before_compute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A detector from a module that only the driver can import (here: deleted after the
    import) cannot reach the workers: the run stops when its cluster starts, with one
    ClusterError naming the import error, and no seed was computed."""
    folder = tmp_path / "modules"
    folder.mkdir()
    (folder / "vanishing_detectors.py").write_text(VANISHING)
    monkeypatch.syspath_prepend(str(folder))
    import vanishing_detectors  # type: ignore[import-not-found]

    shutil.rmtree(folder)  # the driver keeps the module it imported; a worker cannot import it
    oodsim.detectors.register("test_vanishing_top_logit", needs={"logits"}, replace=True)(
        vanishing_detectors.top_logit
    )
    spec = small_digits(2, detectors=("msp", "test_vanishing_top_logit"))
    cache = tmp_path / "cache"
    with pytest.raises(ClusterError) as raised:
        oodsim.run(spec, n_workers=2, cache=cache, progress=False)
    message = str(raised.value)
    assert message.startswith("the workers could not take the detectors, datasets or")
    assert "ModuleNotFoundError" in message and "vanishing_detectors" in message
    assert "\n" not in message
    assert not list(cache.rglob("*.zip")) and not list(cache.rglob("*.json"))
