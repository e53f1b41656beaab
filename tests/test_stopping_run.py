"""Sequential stopping inside a real run: the executor stops early and records why."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import oodsim
from oodsim.errors import SpecError
from oodsim.results import store_counts
from oodsim.specs import SeedsSpec, StoppingSpec
from oodsim.stats import estimate
from tests.conftest import small_digits


def test_ci_width_rule_stops_early_and_rerun_reuses_every_seed(
    cluster_address: str, cache: Path
) -> None:
    rule = StoppingSpec(rule="ci_width", metric="auroc", epsilon=0.04, min_seeds=4, batch_size=4)
    spec = small_digits(40, stopping=rule)
    results = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    decision = json.loads(results.attrs["stopping"])
    n = results.sizes["seed"]
    assert decision["stop"] and decision["rule"] == "ci_width"
    assert 4 <= n < 40 and n % 4 == 0 and decision["n_seeds"] == n
    assert decision["statistic"] < 0.04
    interval = estimate(results).sel({"metric": "auroc", "method": "msp"})
    half_width = float((interval.upper - interval.lower) / 2)
    assert half_width == pytest.approx(decision["statistic"], rel=1e-9)
    assert list(results.seed.values) == list(range(n))  # the first n seeds, in order
    assert store_counts(results)["computed"]["checkpoint"] >= n  # queued seeds may finish too

    again = oodsim.run(spec, address=cluster_address, cache=cache, progress=False)
    assert store_counts(again)["computed"] == {}
    assert json.loads(again.attrs["stopping"]) == decision
    np.testing.assert_array_equal(again.score.values, results.score.values)


def test_stopping_metric_must_be_measured() -> None:
    with pytest.raises(SpecError, match="stopping.metric"):
        small_digits(
            10, metrics=("accuracy",), stopping=StoppingSpec(rule="ci_width", metric="auroc")
        )
    with pytest.raises(SpecError, match="stopping.max_seeds"):
        small_digits(10, seeds=SeedsSpec(n=10), stopping=StoppingSpec(rule="ranking", max_seeds=20))
