"""Datasets: the registry of loaders (:mod:`oodsim.data.registry`) and the built-in ones.

Importing the package registers the built-in loaders (:mod:`oodsim.data.builtin`), so every
``from oodsim.data.registry import ...`` sees them.
"""

from oodsim.data import builtin, registry  # noqa: F401  (builtin registers its loaders)
