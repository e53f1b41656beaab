"""What a model-based detector must leave as it found it: the network every later one runs.

Every model-based detector of a seed (ODIN, MC dropout, a plug-in) is given the same model. One
that changed it (``model.train()`` to switch dropout on, and no ``model.eval()`` after;
weights edited in place; a hook left registered) silently changed the κ of every detector
after it, and those κ were stored under keys that cannot know: a probe's ODIN AUROC went from
0.898 to 0.952, and a later run of ODIN alone read the altered values from the cache.
:func:`unchanged_model` compares, for free, what such a change alters: each module's mode, each
parameter's and buffer's storage and in-place version counter (torch counts every in-place
write), and the number of hooks.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

from oodsim.detectors._checks import DetectorInputError


class DetectorChangedModel(DetectorInputError):
    """A model-based detector left the model it was given changed (mode, weights, hooks)."""


def _state(model: Any) -> dict[str, tuple]:
    """The parts of ``model`` a detector could change without a trace in its own result."""
    modules = list(model.modules())
    tensors = itertools.chain(model.named_parameters(), model.named_buffers())
    return {
        "the mode (train/eval) of its modules": tuple(m.training for m in modules),
        "its weights or buffers, in place": tuple(
            (name, t.data_ptr(), t._version) for name, t in tensors
        ),
        "its hooks": tuple(
            (len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks))
            for m in modules
        ),
    }


@contextlib.contextmanager
def unchanged_model(name: str, model: Any) -> Iterator[None]:
    """Run the block (detector ``name`` on ``model``); raise :class:`DetectorChangedModel`
    when it returns with the model changed (an error of the detector's own goes through)."""
    before = _state(model)
    yield
    after = _state(model)
    changed = [what for what in before if before[what] != after[what]]
    if changed:
        raise DetectorChangedModel(
            f"detector {name!r} changed the model it was given ({'; '.join(changed)}): every "
            "model-based detector of a seed runs the same network, so the ones after it would "
            "score (and cache) a changed one; leave it as found (model.eval() after "
            "model.train(), remove the hooks it adds, change no weight in place)"
        )
