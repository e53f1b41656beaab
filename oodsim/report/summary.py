"""Plots (PNG, matplotlib Agg) and Markdown / plain-text summaries of evaluation results.

Every function takes the results Dataset (``score`` over seed × method × metric × severity
[× ood, model, dataset]) and draws one panel per combination of the dims other than seed and
method, so the same code serves open-set runs (severity "all") and severity sweeps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import xarray as xr
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from scipy import stats as sps

from oodsim.stats import (
    PAIRING_LABELS,
    PAIRINGS,
    StopDecision,
    as_score,
    estimate,
    required_simulations_table,
    running_interval,
    variance_components_table,
    win_probabilities,
)
from oodsim.stats._common import (
    cell_label,
    is_ood_metric,
    iter_cells,
    metrics_of,
    ood_metrics,
    select_metric,
)

_NCOLS = 3
_GRID = 256
#: write_report draws every metric's distribution only up to this many panels.
_MAX_PANELS = 24


# ----------------------------------------------------------------------------- helpers


def _figure(n_panels: int, width: float = 4.8, height: float = 3.4) -> tuple[Figure, list[Axes]]:
    """A figure with ``n_panels`` axes on a grid of at most three columns."""
    ncols = min(_NCOLS, max(n_panels, 1))
    nrows = math.ceil(max(n_panels, 1) / ncols)
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = [fig.add_subplot(nrows, ncols, i + 1) for i in range(max(n_panels, 1))]
    return fig, axes


def _colors(n: int) -> list:
    """One distinct color per method: the default cycle up to 10 methods, tab20 beyond."""
    if n <= 10:
        return [f"C{i}" for i in range(n)]
    return [colormaps["tab20"](i % 20) for i in range(n)]


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=100)
    return path


def _default_metric(score: xr.DataArray) -> str:
    """``auroc`` when present, else the first metric."""
    names = metrics_of(score, None)
    if not names:
        raise ValueError("results have no metric dimension")
    return "auroc" if "auroc" in names else names[0]


def _methods(da: xr.DataArray) -> list[str]:
    return [str(m) for m in da["method"].values]


def _fmt(value: float, digits: int = 3) -> str:
    return "–" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def _render(header: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    """A Markdown table or an aligned plain-text table."""
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*row) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def _varying(da: xr.DataArray, skip: Sequence[str]) -> list[str]:
    """Dims (other than ``skip``) with more than one label: the ones worth a table column."""
    return [d for d in da.dims if d not in skip and da.sizes[d] > 1]


def _fixed_note(da: xr.DataArray, skip: Sequence[str]) -> str:
    """``"severity=all"``-style note for dims of size one, which tables leave out."""
    fixed = {d: da[d].values[0].item() for d in da.dims if d not in skip and da.sizes[d] == 1}
    return cell_label(fixed)


def _stopping(results: xr.Dataset | xr.DataArray) -> StopDecision | None:
    text = results.attrs.get("stopping")
    if not text:
        return None
    try:
        return StopDecision.from_json(text)
    except (ValueError, KeyError, TypeError):
        return None


# ----------------------------------------------------------------------------- plots


def plot_distributions(
    results: xr.Dataset | xr.DataArray, path: str | Path, metric: str | Sequence[str] | None = None
) -> Path:
    """Kernel density of the score over seeds, one curve per method and one panel per metric
    (and per ood / dataset / model / severity label). Constant or single-seed methods are
    drawn as a vertical line; a rug marks the seeds."""
    score = as_score(results)
    panels = []
    for name in metrics_of(score, metric):
        sub = select_metric(score, name)
        for labels, cell in iter_cells(sub, ("seed", "method")):
            panels.append((name, labels, cell))
    fig, axes = _figure(len(panels))
    colors = _colors(score.sizes.get("method", 1))
    for ax, (name, labels, cell) in zip(axes, panels, strict=False):
        values = cell.transpose("seed", "method").values
        finite = values[np.isfinite(values)]
        lo, hi = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
        pad = max(hi - lo, 1e-3) * 0.25
        grid = np.linspace(lo - pad, hi + pad, _GRID)
        for color, method, column in zip(colors, _methods(cell), values.T, strict=True):
            v = column[np.isfinite(column)]
            if v.size == 0:
                continue
            try:
                density = sps.gaussian_kde(v)(grid) if v.size > 1 else None
            except (np.linalg.LinAlgError, ValueError):
                density = None
            if density is None or not np.all(np.isfinite(density)):
                ax.axvline(v.mean(), color=color, label=f"{method} (n={v.size})")
            else:
                ax.plot(grid, density, color=color, label=f"{method} (n={v.size})")
            ax.plot(v, np.zeros_like(v), "|", color=color, alpha=0.4, markersize=8)
        ax.set_xlabel(name)
        ax.set_ylabel("density")
        ax.set_title(" | ".join(filter(None, [name, cell_label(labels)])), fontsize=9)
    axes[0].legend(fontsize=7)
    fig.suptitle("Score distribution over seeds")
    return _save(fig, path)


def plot_win_probability(
    results: xr.Dataset | xr.DataArray,
    path: str | Path,
    metric: str | None = None,
    k: int = 5,
    n_draws: int = 10_000,
    rng: np.random.Generator | int | None = 0,
    pairing: str = "independent",
) -> Path:
    """Bar chart of the probability that each method has the best mean over ``k`` seeds
    (``pairing`` as in :func:`oodsim.stats.win_probability`, named in the title). Only OOD
    metrics: ``accuracy`` is the same for every detector and raises ValueError."""
    score = as_score(results)
    metric = metric or _default_metric(score)
    if not is_ood_metric(metric):
        raise ValueError(
            f"win probabilities rank OOD detectors; {metric!r} is not an OOD metric "
            f"(use one of {', '.join(ood_metrics(score)) or 'none'})"
        )
    wp = win_probabilities(results, metric, k=k, n_draws=n_draws, rng=rng, pairing=pairing)
    cells = list(iter_cells(wp, ("method",)))
    fig, axes = _figure(len(cells))
    for ax, (labels, cell) in zip(axes, cells, strict=False):
        methods = _methods(cell)
        ax.bar(range(len(methods)), cell.values, color=_colors(len(methods)))
        ax.set_xticks(range(len(methods)), methods, rotation=30, ha="right")
        ax.set_ylim(0, 1)
        ax.set_ylabel("P(best mean)")
        ax.set_title(cell_label(labels) or metric, fontsize=9)
    fig.suptitle(
        f"P(best mean {metric} over {k} seeds)\n{PAIRING_LABELS[pairing]}, {n_draws} draws",
        fontsize=10,
    )
    return _save(fig, path)


def plot_required_simulations(
    results: xr.Dataset | xr.DataArray,
    path: str | Path,
    metric: str | None = None,
    alpha: float = 0.05,
    test: str = "welch",
) -> Path:
    """Heatmap of the seeds a two-sided test needs to separate each pair of methods; empty
    cells never reach significance within the available seeds."""
    score = as_score(results)
    metric = metric or _default_metric(score)
    table = required_simulations_table(results, metric, alpha=alpha, test=test)
    cells = list(iter_cells(table, ("method", "versus")))
    m = table.sizes["method"]
    fig, axes = _figure(len(cells), width=1.0 + 0.7 * m, height=0.8 + 0.6 * m)
    cmap = colormaps["viridis_r"]
    norm = LogNorm(vmin=2, vmax=max(score.sizes["seed"], 3))
    for ax, (labels, cell) in zip(axes, cells, strict=False):
        values = cell.transpose("method", "versus").values
        ax.imshow(np.ma.masked_invalid(values), cmap=cmap, norm=norm, aspect="equal")
        for (i, j), value in np.ndenumerate(values):
            if np.isfinite(value):
                r, g, b, _ = cmap(norm(value))
                ink = "k" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "w"
                ax.text(j, i, f"{int(value)}", ha="center", va="center", fontsize=8, color=ink)
        methods = _methods(cell)
        ax.set_xticks(range(m), methods, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(m), methods, fontsize=8)
        ax.set_title(cell_label(labels) or metric, fontsize=9)
    fig.suptitle(
        f"Seeds until a two-sided {test} test is significant ({metric}, alpha={alpha:g}; "
        f"empty: not within {score.sizes['seed']} seeds)",
        fontsize=9,
    )
    return _save(fig, path)


def plot_running_mean(
    results: xr.Dataset | xr.DataArray,
    path: str | Path,
    metric: str | None = None,
    confidence: float = 0.95,
) -> Path:
    """Running mean ± Student-t interval against the number of seeds, per method, in seed
    order; a dashed line marks the stopping point recorded in ``attrs["stopping"]``."""
    score = as_score(results)
    metric = metric or _default_metric(score)
    sub = select_metric(score, metric)
    cells = list(iter_cells(sub, ("seed", "method")))
    decision = _stopping(results)
    fig, axes = _figure(len(cells), width=5.4)
    for ax, (labels, cell) in zip(axes, cells, strict=False):
        values = cell.transpose("seed", "method").values
        methods = _methods(cell)
        for color, method, column in zip(_colors(len(methods)), methods, values.T, strict=True):
            n, mean, lower, upper = running_interval(column, confidence)
            ax.plot(n, mean, color=color, label=method)
            ax.fill_between(n, lower, upper, color=color, alpha=0.2, linewidth=0)
        if decision is not None:
            ax.axvline(
                decision.n_seeds,
                color="k",
                linestyle="--",
                label=f"stop ({decision.rule}, n={decision.n_seeds})",
            )
        ax.set_xlabel("number of seeds")
        ax.set_ylabel(f"running mean {metric}")
        ax.set_title(cell_label(labels) or metric, fontsize=9)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Running mean with {confidence:.0%} interval ({metric})")
    return _save(fig, path)


# ----------------------------------------------------------------------------- tables


def _estimate_table(
    results: xr.Dataset | xr.DataArray, confidence: float, markdown: bool, digits: int
) -> str:
    est = estimate(results, confidence=confidence)
    metrics = metrics_of(est["mean"], None)
    outer = _varying(est["mean"], ("method", "metric"))
    header = [*outer, "method", *metrics, "n"]
    rows = []
    for labels, cell in iter_cells(est["mean"], ("method", "metric")):
        for method in _methods(cell):
            where = {**labels, "method": method}
            row = [str(labels[d]) for d in outer] + [method]
            for name in metrics:
                e = est.sel({**where, "metric": name})
                row.append(
                    f"{_fmt(e['mean'].item(), digits)} "
                    f"[{_fmt(e['lower'].item(), digits)}, {_fmt(e['upper'].item(), digits)}]"
                )
            n = est["n"].sel(where)
            row.append(
                f"{int(n.min())}" if n.min() == n.max() else f"{int(n.min())}-{int(n.max())}"
            )
            rows.append(row)
    return _render(header, rows, markdown)


def format_summary_table(
    results: xr.Dataset | xr.DataArray, confidence: float = 0.95, digits: int = 3
) -> str:
    """Plain-text table of mean [confidence interval] per method × metric (rows also split
    by ood / severity / dataset / model when they vary); the CLI prints it."""
    score = as_score(results)
    note = _fixed_note(score, ("seed", "method", "metric"))
    title = f"Mean [{confidence:.0%} t-interval] over {score.sizes['seed']} seeds" + (
        f" ({note})" if note else ""
    )
    return title + "\n" + _estimate_table(results, confidence, markdown=False, digits=digits)


def _win_table(
    results: xr.Dataset | xr.DataArray, k: int, n_draws: int, rng: object, pairing: str
) -> str:
    """Win probabilities of every OOD metric (``accuracy`` is the same for every detector)."""
    score = as_score(results)
    wp = win_probabilities(
        results, ood_metrics(score), k=k, n_draws=n_draws, rng=rng, pairing=pairing
    )
    outer = _varying(wp, ("method", "metric"))
    metrics = metrics_of(wp, None)
    header = [*outer, "method", *metrics]
    rows = []
    for labels, cell in iter_cells(wp, ("method", "metric")):
        for method in _methods(score):
            values = [cell.sel({"method": method, "metric": name}).item() for name in metrics]
            rows.append([str(labels[d]) for d in outer] + [method] + [_fmt(v, 3) for v in values])
    return _render(header, rows, markdown=True)


def _required_table(results: xr.Dataset | xr.DataArray, metric: str, alpha: float) -> str:
    table = required_simulations_table(results, metric, alpha=alpha)
    parts = []
    for labels, cell in iter_cells(table, ("method", "versus")):
        methods = _methods(cell)
        values = cell.transpose("method", "versus").values
        rows = [
            [a] + ["" if not np.isfinite(v) else str(int(v)) for v in row]
            for a, row in zip(methods, values, strict=True)
        ]
        heading = f"*{cell_label(labels)}*\n\n" if labels else ""
        parts.append(heading + _render(["", *methods], rows, markdown=True))
    return "\n\n".join(parts)


def _variance_table(results: xr.Dataset, confidence: float) -> str | None:
    if "class_split" not in results.coords or results["class_split"].dims != ("seed",):
        return None
    if len(np.unique(results["class_split"].values)) < 2:
        return None
    vc = variance_components_table(results, confidence=confidence)
    outer = _varying(vc["icc"], ("method", "metric"))
    header = [*outer, "method", "metric", "sd between", "sd within", "ICC [CI]", "p (F)"]
    rows = []
    for labels, _ in iter_cells(vc["icc"], ()):
        v = vc.sel(labels)
        icc = (
            f"{_fmt(v['icc'].item(), 2)} "
            f"[{_fmt(v['icc_lower'].item(), 2)}, {_fmt(v['icc_upper'].item(), 2)}]"
        )
        rows.append(
            [str(labels[d]) for d in outer]
            + [str(labels["method"]), str(labels["metric"])]
            + [
                _fmt(np.sqrt(v["sigma2_between"].item()), 4),
                _fmt(np.sqrt(v["sigma2_within"].item()), 4),
                icc,
                f"{v['p_value'].item():.2g}",
            ]
        )
    return _render(header, rows, markdown=True)


def _win_text(
    results: xr.Dataset | xr.DataArray,
    k: int,
    n_draws: int,
    rng: object,
    pairing: str,
    ood: list[str],
) -> str:
    """The win-probability section of ``summary.md``: what was drawn, then the table."""
    score = as_score(results)
    if score.sizes["seed"] < k:
        return f"Not computed: the results have {score.sizes['seed']} seeds, fewer than k = {k}."
    if not ood:
        return "Not computed: the results have no OOD metric."
    how = {
        "independent": f"each method's {k} seeds drawn from its own seeds, as in the study",
        "paired": f"one draw of {k} seeds shared by all methods",
    }[pairing]
    skipped = [name for name in metrics_of(score, None) if name not in ood]
    note = f" {', '.join(skipped)}: left out, the same for every detector." if skipped else ""
    return (
        f"Probability that a method has the best mean in a {k}-seed experiment "
        f"({PAIRING_LABELS[pairing]}: {how}; {n_draws} draws without replacement, "
        f"ties split).{note}\n\n" + _win_table(results, k, n_draws, rng, pairing)
    )


def write_report(
    results: xr.Dataset | xr.DataArray,
    out_dir: str | Path,
    metric: str | None = None,
    k: int = 5,
    alpha: float = 0.05,
    n_draws: int = 10_000,
    rng: np.random.Generator | int | None = 0,
    pairing: str = "independent",
) -> Path:
    """Write all plots and ``summary.md`` (estimates, win probabilities, required
    simulations, variance components by class split, stopping decision) into ``out_dir``;
    return the path of ``summary.md``. ``metric`` (default auroc) drives the per-metric
    plots and the required-simulations table; win probabilities cover the OOD metrics only
    and draw seeds as ``pairing`` says (see :func:`oodsim.stats.win_probability`)."""
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {', '.join(PAIRINGS)}, got {pairing!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    score = as_score(results)
    metric = metric or _default_metric(score)
    rng = np.random.default_rng(rng)
    n_panels = int(np.prod([n for d, n in score.sizes.items() if d not in ("seed", "method")]))
    enough = score.sizes["seed"] >= k  # a k-seed experiment needs k seeds to draw from
    ood = ood_metrics(score)
    win_metric = metric if is_ood_metric(metric) else (ood[0] if ood else None)
    figures = {
        "distributions.png": plot_distributions(
            results, out / "distributions.png", None if n_panels <= _MAX_PANELS else metric
        ),
        "required_simulations.png": plot_required_simulations(
            results, out / "required_simulations.png", metric, alpha=alpha
        ),
        "running_mean.png": plot_running_mean(results, out / "running_mean.png", metric),
    }
    if enough and win_metric is not None:
        figures["win_probability.png"] = plot_win_probability(
            results,
            out / "win_probability.png",
            win_metric,
            k=k,
            n_draws=n_draws,
            rng=rng,
            pairing=pairing,
        )
    n_failed = int(np.isnan(score).all(dim=[d for d in score.dims if d != "seed"]).sum())
    note = _fixed_note(score, ("seed", "method", "metric"))
    lines = [
        "# oodsim report",
        "",
        f"- seeds: {score.sizes['seed']} ({n_failed} failed)",
        f"- methods: {', '.join(_methods(score))}",
        f"- metrics: {', '.join(metrics_of(score, None))} (fpr95: lower is better)",
    ]
    if note:
        lines.append(f"- {note}")
    lines += [
        "",
        "## Estimates",
        "",
        "Mean over seeds [95% Student-t interval for the expected score], n = seeds used.",
        "",
        _estimate_table(results, 0.95, markdown=True, digits=4),
        "",
        "## Win probability",
        "",
        _win_text(results, k, n_draws, rng, pairing, ood),
        "",
        "## Required simulations",
        "",
        f"Seeds until a two-sided Welch t-test separates two methods on {metric} "
        f"(alpha = {alpha:g}); empty: not within {score.sizes['seed']} seeds.",
        "",
        _required_table(results, metric, alpha),
        "",
    ]
    if isinstance(results, xr.Dataset) and (variance := _variance_table(results, 0.95)):
        lines += [
            "## Sources of variance",
            "",
            "One-way random-effects ANOVA of the seeds grouped by class split "
            "(ICC = share of the variance due to the class split).",
            "",
            variance,
            "",
        ]
    decision = _stopping(results)
    lines += ["## Stopping decision", ""]
    if decision is None:
        lines.append("No stopping rule recorded (fixed number of seeds).")
    else:
        lines += [
            _render(
                ["rule", "stop", "seeds", "statistic", "reason"],
                [
                    [
                        decision.rule,
                        str(decision.stop),
                        str(decision.n_seeds),
                        f"{decision.statistic:.4g}",
                        decision.reason,
                    ]
                ],
                markdown=True,
            )
        ]
    lines += ["", "## Figures", ""]
    lines += [f"![{name[:-4]}]({name})" for name in figures]
    if isinstance(results, xr.Dataset) and results.attrs.get("protocol") == "severity":
        from oodsim.report.severity import write_severity_report  # severity results only

        levels = write_severity_report(results, out / "severity", metric=metric)
        lines += ["", "## Severity levels", "", f"See [{levels.name}](severity/{levels.name})."]
    path = out / "summary.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
