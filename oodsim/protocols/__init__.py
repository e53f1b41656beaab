"""Protocols: plug-ins of the engine that say what a seed needs and how to score it.

``open_set`` (the randomness study's simulations), ``severity`` (the C-OOD severity benchmark)
and ``imagenet_o`` (the ImageNet-O evaluation). Each module defines a
:class:`~oodsim.protocols.base.Protocol` named ``PROTOCOL``; this registry loads them lazily
so that a worker imports only the protocol it runs.
"""

from __future__ import annotations

import importlib
from typing import Any

from oodsim.errors import UnknownNameError
from oodsim.protocols.base import Protocol

#: protocol name → module defining ``PROTOCOL``
PROTOCOLS = {
    "open_set": "oodsim.protocols.open_set",
    "severity": "oodsim.protocols.severity",
    "imagenet_o": "oodsim.protocols.imagenet_o",
}
DEFAULT_PROTOCOL = "open_set"


def get_protocol(name: str) -> Protocol:
    """The protocol plug-in registered as ``name``."""
    if name not in PROTOCOLS:
        raise UnknownNameError("protocol", name, PROTOCOLS)
    return importlib.import_module(PROTOCOLS[name]).PROTOCOL


def protocol_of(spec: Any) -> Protocol:
    """The protocol whose spec type ``spec`` is."""
    for name in PROTOCOLS:
        protocol = get_protocol(name)
        if isinstance(spec, protocol.spec_type):
            return protocol
    raise TypeError(
        f"{type(spec).__name__} is not a spec of any protocol ({', '.join(PROTOCOLS)}); "
        "build one with oodsim.load(path) or the spec classes"
    )
