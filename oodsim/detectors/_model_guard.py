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


def _state(model: Any) -> dict[str, dict[str, tuple]]:
    """The parts of ``model`` a detector could change without a trace in its own result, by
    module, parameter or buffer name."""
    # a model is given: torch is loaded
    from torch.nn.parameter import is_lazy

    modules = {  # a lazy module drops its own hook as its first pass gives it its weights
        n: m
        for n, m in model.named_modules()
        if not getattr(m, "has_uninitialized_params", lambda: False)()
    }
    tensors = itertools.chain(model.named_parameters(), model.named_buffers())
    return {
        "the mode (train/eval) of its modules": {n: (m.training,) for n, m in modules.items()},
        "its weights or buffers, in place": {
            n: (t.data_ptr(), t._version) for n, t in tensors if not is_lazy(t)
        },
        "its hooks": {
            n: (len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks))
            for n, m in modules.items()
        },
    }


def _changed(before: dict[str, dict[str, tuple]], after: dict[str, dict[str, tuple]]) -> list:
    """What changed among the parts that were there before. A part that a forward pass adds
    (a buffer some models cache on their first pass, a lazy module's weights) is the model's
    own doing, not the detector's."""
    return [
        what
        for what, parts in before.items()
        if any(after[what].get(name) != state for name, state in parts.items())
    ]


@contextlib.contextmanager
def unchanged_model(name: str, model: Any) -> Iterator[None]:
    """Run the block (detector ``name`` on ``model``); raise :class:`DetectorChangedModel`
    when it returns with the model changed (an error of the detector's own goes through)."""
    before = _state(model)
    yield
    changed = _changed(before, _state(model))
    if changed:
        raise DetectorChangedModel(
            f"detector {name!r} changed the model it was given ({'; '.join(changed)}): every "
            "model-based detector of a seed runs the same network, so the ones after it would "
            "score (and cache) a changed one; leave it as found (model.eval() after "
            "model.train(), remove the hooks it adds, change no weight in place)"
        )
