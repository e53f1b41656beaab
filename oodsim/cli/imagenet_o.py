"""``oodsim imagenet-o``: the ImageNet-O numbers of one model (image folders) or of saved logits,
with an optional test-set sampling interval (``--bootstrap N``), or the table of a saved run's
results (``--results``).

Spec files of several models (and seeds) run with ``oodsim run specs/imagenet_o.toml`` like
every protocol; this command is the direct single-model evaluation without store or cluster.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from oodsim.errors import SpecError

#: printed names of the metrics of :func:`oodsim.protocols.imagenet_o.evaluate_logits`
_NAMES = {"aupr": "AUPR", "ap": "AP", "auroc": "AUROC", "fpr95": "FPR@95TPR"}


def _number(result: dict[str, Any], name: str) -> str:
    text = f"{_NAMES[name]} {100 * result[name]:.2f} %"
    if "intervals" in result:
        lower, upper = result["intervals"][name]
        text += f" [{100 * lower:.2f}, {100 * upper:.2f}]"
    if name == "aupr":
        text += f" (chance {100 * result['chance']:.2f} %)"
    return text


def format_line(result: dict[str, Any]) -> str:
    """AUPR (with chance), AP, AUROC, FPR@95TPR and the image counts on one line; with a
    bootstrap interval (``evaluate_logits(..., n_bootstrap=N)``) each number is followed by
    its ``[lower, upper]`` and a second line says what that interval is."""
    names = [n for n in _NAMES if n in result]
    line = ", ".join(_number(result, n) for n in names) + (
        f" ({result['n_id']} ID / {result['n_ood']} ImageNet-O images)"
    )
    if "intervals" in result:
        line += (
            f"\nnumbers: the full test set; [lower, upper]: {result['interval']} over "
            f"{result['n_bootstrap']} bootstrap replicates of the fixed test set"
        )
    return line


def format_interval_table(results: Any, confidence: float = 0.95, digits: int = 3) -> str:
    """The table of an ImageNet-O run: per model × method, every metric's point estimate on
    the full test set and its percentile interval over the bootstrap seeds
    (:func:`oodsim.protocols.imagenet_o.bootstrap_interval`), under a title that says so."""
    # loaded by the command that needs it, so `oodsim --help` stays fast
    from oodsim.protocols.imagenet_o import bootstrap_interval
    from oodsim.report.tables import fmt, render

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
    return title + "\n" + render(header, rows, markdown=False)


def _cmd_imagenet_o(args: argparse.Namespace) -> int:
    # imported here: the protocol pulls in torch and timm, which other commands never need
    from oodsim.protocols import imagenet_o

    if args.results:
        from oodsim.results_io import open_results  # (fast --help)

        print(format_interval_table(open_results(args.results)))
        return 0
    if args.id_logits or args.ood_logits:
        if not (args.id_logits and args.ood_logits):
            raise SpecError("--id-logits/--ood-logits", "one of them", "both .npy files")
        result = imagenet_o.evaluate_logit_files(
            args.id_logits, args.ood_logits, n_bootstrap=args.bootstrap, seed=args.seed
        )
    elif args.model and args.id_root and args.ood_root:
        result = imagenet_o.evaluate_folders(
            args.id_root,
            args.ood_root,
            args.model,
            pretrained=not args.random_weights,
            weights=args.weights,
            image_size=args.image_size,
            batch_size=args.batch_size,
            save_logits=args.save_logits,
            n_bootstrap=args.bootstrap,
            seed=args.seed,
        )
    else:
        raise SpecError(
            "imagenet-o",
            "missing inputs",
            "--model with --id-root and --ood-root, --id-logits with --ood-logits, or "
            "--results of a run (several models: `oodsim run specs/imagenet_o.toml`)",
        )
    print(format_line(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


def add_command(commands: Any) -> None:
    """Add ``imagenet-o`` to the ``oodsim`` subparsers."""
    inet = commands.add_parser(
        "imagenet-o",
        help="ImageNet-O AUPR of one model (image folders) or of saved logits",
        description="The ImageNet-O recipe (softmax over the 200 classes, AUPR with ImageNet-O "
        "as positives) for one model or saved logits, or the table of a saved run's results. "
        "Specs of several models: `oodsim run specs/imagenet_o.toml`.",
    )
    inet.add_argument("--model", help="timm:<name> or torchvision:<name>")
    inet.add_argument("--id-root", help="ImageNet val folder with one folder per wnid")
    inet.add_argument("--ood-root", help="ImageNet-O folder")
    inet.add_argument("--weights", help="weights file (default: the local torch/HF caches)")
    inet.add_argument("--random-weights", action="store_true", help="random init (smoke test)")
    inet.add_argument("--image-size", type=int, help="override the model's input size")
    inet.add_argument("--batch-size", type=int, default=64)
    inet.add_argument("--save-logits", help="folder for id_logits.npy / ood_logits.npy")
    inet.add_argument("--id-logits", help="saved ID logits (.npy, n x 1000 or n x 200)")
    inet.add_argument("--ood-logits", help="saved ImageNet-O logits (.npy)")
    inet.add_argument(
        "--bootstrap",
        type=int,
        default=0,
        metavar="N",
        help="also print the 95%% bootstrap interval (test-set sampling) of every number over "
        "N bootstrap replicates of the test set (e.g. 1000)",
    )
    inet.add_argument(
        "--seed", type=int, default=0, help="first bootstrap seed (replicates SEED ... SEED+N-1)"
    )
    inet.add_argument(
        "--results",
        help="print the point estimates and bootstrap intervals of a saved ImageNet-O run "
        "(results/<name>.zarr of `oodsim run`)",
    )
    inet.add_argument("--json", help="also write the numbers to this JSON file")
    inet.set_defaults(func=_cmd_imagenet_o)
