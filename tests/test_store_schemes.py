"""Which backend opens a store's location: a path the local one, a URL its scheme's (one
registry, :mod:`oodsim.plugins`), and a scheme registered in a script travels to the workers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import oodsim
from oodsim import plugins
from oodsim.engine.work import Shipped
from oodsim.errors import SpecError
from oodsim.keys import digest
from oodsim.store import LocalBackend, Store, StoreError, register_backend
from oodsim.store.schemes import REGISTRY, backend_at, scheme_of
from tests.conftest import small_digits


@pytest.fixture
def lab_scheme(tmp_path: Path):
    """A scheme ``lab://NAME`` registered here, for stores in ``tmp_path/NAME``."""
    register_backend("lab", lambda location: LocalBackend(tmp_path / location[len("lab://") :]))
    yield tmp_path
    REGISTRY.user.pop("lab", None)


def test_a_path_opens_the_local_backend_and_so_does_a_file_url(tmp_path: Path) -> None:
    assert scheme_of(tmp_path) is None and scheme_of(str(tmp_path)) is None
    assert backend_at(tmp_path / "c") == LocalBackend(tmp_path / "c")
    assert backend_at(f"file://{tmp_path}/c") == LocalBackend(tmp_path / "c")
    assert Store(str(tmp_path / "c")).location == str(tmp_path / "c")
    assert "file" in plugins.available("store_backend")


def test_an_unknown_scheme_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(StoreError) as raised:
        Store("s4://bucket/prefix")
    message = str(raised.value)
    assert "no store backend opens s4:// locations" in message and "file://" in message
    assert "oodsim.store_backends" in message and "\n" not in message


def test_a_registered_scheme_opens_its_stores_and_is_shipped_to_workers(lab_scheme: Path) -> None:
    store = Store("LAB://one")  # schemes are case-insensitive
    key = digest("scheme_entry", 1, {"n": 1})
    store.put("outputs", key, {"x": np.arange(3)})
    assert (lab_scheme / "one" / "outputs" / key[:2] / key).is_dir()
    assert Store("lab://one").has("outputs", key)
    shipped = Shipped.of(small_digits(1), "lab://one")
    assert set(shipped.by_kind["store_backend"]) == {"lab"}
    assert "store_backend" not in Shipped.of(small_digits(1), str(lab_scheme)).by_kind
    with pytest.raises(ValueError, match="already registered"):
        register_backend("lab", LocalBackend)


def test_a_cache_location_is_a_url_from_the_spec_the_environment_or_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from oodsim.store import cache_root

    spec_file = tmp_path / "specs" / "x.toml"
    assert cache_root(spec_file, None, "s3://b/cache").location == "s3://b/cache"
    assert cache_root(spec_file, None, "here").location == tmp_path / "specs" / "here"
    monkeypatch.setenv("OODSIM_CACHE", "gs://b/env-cache")
    assert cache_root(spec_file, None).location == "gs://b/env-cache"
    assert cache_root(spec_file, None, "s3://b/cache").why.startswith("the cache of the spec")
    spec = small_digits(1, cache="s3://b/spec-cache")
    assert spec.key == small_digits(1).key  # where the cache is never enters the key
    with pytest.raises(SpecError, match="cache"):
        small_digits(1, cache=" ")


def test_a_location_with_credentials_is_refused_and_messages_hide_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from oodsim.store.object_errors import plain_error

    with pytest.raises(StoreError, match="names credentials") as raised:
        Store("s3://AKIDEXAMPLE:wJalrXUtnFEMI@bucket/cache")
    assert "wJalrXUtnFEMI" not in str(raised.value) and "AKIDEXAMPLE" not in str(raised.value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value-123")
    said = plain_error(PermissionError("denied for s3cr3t-value-123 (key=abc)"), "s3://b/c")
    assert "s3cr3t-value-123" not in said and "key=abc" not in said and "access denied" in said


def test_oodsim_cache_ls_verify_and_gc_work_on_an_object_store(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from oodsim.cli import main as cli_main

    url = "memory://cli-bucket/cache"
    store = Store(url)
    key = digest("cli_entry", 1, {"n": 1})
    store.put("outputs", key, {"x": np.arange(3)}, {"describe": "an entry"})
    assert cli_main(["cache", "ls", "--cache", url]) == 0
    assert cli_main(["cache", "verify", "--cache", url]) == 0
    assert cli_main(["cache", "gc", "--cache", url]) == 0
    printed = capsys.readouterr().out
    assert f"outputs      {key[:16]}" in printed and "an entry" in printed
    assert "0 corrupt entries" in printed and f"in {url}" in printed
    assert cli_main(["cache", "ls", "--cache", "memory://cli-bucket/elsewhere"]) != 0


def test_a_memory_store_serves_a_run_in_this_process_only() -> None:
    """``memory://`` lives in one process: a run on a cluster is refused before any compute
    (its workers would each write into their own memory); a run in this process uses it."""
    with pytest.raises(SpecError, match="memory:// lives in one process"):
        oodsim.run(small_digits(2), cache="memory://run-bucket/c", n_workers=2, progress=False)
    assert list(Store("memory://run-bucket/c").entries()) == []
    results = oodsim.run(small_digits(1), cache="memory://run-bucket/c", progress=False)
    assert results.sizes["seed"] == 1
    assert {e.kind for e in Store("memory://run-bucket/c").entries()} == {"checkpoint", "outputs"}
