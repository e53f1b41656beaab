"""Text tables of evaluation results, Markdown or aligned plain text: estimates with their
intervals (:func:`format_summary_table`, printed by the CLI), win probabilities, seeds needed to
separate two methods, variance components by class split.

Rows split by every dim other than method and metric that varies (ood / severity / dataset /
model); dims of one label are named once, in a note (:func:`fixed_note`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import xarray as xr

from oodsim.report.provenance import seed_exclusions
from oodsim.results import NO_SEVERITY, excluded_seeds
from oodsim.results.access import (
    as_text,
    at_metrics,
    cell_label,
    iter_cells,
    method_names,
    metrics_of,
    n_scored,
    ood_metrics,
    scored_seeds,
    select_metric,
)
from oodsim.stats import (
    as_score,
    estimate,
    variance_components_table,
)
from oodsim.stats.win import PAIRINGS, RELIABLE_FROM, win_probability_intervals


def too_small(reason: str) -> str:
    """The one line a report shows instead of a table or figure that would be empty or say
    nothing at this number of seeds: ``"n too small: <reason>."``."""
    return f"n too small: {reason}."


def seed_counts(n: xr.DataArray, dash: str = "–") -> str:
    """The numbers of seeds an estimate's cells used (``n``, cells of none left out) in words:
    ``"30"`` when every cell used as many, else ``"28–30"``; ``"0"`` when none used any."""
    counts = np.asarray(n.values)[np.asarray(n.values) > 0]
    if counts.size == 0:
        return "0"
    low, high = counts.min(), counts.max()
    return f"{low}" if low == high else f"{low}{dash}{high}"


def fmt(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` decimals; a dash when it is missing or not finite."""
    return "–" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def markdown_cell(value: object) -> str:
    """``value`` as the text of a Markdown table cell: a ``|`` in it (a detector label
    ``a|b``) escaped as ``\\|``, which would otherwise end the cell and break the table."""
    return str(value).replace("|", "\\|")


def markdown_row(cells: Sequence[object]) -> str:
    """One row of a Markdown table, every cell through :func:`markdown_cell`."""
    return "| " + " | ".join(markdown_cell(c) for c in cells) + " |"


