"""The C-OOD severity benchmark (Galil, Dabbah, El-Yaniv) as a plug-in of the engine.

Models × κ × datasets, repeated over seeds: per (model, κ) the OOD classes are sorted by how
ID-like κ finds them and grouped into severity levels (0 = easiest). The modules follow the flow:

- :mod:`.levels`: Algorithm 1 as pure functions of κ arrays;
- :mod:`.spec`: :class:`~.spec.SeveritySpec` and its sources; :mod:`.reading`: TOML loading;
- :mod:`.sources`: the samples (images or files, labels) of each source;
- :mod:`.plan`: what a seed needs (units of work) and the content keys of their entries;
- :mod:`.compute`: the engine tasks of a seed and what they run on a worker;
- :mod:`.scoring`: κ, levels and metrics of a seed from the store; the result layout;
- :mod:`.analysis`: correlations and improvements across models of finished results;
- :mod:`.protocol`: :class:`~.protocol.SeverityProtocol`, the plug-in the engine runs.

:data:`PROTOCOL` is what ``oodsim.run`` uses for ``protocol = "severity"``; it loads on first
use, so reading a severity spec (:mod:`.reading`, what ``oodsim.load`` imports) loads neither
torch nor the engine's results.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PROTOCOL", "SeverityProtocol"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        # the plug-in plans and scores with torch and xarray: loaded for a run, not for a spec
        from oodsim.protocols.severity import protocol

        return getattr(protocol, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
