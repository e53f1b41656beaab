"""``oodsim severity`` and ``oodsim imagenet-o``: subcommands added by :func:`add_commands`.

``oodsim/cli.py`` calls ``add_commands(subparsers)``; each command sets ``func`` and returns an
exit code, and :class:`~oodsim.errors.OodsimError` is reported by the main entry point.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from oodsim.errors import SpecError


def _cmd_severity(args: argparse.Namespace) -> int:
    from oodsim.cli import run_from_args
    from oodsim.protocols.severity_suite import (
        load_severity_suite,
        per_dataset,
        run_severity_suite,
    )
    from oodsim.report_severity import format_level_table, write_severity_report

    results, out, seconds = run_from_args(args, load_severity_suite(args.spec), run_severity_suite)
    for label, part in per_dataset(results):
        print(f"\n[{label}]" if label else "", format_level_table(part, args.metric), sep="\n")
        if args.report:
            folder = Path(args.report) / label if label else Path(args.report)
            print(f"report written to {write_severity_report(part, folder, metric=args.metric)}")
    print(
        f"\n{results.sizes['model']} model(s) x {results.sizes['method']} κ in "
        f"{seconds:.1f} s (store: {results.attrs['store']}); "
        f"results written to {out}"
    )
    return 0


def _print_imagenet_o(result: dict[str, Any]) -> None:
    print(
        f"AUPR {100 * result['aupr']:.2f} % (chance {100 * result['chance']:.2f} %), "
        f"AUROC {100 * result['auroc']:.2f} %, FPR@95TPR {100 * result['fpr95']:.2f} % "
        f"({result['n_id']} ID / {result['n_ood']} ImageNet-O images)"
    )


def _cmd_imagenet_o(args: argparse.Namespace) -> int:
    from oodsim.protocols import imagenet_o

    if args.id_logits or args.ood_logits:
        if not (args.id_logits and args.ood_logits):
            raise SpecError("--id-logits/--ood-logits", "one of them", "both .npy files")
        result = imagenet_o.evaluate_logit_files(args.id_logits, args.ood_logits)
    elif args.spec:
        spec = imagenet_o.load_imagenet_o_spec(args.spec)
        table = imagenet_o.run_imagenet_o(spec)
        for model in table["model"].values:
            row = table.sel(model=model)
            print(
                f"{model}: "
                + ", ".join(
                    f"{m} {100 * float(row['score'].sel(metric=m)):.2f} %"
                    for m in table["metric"].values
                )
            )
        if args.json:
            rows = {
                str(m): {
                    str(k): float(table["score"].sel(model=m, metric=k))
                    for k in table["metric"].values
                }
                for m in table["model"].values
            }
            Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
        return 0
    else:
        if not (args.model and args.id_root and args.ood_root):
            raise SpecError(
                "imagenet-o",
                "missing inputs",
                "--model with --id-root and --ood-root, --id-logits with --ood-logits, or --spec",
            )
        result = imagenet_o.evaluate_folders(
            args.id_root,
            args.ood_root,
            args.model,
            pretrained=not args.random_weights,
            weights=args.weights,
            image_size=args.image_size,
            batch_size=args.batch_size,
            save_logits=args.save_logits,
        )
    _print_imagenet_o(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


def add_commands(commands: Any) -> None:
    """Add ``severity`` and ``imagenet-o`` to the ``oodsim`` subparsers."""
    severity = commands.add_parser(
        "severity", help="run a C-OOD severity spec: per-level metrics of models x κ"
    )
    severity.add_argument(
        "spec", help="severity spec (TOML), e.g. specs/severity_fashion_mnist.toml"
    )
    from oodsim.cli import add_run_options

    add_run_options(severity)
    severity.add_argument("--report", help="also write plots and a summary into this folder")
    severity.add_argument("--metric", default="auroc", help="metric of the printed table")
    severity.set_defaults(func=_cmd_severity)

    inet = commands.add_parser(
        "imagenet-o", help="ImageNet-O AUPR of a model (image folders) or of saved logits"
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
    inet.add_argument("--spec", help="an imagenet_o spec (TOML) with several models")
    inet.add_argument("--json", help="also write the numbers to this JSON file")
    inet.set_defaults(func=_cmd_imagenet_o)
