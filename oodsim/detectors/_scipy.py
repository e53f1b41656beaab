"""The scipy functions the built-in detectors use, imported by their first call.

Every built-in detector registers when :mod:`oodsim.detectors` is imported, and a spec's
detector names are checked against that registry: importing scipy there (0.3 s or more)
would delay every spec error of ``oodsim run``. The functions here take scipy's arguments
and return what scipy returns.
"""

from __future__ import annotations

from typing import Any


def logsumexp(*args: Any, **kwargs: Any) -> Any:
    """``scipy.special.logsumexp``."""
    from scipy.special import logsumexp  # scipy loads with the first κ, not with a spec

    return logsumexp(*args, **kwargs)


def expit(*args: Any, **kwargs: Any) -> Any:
    """``scipy.special.expit``."""
    from scipy.special import expit  # scipy loads with the first κ, not with a spec

    return expit(*args, **kwargs)


def softmax(*args: Any, **kwargs: Any) -> Any:
    """``scipy.special.softmax``."""
    from scipy.special import softmax  # scipy loads with the first fit, not with a spec

    return softmax(*args, **kwargs)


def cdist(*args: Any, **kwargs: Any) -> Any:
    """``scipy.spatial.distance.cdist``."""
    from scipy.spatial.distance import cdist  # scipy loads with the first κ, not with a spec

    return cdist(*args, **kwargs)


def brentq(*args: Any, **kwargs: Any) -> Any:
    """``scipy.optimize.brentq``."""
    from scipy.optimize import brentq  # scipy loads with the first fit, not with a spec

    return brentq(*args, **kwargs)


def minimize_scalar(*args: Any, **kwargs: Any) -> Any:
    """``scipy.optimize.minimize_scalar``."""
    from scipy.optimize import minimize_scalar  # scipy loads with the first fit, not with a spec

    return minimize_scalar(*args, **kwargs)
