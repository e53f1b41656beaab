"""A protocol from outside oodsim: registered from this test module and run on a real cluster,
or installed through the ``oodsim.protocols`` entry point group and run from the CLI."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import attrs
import numpy as np
import pytest
import xarray as xr
from scipy.special import softmax
from sklearn.metrics import roc_auc_score

import oodsim
from oodsim import Outputs
from oodsim.detectors import confidence
from oodsim.engine.work import run_seed
from oodsim.errors import SpecError
from oodsim.keys import digest
from oodsim.metrics import evaluate
from oodsim.protocols import available, get_protocol, register_protocol
from oodsim.protocols.base import Protocol, Task, checked_kappa, stored
from oodsim.report import register_report, report_hooks
from oodsim.results import NO_SEVERITY, Layout, SeedResult, store_counts
from oodsim.specs import RunSpec, SeedsSpec
from oodsim.specs.types import positive, spec_class
from oodsim.store import Store
from tests import command_server
from tests.conftest import ROOT

NAME = "nearest_mean"
KIND = "nearest_mean_outputs"


@spec_class
class NearestMeanSpec(RunSpec):
    """Digits with ``n_known`` known classes per seed, classified by the nearest class mean."""

    TAG = NAME
    n_known: int = attrs.field(default=6, validator=positive)


def _key(spec: NearestMeanSpec, seed: int) -> str:
    streams = spec.seeds.streams(seed).entropies(("class_split", "sample_split"))
    return digest(KIND, "1", {"n_known": spec.n_known, "streams": streams})


def _compute(spec: NearestMeanSpec, seed: int, store: Store) -> None:
    from sklearn.datasets import load_digits

    streams = spec.seeds.streams(seed)
    x, y = load_digits(return_X_y=True)
    known = np.sort(streams.rng("class_split").choice(10, spec.n_known, replace=False))
    train = streams.rng("sample_split").random(len(y)) < 0.5
    means = np.stack([x[train & (y == c)].mean(0) for c in known])
    logits = -((x[~train, None, :] - means[None]) ** 2).sum(-1) / x.shape[1]
    store.put(KIND, _key(spec, seed), {"logits": logits, "is_ood": ~np.isin(y[~train], known)})


class NearestMeanProtocol(Protocol):
    """One task per seed (the class means and the test logits), κ of the logits."""

    name = NAME
    spec_type = NearestMeanSpec

    spec: NearestMeanSpec

    def plan(self, seed: int) -> list[Task]:
        key = _key(self.spec, seed)
        return [Task(key, ((KIND, key),), partial(_compute, self.spec, seed))]

    def score(self, seed: int, store: Store) -> SeedResult:
        spec = self.spec
        arrays = stored(store, KIND, _key(spec, seed), "nearest-mean logits").arrays
        outputs = Outputs(logits=arrays["logits"])
        score = np.empty((len(spec.detectors), len(spec.metrics), 1))
        for i, d in enumerate(spec.detectors):
            kappa = checked_kappa(d.label, seed, partial(confidence, d.name, outputs, **d.kwargs))
            values = evaluate(kappa, arrays["is_ood"], spec.metrics)
            score[i, :, 0] = [values[m] for m in spec.metrics]
        return SeedResult(seed, {"score": score})

    def layout(self) -> Layout:
        coords = {
            "method": [d.label for d in self.spec.detectors],
            "metric": list(self.spec.metrics),
            "severity": [NO_SEVERITY],
        }
        return Layout(coords, {"score": ("method", "metric", "severity")})


def _table(results, metric: str) -> str:
    """This protocol's own table in ``oodsim run``: each method's mean over the seeds."""
    means = results.score.sel(metric=metric).mean("seed")
    rows = [f"{m}: {float(means.sel({'method': m}).squeeze()):.3f}" for m in results.method.values]
    return "\n".join(["nearest-mean means", *rows])


# on import, as a package's module would: the CLI test below imports it through the entry point
register_report(NAME, table=_table, replace=True)


@pytest.fixture
def registered() -> type[NearestMeanProtocol]:
    """Registered by the test (not on import): the workers know it only if it is shipped."""
    return register_protocol(NearestMeanProtocol, replace=True)


def test_a_protocol_registered_here_runs_on_a_real_cluster(
    registered: type[NearestMeanProtocol], cluster_address: str, cache: Path
) -> None:
    spec = NearestMeanSpec(detectors=("msp", "energy"), metrics=("auroc", "fpr95"))
    spec = attrs.evolve(spec, seeds=SeedsSpec(n=4))
    results = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    assert results.attrs["protocol"] == NAME and results.attrs["spec_key"] == spec.key
    assert (results.failure.values == "").all()
    assert store_counts(results)["computed"] == {KIND: 4}
    # the numbers: sklearn on the stored logits, and the same seed scored in this process
    store = Store(cache)
    for seed in range(4):
        arrays = store.get(KIND, _key(spec, seed)).arrays
        msp = softmax(arrays["logits"], axis=1).max(1)
        expected = roc_auc_score(~arrays["is_ood"], msp)
        got = float(results.score.sel({"seed": seed, "method": "msp", "metric": "auroc"}).squeeze())
        assert got == pytest.approx(expected, abs=1e-12)
    here = run_seed(spec, 2, str(cache))
    np.testing.assert_array_equal(here.variables["score"], results.score.sel(seed=2).values)
    again = oodsim.run(spec, cache=cache, progress=False)
    assert store_counts(again)["computed"] == {}
    np.testing.assert_array_equal(again.score.values, results.score.values)


def test_its_spec_files_load_with_the_protocol_key(
    registered: type[NearestMeanProtocol], tmp_path: Path
) -> None:
    path = tmp_path / "nm.toml"
    path.write_text(f'protocol = "{NAME}"\nn_known = 4\ndetectors = ["msp"]\n[seeds]\nn = 3\n')
    spec = oodsim.load(path)
    assert isinstance(spec, NearestMeanSpec)
    assert (spec.n_known, spec.seeds.n, spec.name, spec.metrics) == (4, 3, NAME, ("auroc",))
    path.write_text(f'protocol = "{NAME}"\nn_known = "four"\n')
    with pytest.raises(SpecError, match="n_known"):
        oodsim.load(path)
    assert NAME in available() and get_protocol(NAME) is registered


class _NoScore(Protocol):
    name = "no_score"
    spec_type = NearestMeanSpec

    def plan(self, seed):
        return []


class _NotARunSpec(NearestMeanProtocol):
    name = "not_a_run_spec"
    spec_type = dict


def _named(name: str) -> type[NearestMeanProtocol]:
    return type("Named", (NearestMeanProtocol,), {"name": name})


@pytest.mark.parametrize(
    ("protocol", "message"),
    [
        (_named("open_set"), "built-in or installed"),
        (_named("Has Space"), "lower-case name"),
        (_NoScore, "no score, layout"),
        (_NotARunSpec, "subclass of oodsim.specs.RunSpec"),
        (object(), "subclass of oodsim.protocols.base.Protocol"),
        (NearestMeanProtocol(NearestMeanSpec()), "register the class; a run builds it"),
    ],
)
def test_registration_refuses_what_cannot_be_a_protocol(protocol: object, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        register_protocol(protocol)


def test_registering_a_name_twice_needs_replace(registered: type[NearestMeanProtocol]) -> None:
    with pytest.raises(SpecError, match="replace=True"):
        register_protocol(NearestMeanProtocol)
    assert register_protocol(NearestMeanProtocol, replace=True) is NearestMeanProtocol


def test_an_installed_protocol_is_found_by_its_entry_point_and_runs_from_the_cli(
    tmp_path: Path,
) -> None:
    """A package that declares ``[project.entry-points."oodsim.protocols"]``: its dist-info
    on the path is what ``pip install`` leaves, and a fresh ``oodsim run`` finds the protocol
    without any script registering it."""
    site = tmp_path / "site"
    info = site / "nearest_mean_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: nearest-mean-plugin\nVersion: 1.0\n"
    )
    target = f"{__name__}:NearestMeanProtocol"
    (info / "entry_points.txt").write_text(f"[oodsim.protocols]\n{NAME} = {target}\n")
    spec = tmp_path / "nm.toml"
    spec.write_text(f'protocol = "{NAME}"\ndetectors = ["msp", "max_logit"]\n[seeds]\nn = 3\n')
    command = [sys.executable, "-m", "oodsim.cli", "run", str(spec), "--workers", "1"]
    command += ["--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out.zarr")]
    env = {"PYTHONPATH": f"{site}:{ROOT}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = command_server.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "3 seeds" in done.stdout and "nearest-mean means" in done.stdout
    results = oodsim.open_results(tmp_path / "out.zarr")
    assert results.attrs["protocol"] == NAME and results.sizes["seed"] == 3
    assert np.isfinite(results.score.values).all()
    assert _table(results, "auroc") in done.stdout  # the protocol's table, with these numbers


def test_report_hooks_are_found_by_the_results_protocol() -> None:
    assert report_hooks(xr.Dataset(attrs={"protocol": NAME})).table is _table
    assert report_hooks(xr.Dataset(attrs={"protocol": "imagenet_o"})).compares_methods is False
    # a protocol names its own hooks (Protocol.report), imported when a report asks
    from oodsim.report import severity

    assert report_hooks(xr.Dataset(attrs={"protocol": "severity"})) is severity.REPORT
    assert report_hooks(xr.Dataset(attrs={"protocol": "no_such"})).compares_methods is True
    with pytest.raises(ValueError, match="already have report hooks"):
        register_report("severity")
