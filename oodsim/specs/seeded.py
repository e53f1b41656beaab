"""What every protocol's spec shares: its seeds (ranges, pinned seeds, designed streams), the
stopping rule and the rule for degenerate seeds (:class:`Seeded`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from oodsim.errors import SpecError, UnknownNameError
from oodsim.keys import no_key
from oodsim.seeds import STREAMS, SeedRange, SeedStreams
from oodsim.specs.keyed import KeyedSpec
from oodsim.specs.params import Params, param_table
from oodsim.specs.types import (
    INT64_MAX,
    located,
    non_negative,
    one_of,
    open_unit_interval,
    positive,
    spec_class,
    spec_error,
)

#: The most levels one designed stream may take (a grid is run in full).
MAX_DESIGN_LEVELS = 1000

#: The one severity level of the results of a protocol without levels (open set, ImageNet-O):
#: the level a stopping rule there may name (:meth:`Seeded.check_stopping`).
NO_SEVERITY = "all"


_ONE_OF_THEM = (
    "values lists the seeds to run; n and start count them (start .. start + n - 1): give "
    "one or the other"
)


@spec_class
class SeedsSpec(KeyedSpec):
    """Which simulations to run: seeds ``start .. start+n-1`` (or ``values``), streams pinned
    or crossed.

    Seeds are distinct integers in 0 .. 2**63 − 1 (results index them as int64); :meth:`all`
    generates them lazily, so ``n = 10**9`` with a stopping rule costs nothing up front.

    ``design`` (``[seeds.design]``, e.g. ``class_split = 4, init = 4``) crosses streams: the
    seeds walk the grid of their levels (``n`` a multiple of its size; each further grid is a
    replicate), level ``i`` of a designed stream draws from entropy ``start + i``, and every
    other stream follows the seed unless pinned. Results carry each designed stream's level
    per seed (``stream_class_split``, ...) for :func:`oodsim.stats.variance_components`.
    """

    TAG = "seeds"
    VERSION = "1"

    n: int = attrs.field(default=50, validator=positive)
    start: int = attrs.field(default=0, validator=non_negative)
    values: tuple[int, ...] = attrs.field(default=())
    pinned: Params = attrs.field(default=(), converter=param_table)
    # stream -> number of levels; enters the key only when set (see key_extra)
    design: Params = attrs.field(default=(), converter=param_table, metadata=no_key())

    @classmethod
    def check_data(cls, data: Mapping[str, Any]) -> None:
        """Refuse, from a spec file, ``values = []`` alone (it ran the default 50 seeds) and
        ``values`` beside an ``n`` or ``start`` it would silently replace. Once built, an empty
        list and the defaults look like fields left out; a spec oodsim wrote (the results'
        ``spec``) holds all three, with the defaults beside ``values``, and reads back."""
        values = data.get("values")
        if not isinstance(values, list | tuple):
            return
        if not values and "n" not in data and "start" not in data:
            raise located(
                SpecError("values", [], "a list of at least one seed", _ONE_OF_THEM), "values"
            )
        for name in ("n", "start"):
            default = getattr(attrs.fields(cls), name).default
            if values and data.get(name, default) != default:
                raise located(
                    SpecError(name, data[name], f"no {name} beside values", _ONE_OF_THEM), name
                )

    @values.validator
    def _check_values(self, attribute: attrs.Attribute, value: tuple[int, ...]) -> None:
        for i, seed in enumerate(value):
            if seed < 0:
                raise spec_error(self, f"values[{i}]", seed, "a seed >= 0")
        if len(set(value)) != len(value):
            seen: set[int] = set()
            repeated = sorted({seed for seed in value if seed in seen or seen.add(seed)})
            raise spec_error(
                self,
                "values",
                repeated,
                "distinct seeds (each value once)",
                "A repeated seed is one simulation: it would be counted once in a run and "
                "twice from the cache",
            )

    @pinned.validator
    def _check_pinned(self, attribute: attrs.Attribute, value: Params) -> None:
        for stream, entropy in value:
            if stream not in STREAMS:
                raise located(UnknownNameError("seeds.pinned", stream, STREAMS), "pinned")
            valid = isinstance(entropy, int) and not isinstance(entropy, bool)
            if not valid or not 0 <= entropy <= INT64_MAX:
                raise spec_error(self, f"pinned.{stream}", entropy, "an integer in 0 .. 2**63 - 1")

    @design.validator
    def _check_design(self, attribute: attrs.Attribute, value: Params) -> None:
        pinned = dict(self.pinned)
        for stream, levels in value:
            if stream not in STREAMS:
                raise located(UnknownNameError("seeds.design", stream, STREAMS), "design")
            valid = isinstance(levels, int) and not isinstance(levels, bool)
            if not valid or not 2 <= levels <= MAX_DESIGN_LEVELS:
                raise spec_error(
                    self,
                    f"design.{stream}",
                    levels,
                    f"a number of levels in 2 .. {MAX_DESIGN_LEVELS}",
                    "A designed stream takes that many values, crossed with the other "
                    "designed streams",
                )
            if stream in pinned:
                raise spec_error(
                    self,
                    f"design.{stream}",
                    levels,
                    "a stream that is not also pinned",
                    f"seeds.pinned fixes {stream} to one value; a design varies it",
                )

    def __attrs_post_init__(self) -> None:
        if self.design:
            self._check_design_seeds()
        if not self.values and self.start + self.n - 1 > INT64_MAX:
            raise spec_error(
                self,
                "n",
                self.n,
                f"at most {INT64_MAX - self.start + 1} seeds from start = {self.start}",
                "Seeds must fit in 64 bits: start + n - 1 <= 2**63 - 1",
            )

    def _check_design_seeds(self) -> None:
        grid = self.grid_size
        if self.values:
            raise spec_error(
                self,
                "values",
                list(self.values),
                "no values with a design",
                "A design numbers its simulations start, start + 1, ...: give n instead",
            )
        if self.n % grid:
            raise spec_error(
                self,
                "n",
                self.n,
                f"a multiple of the design's {grid} cells (e.g. n = {grid} or {2 * grid})",
                "Every cell of the grid runs the same number of times (replicates), so that "
                "the design stays balanced",
            )

    def key_extra(self) -> dict[str, Any]:
        """A design enters the key only when there is one (specs without keep their keys)."""
        return {"design": dict(self.design)} if self.design else {}

    @property
    def count(self) -> int:
        """How many seeds there are."""
        return len(self.values) if self.values else self.n

    @property
    def grid_size(self) -> int:
        """Cells of the design: the product of its levels (1 without a design)."""
        return math.prod(levels for _, levels in self.design)

    def design_levels(self, seed: int) -> dict[str, int]:
        """The level of every designed stream in ``seed``: cell ``(seed - start) % grid``
        written in mixed radix over the designed streams in :data:`STREAMS` order (the last
        varies fastest); replicate ``(seed - start) // grid`` repeats the grid."""
        cell = (seed - self.start) % self.grid_size
        levels: dict[str, int] = {}
        for stream, count in reversed(self.designed_streams()):
            cell, levels[stream] = divmod(cell, count)
        return {stream: levels[stream] for stream, _ in self.designed_streams()}

    def designed_streams(self) -> list[tuple[str, int]]:
        """``(stream, levels)`` of the design in :data:`STREAMS` order."""
        table = dict(self.design)
        return [(stream, table[stream]) for stream in STREAMS if stream in table]

    def streams(self, seed: int) -> SeedStreams:
        """The random streams of simulation ``seed``: pinned streams fixed, level ``i`` of a
        designed stream drawn from entropy ``start + i``, every other stream from the seed."""
        entropies = dict(self.pinned)
        entropies |= {s: self.start + i for s, i in self.design_levels(seed).items()}
        return SeedStreams(seed, entropies)

    def all(self) -> Sequence[int]:
        """The seeds in the order they are submitted: ``values``, or a lazy :class:`SeedRange`
        (iterating, slicing and indexing it builds no list)."""
        return self.values if self.values else SeedRange(self.start, self.start + self.n)


