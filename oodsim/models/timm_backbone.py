"""``timm:<name>``: any timm architecture trained from scratch as an open set classifier.

timm builds the network without its classifier (``num_classes=0``: ``forward`` returns the
pooled features) and oodsim puts its own head on top (dropout, linear layer), so the contract
(``embed``, ``head``) holds for every timm model. Nothing is downloaded: ``pretrained=False``.
"""

from __future__ import annotations

import difflib
from typing import Any

from oodsim.errors import SpecError
from oodsim.models.registry import TIMM_PREFIX, Architecture, ArchitectureError

#: Bump when this adapter changes; timm's own version enters the architecture's version too.
ADAPTER_VERSION = "1"


def timm_architecture(name: str) -> Architecture:
    """The :class:`Architecture` for ``timm:<model>``; an unknown model raises with a close
    match, a missing timm with how to install it."""
    try:
        import timm  # loads only for timm's own architectures
    except ImportError:
        raise ArchitectureError(
            f"architecture {name!r} needs timm: pip install timm (or oodsim[zoo])"
        ) from None
    model_name = name[len(TIMM_PREFIX) :]
    if not timm.is_model(model_name):
        close = difflib.get_close_matches(model_name, timm.list_models(), n=1)
        hint = f"Did you mean {TIMM_PREFIX + close[0]!r}?" if close else ""
        raise SpecError("arch", name, "timm:<a name of timm.list_models()>", hint)

    def build(
        *,
        in_channels: int,
        n_classes: int,
        image_size: int,
        dropout: float,
        width: int,
        **params: Any,
    ) -> Any:
        """A timm backbone (features of ``num_classes=0``) with oodsim's head on top."""
        # torch is loaded (timm imports it); the classifier module needs it
        from oodsim.models.classifier import Classifier

        try:
            encoder = timm.create_model(
                model_name, pretrained=False, num_classes=0, in_chans=in_channels, **params
            )
        except TypeError as error:  # an unknown keyword of create_model
            raise ArchitectureError(f"architecture {name!r}: {error}") from None
        return Classifier(encoder, int(encoder.num_features), n_classes, dropout)

    version = f"{ADAPTER_VERSION}+timm-{timm.__version__}"
    return Architecture(name=name, build=build, version=version)
