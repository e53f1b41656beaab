"""What ``oodsim run`` prints after a run: the failures, the sources of variance, the
probability that each method wins a 5-seed paper, and the last line (what was computed, reused
and excluded, and where the results went)."""

from __future__ import annotations

import json
from pathlib import Path


def table_metric(spec, metric: str | None) -> str:
    """The metric of the printed tables: one the spec computes (refused before any compute
    otherwise), by default auroc or else the spec's first OOD metric."""
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.errors import UnknownNameError
    from oodsim.metrics import is_ood_metric

    names = tuple(spec.metrics)
    if metric is not None:
        if metric not in names:
            raise UnknownNameError("--metric", metric, names)
        return metric
    return "auroc" if "auroc" in names else next((m for m in names if is_ood_metric(m)), names[0])


def seed_unit(results) -> str:
    """What one seed is called in the protocol that made ``results`` ("simulations", "seeds";
    "seeds" for a protocol a script registered, which this process does not know)."""
    from oodsim.errors import UnknownNameError  # (fast --help)
    from oodsim.protocols import get_protocol

    try:
        return get_protocol(str(results.attrs.get("protocol", "open_set"))).unit
    except UnknownNameError:
        return "seeds"


def print_failures(results, metric: str) -> None:
    """Which seeds the estimates leave out and why: failed seeds (grouped by message) and
    degenerate ones (a classifier not above chance, each with its balanced accuracy). They are
    NaN or masked rows that every estimate skips, so the summary must say they exist; with
    degenerate seeds, each method's mean ``metric`` with and without them."""
    from oodsim.report.tables import exclusion_effect_table  # (fast --help)
    from oodsim.results import exclusions

    groups = exclusions(results)
    if not groups:
        return
    n = sum(len(seeds) for seeds in groups.values())
    print(
        f"\n{n} of {results.sizes['seed']} {seed_unit(results)} excluded from the estimates above:"
    )
    for reason, seeds in groups.items():
        if reason == "degenerate":
            print(
                f"  {len(seeds)} x degenerate: classifier not above chance (kept with "
                "[degenerate] keep = true)"
            )
            for seed, detail in seeds[:10]:
                print(f"    seed {seed}: {detail}")
            if len(seeds) > 10:
                print(f"    ... and {len(seeds) - 10} more")
            continue
        shown = ", ".join(str(s) for s, _ in seeds[:10]) + (", ..." if len(seeds) > 10 else "")
        print(f"  {len(seeds)} x failed: {reason} (seed {shown})")
    effect = exclusion_effect_table(results, metric)
    if effect:
        print("\n" + effect)


def print_variance_sources(results, metric: str) -> None:
    """Under ``[seeds.design]``: each method's variance share by source of randomness, with
    its interval (:func:`oodsim.stats.variance_components`)."""
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.report.source_table import has_design, variance_sources_table
    from oodsim.stats import is_ood_metric, variance_components

    if not has_design(results) or not is_ood_metric(metric):
        return
    vc = variance_components(results, metric)
    print(
        f"\nShare of the seed-to-seed variance of {metric} by source [{vc.attrs['confidence']:.0%} "
        f"interval; {vc.attrs['estimator']} fit, see docs/statistics.md]:"
    )
    table = variance_sources_table(vc, markdown=False)
    print("\n".join("  " + line for line in table.splitlines()))


def print_win_probabilities(results, metric: str, k: int = 5) -> None:
    """P(each method has the best mean over k random seeds), per cell (OOD set, level, model),
    for both ways of drawing the seeds side by side (independent per method, paired), each
    with a bootstrap interval over the seeds; every method is listed, however small. Only for
    an OOD metric (accuracy is the same for every detector), the first one of the results when
    ``metric`` is not one."""
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.report.tables import win_interval_note, win_intervals, win_table
    from oodsim.results.access import n_scored
    from oodsim.stats import PAIRING_LABELS, PAIRINGS, as_score, is_ood_metric

    n = n_scored(as_score(results))  # failed and excluded seeds enter no draw
    if results.sizes["method"] < 2 or n < k:
        return
    names = [str(m) for m in results.metric.values]
    if metric not in names or not is_ood_metric(metric):
        metric = next((m for m in names if is_ood_metric(m)), None)
        if metric is None:
            return
    n_draws = 10_000
    wins = win_intervals(results, metric, k, n_draws, 0, PAIRINGS)
    print(
        f"\nP(best mean {metric} in a {k}-seed comparison; {n_draws} draws) "
        f"{win_interval_note(wins, n)}:"
    )
    for p in PAIRINGS:
        print("  " + PAIRING_LABELS[p].replace("k seeds", f"{k} seeds"))
    table = win_table(results, k, n_draws, 0, markdown=False, metric=metric, wins=wins)
    print("\n".join("  " + line for line in table.splitlines()))


def last_line(results, seconds: float, out: str | Path) -> str:
    """The run in one sentence: its seeds computed, reused from the cache and left out of the
    estimates (excluded as degenerate, or failed), the store entries it computed, and where
    its results went (with the earlier results of the spec's name, when there are some)."""
    from oodsim.results import failure_kind, is_remote  # (fast --help)
    from oodsim.results.access import as_text
    from oodsim.results.history import versions
    from oodsim.store import shown

    unit, n = seed_unit(results), results.sizes["seed"]
    reused = int(results.attrs.get("n_reused", 0))
    kinds = [failure_kind(f) for f in as_text(results["failure"]).values.tolist()]
    excluded = sum(k is not None and k.excluded for k in kinds)
    failed = sum(k is not None and not k.excluded for k in kinds)
    parts = [f"{n - reused} computed", f"{reused} reused from the cache"]
    parts += [f"{excluded} excluded ({_excluded_kinds(kinds)})"] if excluded else []
    parts += [f"{failed} failed"] if failed else []
    computed = json.loads(results.attrs.get("store", "{}")).get("computed", {})
    entries = ", ".join(f"{count} {kind}" for kind, count in computed.items())
    made = f"; store entries computed: {entries}" if entries else "; nothing computed"
    earlier = 0 if is_remote(out) else len(versions(out)) - 1
    history = (
        f" ({earlier} earlier result{'s' if earlier > 1 else ''} of {Path(out).name}: "
        f"oodsim results ls {shown(out)})"
        if earlier > 0
        else ""
    )
    return (
        f"{n} {unit} in {seconds:.1f} s: {', '.join(parts)}{made}. Results in {shown(out)}{history}"
    )


def _excluded_kinds(kinds) -> str:
    """The kinds of the excluded seeds, e.g. "degenerate"."""
    return ", ".join(sorted({k.name for k in kinds if k is not None and k.excluded}))
