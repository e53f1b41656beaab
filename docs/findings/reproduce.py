"""Reproduce the numbers and plots of docs/findings.md from saved results.

    oodsim run digits200.toml --out results/digits200.zarr     # see docs/findings.md
    oodsim run fashion30.toml --out results/fashion30.zarr
    oodsim run specs/digits_five_splits.toml --out results/five.zarr
    oodsim run specs/digits_variance_sources.toml --out results/variance_sources.zarr
    python docs/findings/reproduce.py results/digits200.zarr results/fashion30.zarr \
        --splits results/five.zarr --design results/variance_sources.zarr --out docs/findings
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import xarray as xr

import oodsim
from oodsim import stats
from oodsim.report import write_report
from oodsim.report.source_table import variance_sources_table

METRICS = ("auroc", "aupr_in", "aupr_out", "fpr95")
#: The AUROC differences the power calculations ask about (oodsim.stats.power's defaults).
DELTAS = (0.005, 0.01, 0.02)


def _auroc(results: xr.Dataset) -> xr.DataArray:
    return results.score.sel({"metric": "auroc", "severity": "all"})


def spread_table(results: xr.Dataset) -> str:
    """Per method: mean, std, min and max of AUROC over seeds, and the 95% interval."""
    auroc = _auroc(results)
    est = stats.estimate(results).sel({"metric": "auroc"})
    rows = [
        "| method | mean AUROC [95% CI] | std over seeds | min | max |",
        "|---|---|---|---|---|",
    ]
    for method in auroc.method.values:
        values = auroc.sel({"method": method}).values
        e = est.sel({"method": method})
        rows.append(
            f"| {method} | {float(e['mean']):.3f} [{float(e.lower):.3f}, "
            f"{float(e.upper):.3f}] | {np.nanstd(values, ddof=1):.3f} | "
            f"{np.nanmin(values):.3f} | {np.nanmax(values):.3f} |"
        )
    return "\n".join(rows)


def win_table(
    results: xr.Dataset, methods: list[str] | None = None, metrics: tuple[str, ...] = METRICS
) -> str:
    """P(best mean in a 5-seed comparison) per method and metric (among ``methods``), both
    pairings side by side, each with its 95% bootstrap interval over the seed pool."""
    subset = results if methods is None else results.sel({"method": methods})
    wins = stats.win_probability_intervals(subset, list(metrics), k=5, rng=0)
    header = [f"{m} {p}" for m in metrics for p in ("independent", "paired")]
    rows = ["| method | " + " | ".join(header) + " |", "|---" * (len(header) + 1) + "|"]
    for method in wins.method.values:
        cells = []
        for metric in metrics:
            for pairing in ("independent", "paired"):
                cell = wins.sel({"method": method, "metric": metric, "pairing": pairing})
                cells.append(
                    f"{float(cell.win_probability):.3f} "
                    f"[{float(cell.lower):.3f}, {float(cell.upper):.3f}]"
                )
        rows.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


CONVENTIONS = (
    "auroc",
    "aupr_in",
    "ap_in",
    "aupr_out",
    "ap_out",
    "fpr95",
    "fpr95_ood",
    "fpr_at_val95",
    "tpr_at_val95",
    "oscr",
    "oscr_pytorch_ood",
    "aurc",
    "eaurc",
)


def conventions_table(results: xr.Dataset) -> str:
    """Mean over seeds of every named metric convention the results hold, per method."""
    names = [m for m in CONVENTIONS if m in results.metric.values]
    est = stats.estimate(results)
    rows = ["| method | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for method in est.method.values:
        cells = [f"{float(est['mean'].sel({'method': method, 'metric': m})):.3f}" for m in names]
        rows.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def required_summary(results: xr.Dataset, methods: list[str] | None = None) -> str:
    """How many method pairs a Welch test separates within 5 seeds, later, or never."""
    subset = results if methods is None else results.sel({"method": methods})
    table = stats.required_simulations_table(subset, metric="auroc")
    names = list(table.method.values)
    counts = [table.values[i, j] for i in range(len(names)) for j in range(i + 1, len(names))]
    counts = np.asarray(counts, dtype=float)
    within5 = int(np.sum(counts <= 5))
    later = int(np.sum((counts > 5) & np.isfinite(counts)))
    never = int(np.sum(~np.isfinite(counts)))
    finite = counts[np.isfinite(counts)]
    median = f"{np.median(finite):.0f}" if finite.size else "-"
    return (
        f"{len(counts)} pairs: {within5} separated within 5 seeds, {later} later "
        f"(median of those separated: {median} seeds), {never} never within "
        f"{results.sizes['seed']} seeds"
    )


def paired_summary(results: xr.Dataset, methods: list[str] | None = None) -> str:
    """Pairs a Holm-adjusted paired t test separates on all seeds, and the seeds a paired (and
    a two-sample) t test needs for 80% power at fixed AUROC differences (never the observed
    ones: that is post-hoc power, a function of the p-value alone)."""
    subset = results if methods is None else results.sel({"method": methods})
    cmp = stats.compare(subset, metric="auroc", adjust="holm")
    paired = stats.power(subset, metric="auroc", delta=DELTAS)
    welch = stats.power(subset, metric="auroc", delta=DELTAS, paired=False)
    m = cmp.sizes["method"]
    upper = np.triu_indices(m, 1)
    significant = int(cmp["significant"].values[upper].sum())
    parts = []
    for delta in DELTAS:
        n_paired = paired["n_required"].sel(delta=delta).values[upper]
        n_welch = welch["n_required"].sel(delta=delta).values[upper]
        parts.append(
            f"delta {delta:g}: paired median {np.nanmedian(n_paired):.0f} (<= 5: "
            f"{int(np.sum(n_paired <= 5))}, > 1000: {int(np.sum(n_paired > 1000))}), "
            f"two-sample median {np.nanmedian(n_welch):.0f} per method"
        )
    return (
        f"{upper[0].size} pairs: {significant} significant (paired t, Holm, all seeds); seeds "
        "for 80% power: " + "; ".join(parts)
    )


def ranking_table(results: xr.Dataset, n_boot: int = 2000) -> str:
    """Methods by mean AUROC, each with the 95% bootstrap interval of its rank (the seeds
    resampled whole, so the ranks move together) and the share of resamples it ranks first."""
    auroc = _auroc(results).transpose("seed", "method")
    values = auroc.where(results["failure"] == "").values
    values = values[~np.isnan(values).any(axis=1)]
    rng = np.random.default_rng(0)
    rows = rng.integers(0, len(values), (n_boot, len(values)))
    means = np.nanmean(values[rows], axis=1)  # (boot, method)
    ranks = (-means).argsort(axis=1).argsort(axis=1) + 1
    order = np.argsort(-values.mean(axis=0))
    lines = [
        "| rank | method | mean AUROC | rank [95% bootstrap] | P(first) |",
        "|---|---|---|---|---|",
    ]
    for place, m in enumerate(order, start=1):
        low, high = np.percentile(ranks[:, m], [2.5, 97.5])
        lines.append(
            f"| {place} | {auroc.method.values[m]} | {values[:, m].mean():.4f} | "
            f"[{low:.0f}, {high:.0f}] | {np.mean(ranks[:, m] == 1):.3f} |"
        )
    return "\n".join(lines)


def variance_table(results: xr.Dataset) -> str:
    """Between- vs within-class-split variance of AUROC per method: the ICC with its interval
    and the F test of no split effect, Holm-adjusted over the methods."""
    table = stats.variance_components_table(results).sel({"metric": "auroc"})
    holm = stats.adjust_p(table["p_value"].values, "holm")
    rows = [
        "| method | between-split var | within-split var | ICC [95% CI] | within share [95% CI] "
        "| F-test p | Holm p |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, method in enumerate(table.method.values):
        t = table.sel({"method": method})
        icc, low, high = float(t.icc), float(t.icc_lower), float(t.icc_upper)
        rows.append(
            f"| {method} | {float(t.sigma2_between):.2e} | {float(t.sigma2_within):.2e} | "
            f"{icc:.2f} [{low:.2f}, {high:.2f}] | {1 - icc:.2f} [{1 - high:.2f}, {1 - low:.2f}] | "
            f"{float(t.p_value):.1e} | {holm[i]:.1e} |"
        )
    return "\n".join(rows)


def paired_difference_sources(results: xr.Dataset, reference: str = "msp") -> xr.Dataset:
    """Variance components of the paired differences ``method − reference`` in AUROC over the
    crossed design: where the noise of a comparison comes from (the score's own components
    include what every method shares, which a paired comparison cancels)."""
    score = results["score"]
    others = [m for m in score.method.values if m != reference]
    diffs = score.sel({"method": others}) - score.sel({"method": reference})
    return stats.variance_components(results.assign(score=diffs), metric="auroc")


def plot_by_class_split(results: xr.Dataset, path: Path, method: str = "msp") -> None:
    """KDE of one method's AUROC per class split (the study's Figure 2)."""
    from matplotlib.figure import Figure
    from scipy.stats import gaussian_kde

    auroc = _auroc(results).sel({"method": method})
    fig = Figure(figsize=(6.4, 3.6), layout="constrained")
    ax = fig.add_subplot()
    grid = np.linspace(float(auroc.min()) - 0.02, 1.0, 400)
    for split in sorted(set(results.class_split.values)):
        values = auroc.values[results.class_split.values == split]
        ax.plot(
            grid,
            gaussian_kde(values)(grid),
            label=f"known {split} (n={values.size}, mean {values.mean():.3f})",
        )
    ax.set(
        xlabel=f"AUROC ({method})",
        ylabel="density",
        title="AUROC over seeds, per fixed class split",
    )
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=110)


PAPER_METHODS = ["msp", "temperature", "odin", "openmax", "mc_dropout"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+")
    parser.add_argument("--splits", help="results of specs/digits_five_splits.toml")
    parser.add_argument("--design", help="results of specs/digits_variance_sources.toml")
    parser.add_argument("--out", default="docs/findings")
    args = parser.parse_args()
    for path in args.results:
        results = oodsim.open_results(path)
        name = Path(path).stem
        write_report(results, Path(args.out) / name, overwrite=True, source=path)
        print(
            f"## {name}: {results.sizes['seed']} seeds, {int(results.attrs['n_failed'])} failed\n"
        )
        print(spread_table(results), "\n")
        print("Named metric conventions (means over seeds):\n\n" + conventions_table(results), "\n")
        print("All methods:\n\n" + win_table(results), "\n")
        print("The study's five methods only:\n\n" + win_table(results, PAPER_METHODS), "\n")
        print("Welch, all methods:", required_summary(results))
        print("Welch, the study's five:", required_summary(results, PAPER_METHODS), "\n")
        print("Paired, all methods:", paired_summary(results))
        print("Paired, the study's five:", paired_summary(results, PAPER_METHODS), "\n")
        print("Ranking by mean AUROC, with rank intervals:\n\n" + ranking_table(results), "\n")
    if args.splits:
        results = oodsim.open_results(args.splits)
        folder = Path(args.out) / Path(args.splits).stem
        write_report(results, folder, overwrite=True, source=args.splits)
        print(
            f"## class splits: {results.sizes['seed']} seeds over "
            f"{len(set(results.class_split.values))} splits\n"
        )
        print(variance_table(results))
        plot_by_class_split(results, Path(args.out) / Path(args.splits).stem / "by_class_split.png")
        auroc = _auroc(results).sel({"method": "msp"})
        for split in sorted(set(results.class_split.values)):
            values = auroc.values[results.class_split.values == split]
            print(
                f"msp, known {split}: mean {values.mean():.3f}, std {values.std(ddof=1):.3f}, "
                f"min {values.min():.3f}, max {values.max():.3f}"
            )

    if args.design:
        results = oodsim.open_results(args.design)
        write_report(results, Path(args.out) / Path(args.design).stem, overwrite=True)
        for metric in ("auroc", "fpr95"):
            vc = stats.variance_components(results, metric=metric)
            print(f"## variance by source, {metric} ({vc.attrs['estimator']})\n")
            print(variance_sources_table(vc), "\n")
        vc = paired_difference_sources(results)
        estimator = vc.attrs["estimator"]
        print(f"## variance by source of paired differences method - msp, auroc ({estimator})\n")
        print(variance_sources_table(vc), "\n")


if __name__ == "__main__":
    main()
