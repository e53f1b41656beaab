"""The lines a run prints before anything heavy, from the command line and from Python alike:
what it will do (:func:`opening_line`) and how its spec differs from the one whose results it
follows at the same path (:func:`follows_line`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from oodsim.engine.cache_count import count_cached
from oodsim.protocols.base import Protocol
from oodsim.results.history import Saved, kept_path, spec_changes
from oodsim.store import CacheRoot, Store, shown
from oodsim.store.layout import is_cache


def opening_line(job: Protocol, store: Store, root: CacheRoot, out: str | Path | None) -> str:
    """What a run is about to do: the spec and its protocol, the plan (seeds in the cache,
    seeds to compute), the store it reads (why that one, and how many entries it holds) and
    where the results go."""
    spec = job.spec
    cache = root.location
    entries = store.count()
    held = f"{entries} entries" if entries else "empty: everything is computed"
    if isinstance(cache, Path) and cache.is_dir() and not is_cache(cache) and any(cache.iterdir()):
        held += "; a folder of other files, used but not marked: `oodsim cache` refuses it"
    plan = count_cached(job, store, spec.seeds.all()[: spec.max_seeds]).describe(job.unit)
    rule = "" if spec.stopping.rule == "fixed" else f", stopping rule {spec.stopping.rule}"
    where = (
        f"results to {shown(out)}" if out is not None else "results returned, not saved (no out=)"
    )
    return (
        f"oodsim: {spec.name} ({job.name}; {plan}{rule}); "
        f"cache {store.location} ({root.why}; {held}); {where}"
    )


def follows_line(spec: Any, earlier: Saved, out: Path) -> str:
    """How ``spec`` differs from the spec of the ``earlier`` results at ``out`` that its own
    results replace, and where those are kept."""
    now = json.loads(spec.to_json())  # plain JSON like the earlier spec (lists, not tuples)
    changes = spec_changes(earlier.spec or {}, now) or ["only the versions of its parts"]
    return (
        f"oodsim: {spec.name} changed since {shown(out)} was written ({'; '.join(changes)}); "
        f"those results (spec {earlier.key[:12]}) move to {shown(kept_path(out, earlier.key))}"
    )
