"""Upper bounds on sizes whose cost would be absurd, checked when a spec is built or a
command's options are read.

A typo or a unit slip (``n_levels = 1e9``, a model ``depth = 600004``, a grid of 200,000
temperatures, ``oodsim imagenet-o --bootstrap 1000000000``) would otherwise run silently for
minutes, hang, or allocate tens of GB before failing. Every size below is checked before any
compute, and a value over its limit is one :class:`~oodsim.errors.SpecError` that names the
field, the limit and how to lift it.

Lift a limit for one run with the environment variable ``OODSIM_LIMITS`` (``"name=value,..."``,
e.g. ``OODSIM_LIMITS=grid_points=50000 oodsim run spec.toml``), or in a script with
``oodsim.limits.LIMITS["grid_points"] = 50_000`` before the spec is built. The limits are far
above what the papers use (11 levels, grids of a few dozen points, ResNet-18, 1,000 noise images,
1,000 bootstrap replicates).
"""

from __future__ import annotations

import os

import attrs

from oodsim.errors import SpecError

#: the environment variable that lifts limits: ``name=value`` pairs separated by commas
ENV = "OODSIM_LIMITS"


@attrs.frozen
class Limit:
    """One bound: its default value and what it bounds (for the message)."""

    default: int
    what: str


DEFAULTS: dict[str, Limit] = {
    "grid_points": Limit(10_000, "points of one detector's parameter grid"),
    "n_levels": Limit(1_000, "severity levels"),
    "model_width": Limit(4_096, "channels of a model's width"),
    "model_depth": Limit(1_000, "layers of a model's depth"),
    "noise_samples": Limit(1_000_000, "images of one noise OOD set"),
    "bootstrap_replicates": Limit(100_000, "bootstrap replicates of one evaluation"),
    "local_workers": Limit(128, "worker processes of a local cluster"),
}
#: values set in this process (a script's own), over the defaults and ``$OODSIM_LIMITS``
LIMITS: dict[str, int] = {}


#: what ``$OODSIM_LIMITS`` may hold (the message of a malformed one)
ALLOWED = (
    "name=value pairs separated by commas, each value an integer >= 1 and each name among "
    + ", ".join(DEFAULTS)
)


def parse_limits(text: str) -> dict[str, int]:
    """The limits ``text`` (``"name=value,..."``) sets; ``ValueError`` naming the bad pair."""
    values = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        name = name.strip()
        if name not in DEFAULTS:
            raise ValueError(item)
        try:
            values[name] = int(value)
        except ValueError:
            raise ValueError(item) from None
        if values[name] < 1:  # a limit of -5 refused every size, with a confusing message
            raise ValueError(item)
    return values


def _from_environment() -> dict[str, int]:
    """The limits ``$OODSIM_LIMITS`` sets; a malformed one is a :class:`SpecError` that names
    the variable, its value and :data:`ALLOWED` (as :mod:`oodsim.environment` says it)."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return {}
    try:
        return parse_limits(text)
    except ValueError:
        raise SpecError(ENV, text, ALLOWED) from None


def limit(name: str) -> int:
    """The limit ``name`` in force: this process's, else ``$OODSIM_LIMITS``', else its default."""
    if name in LIMITS:
        return LIMITS[name]
    return _from_environment().get(name, DEFAULTS[name].default)


def over(value: int, name: str) -> tuple[str, str] | None:
    """None when ``value`` is within the limit ``name``; else (what is allowed, how to lift it)
    for a :class:`SpecError` about the field that holds it."""
    bound = limit(name)
    if value <= bound:
        return None
    return (
        f"at most {bound:,} {DEFAULTS[name].what} (limit {name!r})",
        f"A size this large is most likely a typo; to run it anyway, lift the limit: "
        f"{ENV}={name}={value} in the environment, or "
        f'oodsim.limits.LIMITS["{name}"] = {value} in a script',
    )