STOPPING_RULES = ("fixed", "ci_width", "ranking")


@spec_class
class StoppingSpec(KeyedSpec):
    """When to stop simulating: after all seeds, or by a sequential rule checked per batch."""

    TAG = "stopping"
    VERSION = "1"

    rule: str = attrs.field(default="fixed", validator=one_of(*STOPPING_RULES))
    metric: str = "auroc"  # checked against the spec's own metrics (Seeded.check_stopping)
    epsilon: float = attrs.field(default=0.01, validator=positive)
    alpha: float = attrs.field(default=0.05, validator=open_unit_interval)
    min_seeds: int = attrs.field(default=5, validator=positive)
    max_seeds: int | None = attrs.field(default=None, validator=positive)
    batch_size: int = attrs.field(default=10, validator=positive)
    severity: str | None = None  # a level label ("0" … "10"; open set: "all")


#: Permutations of the degenerate-training test (:mod:`oodsim.protocols.degenerate`): its
#: p-values go down to 1 / (1 + N) = 1e-4, below the default alpha; a seed is kept when
#: p < alpha, so an alpha at or below 1e-4 would exclude every seed the test decides.
N_PERMUTATIONS = 9_999


@spec_class
class DegenerateSpec(KeyedSpec):
    """Which simulations are degenerate: the classifier's balanced accuracy on the known
    classes' validation split is not above chance (a one-sided permutation test of label and
    prediction independence at level ``alpha``; see :mod:`oodsim.protocols.degenerate`).

    ``keep = false`` (default) records the reason in ``failure`` and excludes the seed from
    every estimate like a failed seed; ``keep = true`` keeps its scores in. Either way the
    reason is in the per-seed ``degenerate`` variable of the results.
    """

    TAG = "degenerate"
    VERSION = "1"

    alpha: float = attrs.field(default=1e-3)
    keep: bool = False

    @alpha.validator
    def _check_alpha(self, attribute: attrs.Attribute, value: float) -> None:
        smallest = 1 / (1 + N_PERMUTATIONS)
        if not smallest < value < 1.0:
            raise spec_error(
                self,
                "alpha",
                value,
                f"a number in ({smallest:g}, 1)",
                f"The test's {N_PERMUTATIONS} permutations give p-values down to {smallest:g}, "
                "and a seed is kept when p < alpha: at or below it every seed the test decides "
                "would be excluded",
            )


