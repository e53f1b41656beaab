"""Time C-OOD severity levels at ImageNet-21k scale: our vectorized path vs. sklearn per level.

Synthetic κ for 21,000 OOD classes × 200 samples (150 estimation + 50 test each) and 50,000 ID
samples; group size 1,000, 11 levels. "ours" = class severity + sorting/windows + all 11 AUROCs
with oodsim.protocols.severity; "sklearn" = the same severity and windows, then
``roc_auc_score`` on each level's concatenated ID + OOD test κ. Prints both times, the ratio
and the largest absolute AUROC difference.

    python benchmarks/severity.py [--classes 21000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.metrics import roc_auc_score

from oodsim.protocols.severity import levels as sev


def make_data(n_classes: int, per_class: int, n_id: int, seed: int = 0):
    """κ in (0, 1) like softmax scores, with class means spread over the range."""
    rng = np.random.default_rng(seed)
    means = rng.normal(0.0, 1.0, n_classes)
    logit = rng.normal(means[:, None], 1.0, (n_classes, per_class))
    ood = 1.0 / (1.0 + np.exp(-logit))
    id_kappa = 1.0 / (1.0 + np.exp(-rng.normal(1.5, 1.0, n_id)))
    return id_kappa, ood


def ours(id_kappa, est, est_class, test, group_size):
    severity = sev.class_severity(est, est_class, test.shape[0])
    levels = sev.severity_levels(severity, group_size)
    return sev.level_metrics(id_kappa, test, levels, metrics=("auroc",))["auroc"]


def with_sklearn(id_kappa, est, est_class, test, group_size):
    severity = sev.class_severity(est, est_class, test.shape[0])
    levels = sev.severity_levels(severity, group_size)
    out = []
    for level in levels:
        ood = test[level].ravel()
        kappa = np.r_[id_kappa, ood]
        is_id = np.r_[np.ones(id_kappa.size, bool), np.zeros(ood.size, bool)]
        out.append(roc_auc_score(is_id, kappa))
    return np.array(out)


def best_time(fn, repeats: int, *args):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn(*args)
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=21_000)
    parser.add_argument("--n-est", type=int, default=150)
    parser.add_argument("--n-test", type=int, default=50)
    parser.add_argument("--n-id", type=int, default=50_000)
    parser.add_argument("--group-size", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    id_kappa, ood = make_data(args.classes, args.n_est + args.n_test, args.n_id)
    est = np.ascontiguousarray(ood[:, : args.n_est]).ravel()  # flat κ + class ids, as loaded
    est_class = np.repeat(np.arange(args.classes), args.n_est)
    test = np.ascontiguousarray(ood[:, args.n_est :])  # (K, n_test): row = class
    inputs = (id_kappa, est, est_class, test, args.group_size)
    print(
        f"{args.classes} OOD classes x {args.n_est + args.n_test} samples "
        f"({ood.size / 1e6:.1f}M κ), {args.n_id} ID, G={args.group_size}, 11 levels; "
        f"best of {args.repeats}"
    )
    t_ours, a_ours = best_time(ours, args.repeats, *inputs)
    t_skl, a_skl = best_time(with_sklearn, args.repeats, *inputs)
    print(f"ours (severity + levels + 11 AUROCs): {t_ours * 1e3:9.1f} ms")
    print(f"sklearn roc_auc_score per level:      {t_skl * 1e3:9.1f} ms")
    print(f"ratio sklearn / ours:                 {t_skl / t_ours:9.1f} x")
    print(f"max |AUROC difference|:               {np.max(np.abs(a_ours - a_skl)):9.2e}")
    print("AUROC by level:", np.round(a_ours, 4).tolist())

    severity = sev.class_severity(est, est_class, args.classes)
    t_sev, _ = best_time(sev.class_severity, args.repeats, est, est_class, args.classes)
    levels = sev.severity_levels(severity, args.group_size)
    t_auroc, _ = best_time(sev.level_auroc, args.repeats, id_kappa, test, levels)
    t_all, _ = best_time(sev.level_metrics, args.repeats, id_kappa, test, levels)
    print(f"  of which class severity: {t_sev * 1e3:.1f} ms, 11 AUROCs: {t_auroc * 1e3:.1f} ms")
    print(f"all four metrics (auroc, aupr_in, aupr_out, fpr95), 11 levels: {t_all * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