def render(header: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    """A Markdown table (its cells escaped: :func:`markdown_cell`) or an aligned plain-text
    table."""
    if markdown:
        lines = [markdown_row(header), "|" + "|".join("---" for _ in header) + "|"]
        lines += [markdown_row(row) for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    row_format = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [row_format.format(*header), row_format.format(*("-" * w for w in widths))]
    lines += [row_format.format(*row) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def varying(da: xr.DataArray, skip: Sequence[str]) -> list[str]:
    """Dims (other than ``skip``) with more than one label: the ones worth a table column."""
    return [d for d in da.dims if d not in skip and da.sizes[d] > 1]


def fixed_note(da: xr.DataArray, skip: Sequence[str]) -> str:
    """``"model=resnet50"``-style note for dims of size one, which tables leave out; the
    ``severity`` label of protocols without levels ("all") says nothing and is left out too."""
    fixed = {
        d: da[d].values[0].item()
        for d in da.dims
        if d not in skip and da.sizes[d] == 1 and not (d == "severity" and _no_levels(da))
    }
    return cell_label(fixed)


def _no_levels(da: xr.DataArray) -> bool:
    return [str(v) for v in da["severity"].values] == [NO_SEVERITY]


_INTERVALS = {
    "t": "Student-t interval",
    "t (logit scale)": "Student-t interval on the logit scale",
    "bootstrap": "bootstrap percentile interval",
    "bound-aware": "bound-aware interval (logit-t inside, two-part where seeds sit on a bound)",
    "betting": "betting interval for a bounded mean",
}


def interval_name(est: xr.Dataset) -> str:
    """What :func:`oodsim.stats.estimate` computed, in words (``"95% Student-t interval"``)."""
    kind = str(est.attrs.get("interval", "t"))
    return f"{est.attrs['confidence']:.0%} {_INTERVALS.get(kind, kind + ' interval')}"


def estimate_table(est: xr.Dataset, metrics: Sequence[str], markdown: bool, digits: int) -> str:
    """Mean [lower, upper] of ``metrics`` per method (and per varying ood / severity / ...)."""
    outer = varying(est["mean"], ("method", "metric"))
    header = [*outer, "method", *metrics, "n"]
    rows = []
    for labels, cell in iter_cells(est["mean"], ("method", "metric")):
        for method in method_names(cell):
            where = {**labels, "method": method}
            row = [str(labels[d]) for d in outer] + [method]
            for name in metrics:
                e = select_metric(est.sel(where), name)
                row.append(
                    f"{fmt(e['mean'].item(), digits)} "
                    f"[{fmt(e['lower'].item(), digits)}, {fmt(e['upper'].item(), digits)}]"
                )
            n = est["n"].sel(where)
            row.append(
                f"{int(n.min())}" if n.min() == n.max() else f"{int(n.min())}-{int(n.max())}"
            )
            rows.append(row)
    return render(header, rows, markdown)


def format_summary_table(
    results: xr.Dataset | xr.DataArray, confidence: float = 0.95, digits: int = 3
) -> str:
    """Plain-text table of mean [confidence interval] per method × metric (rows also split
    by ood / severity / dataset / model when they vary); the CLI prints it. A metric that
    does not depend on the detector (the classifier's ``accuracy``) is one line under the
    table, not a column repeated per method; the interval is named once, below."""
    score = as_score(results)
    n = n_scored(score)
    if n == 0:  # a table of dashes said nothing of why
        seeds = score.sizes.get("seed", 1)
        return (
            f"No estimates: none of the {seeds} seeds has a score (each one failed or was "
            "excluded; the results' failure says why)"
        )
    note = fixed_note(score, ("seed", "method", "metric"))
    est = estimate(results, confidence=confidence)
    metrics = metrics_of(score, None)
    shared = [m for m in metrics if m not in ood_metrics(score) and _same_for_every_method(est, m)]
    columns = [m for m in metrics if m not in shared] or metrics
    lines = [f"Mean [{est.attrs['confidence']:.0%} interval] over {n} seeds"]
    lines[0] += f" ({note})" if note else ""
    lines += [estimate_table(est, columns, markdown=False, digits=digits)]
    for metric in (m for m in shared if m not in columns):
        e = select_metric(est, metric).isel(method=0)
        lines.append(
            f"classifier {metric} (the same for every method): {fmt(e['mean'].item(), digits)} "
            f"[{fmt(e['lower'].item(), digits)}, {fmt(e['upper'].item(), digits)}]"
        )
    lines.append(f"interval: {interval_name(est)}")
    return "\n".join(lines)


def _same_for_every_method(est: xr.Dataset, metric: str) -> bool:
    """Whether ``metric``'s estimate is one number, the same for every method (and cell):
    a property of the classifier, not of the detectors."""
    means = select_metric(est["mean"], metric).values
    return bool(np.all(means == means.reshape(-1)[0]) or np.all(np.isnan(means)))


def exclusion_effect_table(
    results: xr.Dataset, metric: str, markdown: bool = False, digits: int = 3
) -> str | None:
    """Each method's mean ``metric`` over the seeds the estimates use and over those plus the
    seeds excluded as degenerate (scored, masked by ``failure``), and the difference: how much
    the exclusion (the estimand E[score | classifier above chance]) moves the number. None when
    no seed was excluded as degenerate. Other dims (ood, level, model) are averaged."""
    failure = as_text(results["failure"])
    degenerate = failure.copy(data=excluded_seeds(failure.values))
    if not bool(degenerate.any()):
        return None
    ok = scored_seeds(results)
    score = results["score"].sel({"metric": metric})
    kept = score.where(ok)
    scored = score.where(ok | degenerate)
    others = [d for d in score.dims if d not in ("seed", "method")]
    rows = []
    for method in method_names(score):
        without = float(kept.sel({"method": method}).mean(["seed", *others]))
        with_ = float(scored.sel({"method": method}).mean(["seed", *others]))
        rows.append(
            [method, fmt(without, digits), fmt(with_, digits), fmt(with_ - without, digits)]
        )
    n_kept, n_all = int(ok.sum()), int((ok | degenerate).sum())
    header = [
        "method",
        f"without ({n_kept} seeds)",
        f"with degenerate ({n_all} seeds)",
        "difference",
    ]
    averaged = [d for d in others if score.sizes[d] > 1]
    note = f" (mean over {', '.join(averaged)})" if averaged else ""
    title = f"Mean {metric} without and with the degenerate seeds{note}:"
    return title + "\n" + render(header, rows, markdown)


def bootstrap_table(
    results: xr.Dataset, markdown: bool = False, confidence: float = 0.95, digits: int = 3
) -> str:
    """The table of an ImageNet-O run: per model × method, every metric's point estimate on
    the full test set and its percentile interval over the bootstrap seeds
    (:func:`oodsim.protocols.imagenet_o.bootstrap_interval`), under a title that says so."""
    # the protocol module pulls in torch: only reports of ImageNet-O results need it
    from oodsim.protocols.imagenet_o import bootstrap_interval

    est = bootstrap_interval(results, confidence)
    estimate = est["estimate"].sel(severity="all")
    metrics = [str(m) for m in estimate["metric"].values]
    boot = bool(json.loads(results.attrs["spec"])["bootstrap"])
    rows = []
    for model in estimate["model"].values:
        for method in estimate["method"].values:
            where = {"model": model, "method": method, "severity": "all"}
            row = [str(model), str(method)]
            for metric in metrics:
                cell = est.sel({**where, "metric": metric})
                text = fmt(cell["estimate"].item(), digits)
                if boot:
                    text += (
                        f" [{fmt(cell['lower'].item(), digits)}, "
                        f"{fmt(cell['upper'].item(), digits)}]"
                    )
                row.append(text)
            row.append(str(int(est["n"].sel(where).min())))
            rows.append(row)
    n_seeds = results.sizes["seed"]
    if boot:
        title = (
            f"ImageNet-O: point estimate on the full test set [{est.attrs['interval']} over "
            f"{n_seeds} seeds, each a {est.attrs['seed_meaning']}]"
        )
    else:
        title = (
            "ImageNet-O: the full test set (bootstrap = false: no test-set sampling interval; "
            "set bootstrap = true and [seeds] n = 1000 for one)"
        )
    header = ["model", "method", *metrics, "n" if boot else "seeds"]
    return title + "\n" + render(header, rows, markdown)


def fmt_probability(value: float, digits: int = 3) -> str:
    """A probability with ``digits`` decimals; a positive one that would round to zero reads
    ``<0.001`` (never a bare zero or a blank for a method that did win some draws)."""
    if value is None or not np.isfinite(value):
        return "–"
    floor = 0.5 * 10.0**-digits
    return f"<{10.0**-digits:.{digits}f}" if 0 < value < floor else f"{value:.{digits}f}"


def win_cell(wins: xr.Dataset, where: dict[str, object], digits: int = 3) -> str:
    """``0.216 [0.141, 0.302]``: one win probability with its bootstrap interval."""
    w = wins.sel(where)
    return (
        f"{fmt_probability(w['win_probability'].item(), digits)} "
        f"[{fmt_probability(w['lower'].item(), digits)}, "
        f"{fmt_probability(w['upper'].item(), digits)}]"
    )


def win_intervals(
    results: xr.Dataset | xr.DataArray,
    metric: str | Sequence[str] | None,
    k: int,
    n_draws: int,
    rng: object,
    pairings: Sequence[str] = PAIRINGS,
    n_boot: int = 400,
) -> xr.Dataset:
    """:func:`oodsim.stats.win.win_probability_intervals` as reports use it: the bootstrap
    replicates get at most as many draws as the estimate (``min(1000, n_draws)``)."""
    return win_probability_intervals(
        results,
        metric,
        k=k,
        n_draws=n_draws,
        rng=rng,
        pairings=pairings,
        n_boot=n_boot,
        boot_draws=min(1_000, int(n_draws)),
    )


def win_interval_note(wins: xr.Dataset, n_seeds: int) -> str:
    """What the brackets of a win table are, in words; below
    :data:`~oodsim.stats.win.RELIABLE_FROM` seeds, that they are not reliable there."""
    rough = (
        f"; not reliable below {RELIABLE_FROM} seeds: from {n_seeds} they covered less than "
        "90% of the time in simulation (benchmarks/win_coverage.py)"
        if n_seeds < RELIABLE_FROM
        else ""
    )
    return (
        f"[{wins.attrs['confidence']:.0%} bootstrap percentile interval: the {n_seeds} seeds "
        f"resampled {wins.attrs['n_boot']} times, {wins.attrs['boot_draws']} draws each{rough}]"
    )


def win_table(
    results: xr.Dataset | xr.DataArray,
    k: int,
    n_draws: int,
    rng: object,
    pairings: Sequence[str] = PAIRINGS,
    markdown: bool = True,
    metric: str | Sequence[str] | None = None,
    wins: xr.Dataset | None = None,
) -> str:
    """Win probabilities [bootstrap interval] of every OOD metric (``accuracy`` is the same for
    every detector), or of ``metric``, one column per metric and pairing, side by side. Every
    method has a row, however small its probability (``<0.001``, never dropped)."""
    score = as_score(results)
    names = ood_metrics(score) if metric is None else metric
    if wins is None:
        wins = win_intervals(results, names, k, n_draws, rng, pairings)
    wp = wins["win_probability"]
    pairings = [str(p) for p in wp["pairing"].values]
    outer = varying(wp, ("method", "metric", "pairing"))
    metrics = metrics_of(wp, None) if "metric" in wp.dims else []  # one: named by the caption
    header = [*outer, "method"]
    header += [f"{name}{' ' if name else ''}{p}" for name in metrics or [""] for p in pairings]
    rows = []
    for labels, _ in iter_cells(wp, ("method", "metric", "pairing")):
        for method in method_names(score):
            row = [str(labels[d]) for d in outer] + [method]
            for name in metrics or [None]:
                for p in pairings:
                    where = {**labels, "method": method, "pairing": p}
                    if name is not None:
                        where["metric"] = name
                    row.append(win_cell(wins, where))
            rows.append(row)
    return render(header, rows, markdown=markdown)


def _span(values: np.ndarray) -> str:
    """``"25"`` or ``"23-25"``: the finite whole numbers of ``values``, as one or a range."""
    finite = values[np.isfinite(values)].astype(int)
    if finite.size == 0:
        return "–"
    lo, hi = int(finite.min()), int(finite.max())
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def variance_table(results: xr.Dataset, confidence: float) -> str | None:
    """The ANOVA table of the OOD metrics by class split under a sentence giving its degrees
    of freedom (between: splits − 1, within: seeds − splits); None when the split does not
    vary, "n too small" when no split has two seeds (nothing to estimate the within-split
    variance from)."""
    if "class_split" not in results.coords or results["class_split"].dims != ("seed",):
        return None
    excluded = [seed for group in seed_exclusions(results).values() for seed, _ in group]
    used = ~np.isin(results["seed"].values, excluded)
    splits, counts = np.unique(results["class_split"].values[used], return_counts=True)
    if len(splits) < 2:
        return None
    if counts.max() < 2:
        return too_small("no class split has two seeds to compare within it")
    score = as_score(results)
    ood = ood_metrics(score)
    vc = variance_components_table(at_metrics(score, ood) if ood else score, confidence=confidence)
    outer = varying(vc["icc"], ("method", "metric"))
    header = [*outer, "method", "metric", "sd between", "sd within", "ICC [CI]", "p (F)"]
    rows = []
    for labels, _ in iter_cells(vc["icc"], ()):
        v = vc.sel(labels)
        icc = (
            f"{fmt(v['icc'].item(), 2)} "
            f"[{fmt(v['icc_lower'].item(), 2)}, {fmt(v['icc_upper'].item(), 2)}]"
        )
        rows.append(
            [str(labels[d]) for d in outer]
            + [str(labels["method"]), str(labels["metric"])]
            + [
                fmt(np.sqrt(v["sigma2_between"].item()), 4),
                fmt(np.sqrt(v["sigma2_within"].item()), 4),
                icc,
                f"{v['p_value'].item():.2g}",
            ]
        )
    between, within = _span(vc["df_between"].values), _span(vc["df_within"].values)
    df = (
        f"Degrees of freedom: {between} between class splits (splits − 1), {within} within "
        "(seeds − splits); p (F) tests the between-split variance on them."
    )
    return df + "\n\n" + render(header, rows, markdown=True)
