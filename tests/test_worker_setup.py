"""The driver's registrations reach a run's workers once, when they join (a worker plugin,
:mod:`oodsim.engine.worker_setup`), not with every task: workers of batch jobs, which join after
the run's client set them up, take them too; a worker that cannot take them stops the run in
one line, before any compute."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import oodsim
from oodsim.engine import ClusterError
from tests.conftest import small_digits
from tests.test_clusters import RUN_TIMEOUT, cluster_spec_file

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


#: A user's script: a detector registered in its main module, run on local jobs.
REGISTERING_SCRIPT = """
import sys

import attrs
import numpy as np

import oodsim


@oodsim.detectors.register("script_top_margin", needs={"logits"})
def top_margin(outputs, *, fit=None):
    top = np.sort(outputs.logits, axis=1)
    return top[:, -1] - top[:, -2]


if __name__ == "__main__":
    spec = oodsim.load(sys.argv[1])
    spec = attrs.evolve(spec, detectors=("msp", "script_top_margin"))
    result = oodsim.run(spec, cluster="local-jobs", cache=sys.argv[2], progress=False)
    margin = result["score"].sel({"method": "script_top_margin", "metric": "auroc"}).values
    print("finite", int(np.isfinite(margin).sum()), "of", margin.size)
"""


@pytest.mark.skipif(
    importlib.util.find_spec("dask_jobqueue") is None,
    reason='needs the [cluster] extra (dask-jobqueue): pip install -e ".[test]"',
)
@pytest.mark.slow  # starts a cluster of local jobs
def test_job_workers_that_join_later_take_the_scripts_registrations(tmp_path: Path) -> None:
    """Batch jobs start their workers after the run's client set up its workers (one worker
    plugin, :mod:`oodsim.engine.worker_setup`): the workers still know the detector that the
    script registered in its main module, which they never import, and score it."""
    spec = cluster_spec_file(tmp_path, n_seeds=1, n_jobs="1")
    script = tmp_path / "registering.py"
    script.write_text(REGISTERING_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(spec), str(tmp_path / "cache")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["finite", "1", "of", "1"]
