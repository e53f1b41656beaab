"""Command-line options that more than one command takes."""

from __future__ import annotations

import argparse


def add_trust(parser: argparse.ArgumentParser) -> None:
    """``--trust``: open saved results that have no checksum manifest, unchecked
    (:func:`oodsim.results.open_results` refuses them otherwise)."""
    parser.add_argument(
        "--trust",
        action="store_true",
        help="open results that have no checksum manifest (written before oodsim wrote one, "
        "or whose manifest was deleted) without checking them",
    )


def path_text(text: str) -> str:
    """A path option's value: an empty one (``--cache "$CACHE"`` with the variable unset) is
    refused, not read as "the default", which silently wrote where nobody asked."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "an empty path (an unset variable?); leave the option out for its default"
        )
    return text
