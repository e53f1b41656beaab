"""A throwaway package installed through its entry points alone (its dist-info on the path, as
``pip install`` leaves it) adds a detector, a metric, a dataset and a protocol, one module
each, and ``oodsim run`` uses them with no script registering anything: the run computes the
metric for the detector on the dataset, the report draws the detector in its family's
colours, ``stats`` reads the metric's direction, and the protocol (on the same dataset,
detector and metric) prints its own table and writes its own report section."""

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
    "gap_protocol": """
        from functools import partial

        import attrs
        import numpy as np

        from oodsim import Outputs
        from oodsim.data import load_dataset
        from oodsim.detectors import confidence
        from oodsim.keys import digest
        from oodsim.metrics import evaluate
        from oodsim.protocols.base import Protocol, Task, checked_kappa, stored
        from oodsim.report import ReportHooks, write_file
        from oodsim.results import NO_SEVERITY, Layout, SeedResult
        from oodsim.specs import RunSpec
        from oodsim.specs.types import positive, spec_class

        NAME = "gap_nearest_mean"
        KIND = "gap_nearest_mean_logits"

        @spec_class
        class NearestMeanSpec(RunSpec):
            TAG = NAME
            n_known: int = attrs.field(default=6, validator=positive)

        def _key(spec, seed):
            streams = spec.seeds.streams(seed).entropies(("class_split", "sample_split"))
            return digest(KIND, "1", {"n_known": spec.n_known, "streams": streams})

        def _compute(spec, seed, store):
            streams = spec.seeds.streams(seed)
            data = load_dataset("inverted_digits")
            x, y = data.images.reshape(len(data.labels), -1) / 255.0, data.labels
            known = np.sort(streams.rng("class_split").choice(10, spec.n_known, replace=False))
            train = streams.rng("sample_split").random(len(y)) < 0.5
            means = np.stack([x[train & (y == c)].mean(0) for c in known])
            logits = -((x[~train, None, :] - means[None]) ** 2).sum(-1)
            is_ood = ~np.isin(y[~train], known)
            store.put(KIND, _key(spec, seed), {"logits": logits, "is_ood": is_ood})

        class NearestMeanProtocol(Protocol):
            name = NAME
            spec_type = NearestMeanSpec
            report = "gap_protocol:REPORT"

            def plan(self, seed):
                key = _key(self.spec, seed)
                return [Task(key, ((KIND, key),), partial(_compute, self.spec, seed))]

            def score(self, seed, store):
                spec = self.spec
                arrays = stored(store, KIND, _key(spec, seed), "nearest-mean logits").arrays
                outputs = Outputs(logits=arrays["logits"])
                score = np.empty((len(spec.detectors), len(spec.metrics), 1))
                for i, d in enumerate(spec.detectors):
                    kappa_of = partial(confidence, d.name, outputs, **d.kwargs)
                    kappa = checked_kappa(d.label, seed, kappa_of)
                    values = evaluate(kappa, arrays["is_ood"], spec.metrics)
                    score[i, :, 0] = [values[m] for m in spec.metrics]
                return SeedResult(seed, {"score": score})

            def layout(self):
                coords = {
                    "method": [d.label for d in self.spec.detectors],
                    "metric": list(self.spec.metrics),
                    "severity": [NO_SEVERITY],
                }
                return Layout(coords, {"score": ("method", "metric", "severity")})

        def _means(results, metric):
            means = results.score.sel(metric=metric).mean("seed").squeeze(drop=True)
            return [f"{m}: {float(means.sel({'method': m})):.3f}" for m in results.method.values]

        def table(results, metric):
            return "\\n".join(["nearest-mean means", *_means(results, metric)])

        def files(results, folder, metric, figures):
            text = "\\n".join(["# Nearest-mean means", "", *_means(results, metric)]) + "\\n"
            path = write_file(folder / "means.md", lambda tmp: tmp.write_text(text))
            return [path], ["", "## Nearest means", "", f"See [means.md]({folder.name}/means.md)."]

        REPORT = ReportHooks(table, files=files)
    """,
}
ENTRY_POINTS = """
[oodsim.detectors]
gap = gap_kappa:GAP
[oodsim.metrics]
ranking_error = gap_metric:RANKING_ERROR
[oodsim.datasets]
inverted_digits = gap_data:INVERTED
[oodsim.protocols]
gap_nearest_mean = gap_protocol:NearestMeanProtocol
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

    # the installed protocol, with all three: its table after the run, its report section
    spec = tmp_path / "nearest.toml"
    spec.write_text(
        'protocol = "gap_nearest_mean"\ndetectors = ["msp", "gap"]\n'
        'metrics = ["auroc", "ranking_error"]\n[seeds]\nn = 3\n'
    )
    out, report = tmp_path / "nearest.zarr", tmp_path / "nearest.report"
    command = [sys.executable, "-m", "oodsim.cli", "run", str(spec), "--workers", "1"]
    command += ["--cache", str(tmp_path / "c"), "--out", str(out), "--report", str(report)]
    done = command_server.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = oodsim.open_results(out)
    assert results.attrs["protocol"] == "gap_nearest_mean" and results.sizes["seed"] == 3
    score = results.score.squeeze(drop=True)
    np.testing.assert_allclose(
        score.sel(metric="ranking_error").values, 1 - score.sel(metric="auroc").values
    )
    assert "nearest-mean means" in done.stdout  # the protocol's own table
    section = (report / "gap_nearest_mean" / "means.md").read_text()
    assert section.startswith("# Nearest-mean means") and "gap: " in section
    assert "(gap_nearest_mean/means.md)" in (report / "summary.md").read_text()

    # this process finds them as `oodsim report` would: through the entry points
    monkeypatch.syspath_prepend(str(site))
    for kind in ("detector", "metric", "dataset", "protocol"):
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
        for kind in ("detector", "metric", "dataset", "protocol"):
            registry = plugins.registry(kind)
            registry.cache_clear()
            for name in ("gap", "ranking_error", "inverted_digits", "gap_nearest_mean"):
                registry.loaded.pop(name, None)
        for name in MODULES:
            sys.modules.pop(name, None)
