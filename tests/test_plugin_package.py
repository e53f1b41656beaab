"""A throwaway package installed through its entry points alone (its dist-info on the path, as
``pip install`` leaves it) adds a detector, a metric and a dataset, one module each, and
``oodsim run`` uses all three with no script registering anything: the run computes the
metric for the detector on the dataset, the report draws the detector in its family's
colours, and ``stats`` reads the metric's direction. (The protocol of an installed package:
tests/test_protocol_plugin.py.)"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import oodsim
from oodsim import plugins
from oodsim.report import styles
from tests import command_server
from tests.conftest import ROOT, digits_toml, install_package

pytestmark = pytest.mark.slow  # trains once in a subprocess

MODULES = {
    "gap_kappa": """
        import numpy as np
        from oodsim.detectors import Detector

        def gap(outputs, *, fit=None):
            top = np.sort(outputs.logits, axis=1)
            return top[:, -1] - top[:, -2]

        GAP = Detector(name="gap", func=gap, needs={"logits"}, family="margin")
    """,
    "gap_metric": """
        from oodsim.metrics import MetricInfo
        from sklearn.metrics import roc_auc_score

        def ranking_error(kappa, is_ood):
            return 1.0 - roc_auc_score(~is_ood, kappa)

        RANKING_ERROR = MetricInfo(
            name="ranking_error", function=ranking_error, higher_is_better=False
        )
    """,
    "gap_data": """
        from oodsim.data import ImageData, load_dataset
        from oodsim.data.registry import DatasetInfo

        def inverted(root=None, download=False, image_size=None):
            data = load_dataset("digits")
            return ImageData(255 - data.images, data.labels, data.class_names)

        INVERTED = DatasetInfo("inverted_digits", 10, False, inverted, "digits, inverted")
    """,
}
ENTRY_POINTS = """
[oodsim.detectors]
gap = gap_kappa:GAP
[oodsim.metrics]
ranking_error = gap_metric:RANKING_ERROR
[oodsim.datasets]
inverted_digits = gap_data:INVERTED
"""


def test_an_installed_detector_metric_and_dataset_run_and_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    install_package(site, "gap-plugins", ENTRY_POINTS, MODULES)
    spec = digits_toml(
        tmp_path / "gap.toml", 3, detectors='"msp", "gap"', metrics='["auroc", "ranking_error"]'
    )
    spec.write_text(spec.read_text().replace('name = "digits"', 'name = "inverted_digits"'))
    out, report = tmp_path / "r.zarr", tmp_path / "report"
    command = [sys.executable, "-m", "oodsim.cli", "run", str(spec), "--workers", "2"]
    command += ["--cache", str(tmp_path / "c"), "--out", str(out), "--report", str(report)]
    env = {"PYTHONPATH": f"{site}:{ROOT}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = command_server.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = oodsim.open_results(out)
    assert list(results.method.values) == ["msp", "gap"]
    assert '"inverted_digits"' in results.attrs["spec"]
    score = results.score.squeeze(drop=True)
    np.testing.assert_allclose(
        score.sel(metric="ranking_error").values, 1 - score.sel(metric="auroc").values
    )
    assert (report / "summary.md").is_file()

    # this process finds them as `oodsim report` would: through the entry points
    monkeypatch.syspath_prepend(str(site))
    for kind in ("detector", "metric", "dataset"):
        plugins.registry(kind).cache_clear()
    try:
        assert plugins.get("detector", "gap").family == "margin"
        assert styles.grouped(["msp", "gap"])["margin"] == ["gap"]
        colour = styles.method_style("gap")["color"]
        assert colour in {c for palette in styles._MORE_PALETTES for c in palette}
        assert not oodsim.metrics.higher_is_better("ranking_error")
        by_error = oodsim.stats.compare(results, "ranking_error")
        by_auroc = oodsim.stats.compare(results, "auroc")
        pair = {"method": "msp", "other": "gap"}
        assert float(by_error.prob_superiority.sel(pair)) == float(
            by_auroc.prob_superiority.sel(pair)
        )  # the same winner: a lower error is better
    finally:
        for kind in ("detector", "metric", "dataset"):
            registry = plugins.registry(kind)
            registry.cache_clear()
            for name in ("gap", "ranking_error", "inverted_digits"):
                registry.loaded.pop(name, None)
        for name in MODULES:
            sys.modules.pop(name, None)
