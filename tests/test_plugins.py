"""The one registry every kind of plug-in uses (:mod:`oodsim.plugins`): built-ins imported on
first need, registrations, prefix families, entry points listed once and loaded on use, and one
``available``/``get`` with close-match errors."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from oodsim import plugins
from oodsim.errors import UnknownNameError
from oodsim.plugins import Registry
from tests.conftest import install_package

GROUP = "oodsim.test_things"


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An installed package whose entry points add two things of the kind ``thing``."""
    install_package(
        tmp_path,
        "thing-plugin",
        f"[{GROUP}]\nblue = thing_plugin:BLUE\ngreen = thing_plugin:green\nred = nowhere:RED\n",
        {
            "thing_plugin": """
                BLUE = {"colour": "blue"}
                def green():
                    return {"colour": "green"}
            """
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("thing_plugin", None)


def things(**options) -> Registry:
    return Registry("thing", group=GROUP, **options)


def test_builtins_load_on_first_use_and_come_first_when_asked() -> None:
    registry = things(builtins={"json": "json:dumps", "walk": "os:walk"}, order="builtins_first")
    assert registry.builtins == {}  # nothing imported yet
    registry.register("abacus", len)
    assert registry.available() == ["json", "walk", "abacus"]
    import json

    assert registry.get("json") is json.dumps
    assert sorted(things(builtins={"json": "json:dumps"}).available()) == ["json"]


def test_register_refuses_a_taken_name_unless_replaced() -> None:
    registry = things(builtins={"json": "json:dumps"})
    registry.register("mine", 1)
    with pytest.raises(ValueError, match="already registered: pass replace=True"):
        registry.register("mine", 2)
    assert registry.register("mine", 2, replace=True) == 2 and registry.get("mine") == 2
    with pytest.raises(ValueError, match="'json' is already registered: a built-in or installed"):
        registry.register("json", 3, replace=True)
    with pytest.raises(ValueError, match="cannot be registered: use a Python identifier"):
        registry.register("not a name", 4)


def test_an_unknown_name_says_the_closest_and_every_known_one() -> None:
    registry = things(builtins={"json": "json:dumps"}, field="widget")
    registry.register("jason", 1)
    registry.add_prefix("ext:", lambda name: name, hint="ext:<anything>")
    with pytest.raises(UnknownNameError, match=r"widget: 'jsno'.*Did you mean 'json'") as error:
        registry.get("jsno")
    assert "'ext:<anything>'" in str(error.value)


def test_a_prefix_family_builds_its_names_on_first_use_and_reserves_them() -> None:
    built = []
    registry = things()
    registry.add_prefix("ext:", lambda name: built.append(name) or name.upper(), lambda: ["ext:a"])
    assert registry.available() == ["ext:a"]
    assert registry.get("ext:zed") == "EXT:ZED" and registry.get("ext:zed") == "EXT:ZED"
    assert built == ["ext:zed"]  # built once
    with pytest.raises(ValueError, match="names starting with 'ext:' are reserved"):
        registry.register("ext:mine", 1)


def test_installed_plug_ins_are_listed_without_import_and_loaded_on_use(installed) -> None:
    registry = things(from_entry_point=lambda name, ep: {"name": name, **(ep.load() or {})})
    assert {"blue", "green", "red"} <= set(registry.available())
    assert "thing_plugin" not in sys.modules  # listed, not imported
    assert registry.get("blue") == {"name": "blue", "colour": "blue"}
    with pytest.raises(ModuleNotFoundError):
        registry.get("red")


def test_a_registration_may_shadow_an_installed_plug_in_only_where_the_kind_allows(
    installed,
) -> None:
    assert things().register("blue", 1) == 1
    strict = things(shadow_installed=False)
    with pytest.raises(ValueError, match="'blue' is already registered: a built-in or installed"):
        strict.register("blue", 1)


def test_adopt_takes_the_drivers_registrations_but_never_replaces_a_builtin() -> None:
    registry = things(builtins={"json": "json:dumps"})
    registry.adopt({"json": "shipped", "mine": "shipped"})
    assert registry.get("mine") == "shipped" and registry.get("json") != "shipped"


def test_every_kind_answers_through_one_available_and_one_get() -> None:
    assert plugins.available("protocol")[:3] == ["open_set", "severity", "imagenet_o"]
    assert plugins.get("protocol", "open_set").name == "open_set"
    with pytest.raises(UnknownNameError, match="Did you mean 'protocol'"):
        plugins.registry("protocl")


def test_an_installed_dataset_is_found_by_its_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Datasets have an entry-point group too (``oodsim.datasets``), like every other kind."""
    from oodsim.data import registry as datasets

    install_package(
        tmp_path,
        "tiny-data",
        "[oodsim.datasets]\ntiny_installed = tiny_data:TINY\n",
        {
            "tiny_data": """
                import numpy as np
                from oodsim.data import ImageData
                from oodsim.data.registry import DatasetInfo

                def load(root=None, download=False, image_size=None):
                    images = np.zeros((4, 8, 8, 1), dtype=np.uint8)
                    return ImageData(images, np.array([0, 1, 0, 1]), ("a", "b"))

                TINY = DatasetInfo("tiny", 2, False, load, "four blank images")
            """
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    datasets.REGISTRY.cache_clear()
    try:
        assert "tiny_installed" in datasets.available_datasets()
        assert "tiny_data" not in sys.modules  # listed, not imported
        found = datasets.dataset_info("tiny_installed")
        assert found.name == "tiny_installed" and found.n_classes == 2
        assert datasets.load_dataset("tiny_installed").n_classes == 2
        assert plugins.get("dataset", "tiny_installed") is found
    finally:
        datasets.REGISTRY.cache_clear()
        datasets.REGISTRY.loaded.pop("tiny_installed", None)
        sys.modules.pop("tiny_data", None)
