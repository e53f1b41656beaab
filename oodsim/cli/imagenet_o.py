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

from oodsim.cli.options import add_trust
from oodsim.errors import SpecError, telling_interrupt
from oodsim.store.fs import write_replacing

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


def _cmd_imagenet_o(args: argparse.Namespace) -> int:
    if args.results:
        from oodsim.report.tables import bootstrap_table  # (fast --help)
        from oodsim.results import open_results

        print(bootstrap_table(open_results(args.results, trust=args.trust)))
        return 0
    with telling_interrupt("oodsim: interrupted; no ImageNet-O numbers were computed"):
        result = _numbers(args)
    print(format_line(result))
    if args.json:  # whole or not at all; a link there is replaced, never written through
        text = json.dumps(result, indent=2) + "\n"
        write_replacing(Path(args.json), lambda tmp: tmp.write_text(text))
    return 0


def _numbers(args: argparse.Namespace) -> dict[str, Any]:
    """The ImageNet-O numbers of one model's image folders, or of saved logits."""
    # imported here: the protocol pulls in torch and timm, which other commands never need
    from oodsim.protocols import imagenet_o

    _check_options(args)
    if args.id_logits or args.ood_logits:
        if not (args.id_logits and args.ood_logits):
            raise SpecError("--id-logits/--ood-logits", "one of them", "both .npy files")
        return imagenet_o.evaluate_logit_files(
            args.id_logits, args.ood_logits, n_bootstrap=args.bootstrap, seed=args.seed
        )
    if args.model and args.id_root and args.ood_root:
        return imagenet_o.evaluate_folders(
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
    raise SpecError(
        "imagenet-o",
        "missing inputs",
        "--model with --id-root and --ood-root, --id-logits with --ood-logits, or "
        "--results of a run (several models: `oodsim run specs/imagenet_o.toml`)",
    )


#: the command's flag of each option of :func:`oodsim.protocols.imagenet_o.check_options`
_FLAGS = {
    "batch_size": "--batch-size",
    "save_logits": "--save-logits",
    "n_bootstrap": "--bootstrap",
    "seed": "--seed",
}


def _check_options(args: argparse.Namespace) -> None:
    """The options, each checked before any logits are read or any model is loaded: an error
    names the option."""
    # imported here: torch, timm and xarray, which other commands and --help never need
    from oodsim.protocols.imagenet_o import check_options
    from oodsim.results import OutputError, check_writable

    if args.json:
        if Path(args.json).is_dir():
            raise OutputError(f"cannot write the numbers of --json to {args.json}: it is a folder")
        check_writable(args.json, "the numbers of --json")
    check_options(
        batch_size=args.batch_size,
        save_logits=args.save_logits,
        n_bootstrap=args.bootstrap,
        seed=args.seed,
        fields=_FLAGS,
    )


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
    inet.add_argument(
        "--batch-size", type=int, default=64, help="images per forward pass (default: 64)"
    )
    inet.add_argument("--save-logits", help="folder for id_logits.npy / ood_logits.npy")
    inet.add_argument("--id-logits", help="saved ID logits (.npy, n x 1000 or n x 200)")
    inet.add_argument("--ood-logits", help="saved ImageNet-O logits (.npy)")
    inet.add_argument(
        "--bootstrap",
        type=int,
        default=0,
        metavar="N",
        help="also print the 95%% bootstrap interval (test-set sampling) of every number over "
        "N bootstrap replicates of the test set (e.g. 1000; at most 100,000 unless "
        "OODSIM_LIMITS=bootstrap_replicates=N lifts the limit)",
    )
    inet.add_argument(
        "--seed", type=int, default=0, help="first bootstrap seed (replicates SEED ... SEED+N-1)"
    )
    inet.add_argument(
        "--results",
        help="print the point estimates and bootstrap intervals of a saved ImageNet-O run "
        "(results/<name>.zarr of `oodsim run`)",
    )
    add_trust(inet)
    inet.add_argument("--json", help="also write the numbers to this JSON file")
    inet.set_defaults(func=_cmd_imagenet_o)