class Seeded:
    """Mixin of every protocol's spec: ``seeds``, ``stopping`` and ``on_failure`` fields.

    The rule watches ``stopping.metric`` at severity level ``stopping.severity`` (default: the
    first level) for every method; see :func:`oodsim.engine.stopping.stopping_values`.
    """

    TABLE = ""  # a top-level spec: its fields are written without a table

    seeds: SeedsSpec
    stopping: StoppingSpec
    metrics: tuple[str, ...]

    @property
    def max_seeds(self) -> int:
        """The most seeds the run may take: ``stopping.max_seeds`` or all seeds."""
        return self.stopping.max_seeds or self.seeds.count

    def refuse_design(self) -> None:
        """Protocols whose results carry no designed streams refuse ``[seeds.design]``."""
        if self.seeds.design:
            raise SpecError(
                "seeds.design",
                dict(self.seeds.design),
                "no design: [seeds.design] is for open set specs",
                "Variance components by source of randomness need an open set experiment",
            )

    def check_stopping(self, levels: tuple[str, ...]) -> None:
        """A sequential rule must watch one of the spec's metrics and levels and fit the seeds."""
        rule = self.stopping
        if rule.severity is not None and rule.severity not in levels:
            raise SpecError("stopping.severity", rule.severity, f"one of the levels {list(levels)}")
        if rule.rule == "fixed":
            return
        if self.seeds.design:
            raise SpecError(
                "stopping.rule",
                rule.rule,
                "'fixed' with a [seeds.design] (a design runs its whole grid)",
                "A sequential rule would stop inside the grid and unbalance it",
            )
        if rule.metric not in self.metrics:
            raise SpecError(
                "stopping.metric",
                rule.metric,
                f"one of the spec's metrics {list(self.metrics)}",
            )
        if rule.max_seeds is not None and rule.max_seeds > self.seeds.count:
            raise SpecError(
                "stopping.max_seeds",
                rule.max_seeds,
                f"at most the {self.seeds.count} seeds in [seeds]",
            )
        if rule.min_seeds > self.max_seeds:
            raise SpecError(
                "stopping.min_seeds", rule.min_seeds, f"at most max_seeds = {self.max_seeds}"
            )
