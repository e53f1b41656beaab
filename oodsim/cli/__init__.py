"""The ``oodsim`` command line (:func:`main`); it imports the rest of oodsim, nothing imports it."""

from oodsim.cli.main import main

__all__ = ["main"]
