"""Edited plug-ins are noticed: a script's architecture, dataset loader or detector edited
between two runs on one cache, under the same name and version, keeps its keys (the cached
results are reused) and gets one notice that names the edited function and says how to choose."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from oodsim.data import registry
from tests.conftest import digits_toml

pytestmark = pytest.mark.slow  # each test trains once and runs a script twice

SCRIPT = """
import json
import sys

import attrs

import oodsim
from oodsim.data.registry import ImageData, load_dataset, register_dataset
from oodsim.detectors import register
from oodsim.models import register_architecture
from oodsim.specs import DetectorSpec
from oodsim.models.architectures import small_cnn


@register_architecture("edited_cnn")
def edited_cnn(in_channels, n_classes, image_size, dropout, width):
    return small_cnn(in_channels, n_classes, image_size, dropout, width)


@register_dataset("edited_digits", n_classes=10, hflip=False, description="digits")
def edited_digits(root=None, download=False, image_size=None):
    data = load_dataset("digits")
    return ImageData(data.images, data.labels, data.class_names)


@register("edited_score", needs={"logits"})
def edited_score(outputs, *, fit=None):
    return outputs.logits.max(axis=1)


if __name__ == "__main__":
    spec_path, cache, address, kind = sys.argv[1:]
    spec = oodsim.load(spec_path)
    if kind == "detector":
        spec = attrs.evolve(spec, detectors=(DetectorSpec(name="edited_score"),))
    elif kind == "architecture":
        spec = attrs.evolve(spec, model=attrs.evolve(spec.model, arch="edited_cnn"))
    else:
        spec = attrs.evolve(spec, dataset=attrs.evolve(spec.dataset, name="edited_digits"))
    results = oodsim.run(spec, address=address, cache=cache, progress=False)
    store = json.loads(results.attrs["store"])
    print(json.dumps({"store": store, "score": results.score.values.ravel().tolist()}))
"""

#: per kind: the function's name, and its body's edit (one that changes what it returns)
EDITS = {
    "architecture": (
        "edited_cnn",
        ("image_size, dropout, width)\n", "image_size, dropout / 2, width)\n"),
    ),
    "dataset": ("edited_digits", ("ImageData(data.images,", "ImageData(255 - data.images,")),
    "detector": ("edited_score", ("logits.max(axis=1)", "logits.max(axis=1) * 2")),
}


def run_script(tmp_path: Path, text: str, kind: str, address: str) -> tuple[dict, str]:
    """Run ``text`` as the user's script ``edit_study.py`` on the cache of ``tmp_path``: what
    it printed (its store counts and scores) and its standard error."""
    script = tmp_path / "edit_study.py"
    script.write_text(text)
    spec = digits_toml(tmp_path / "digits.toml", 1)
    done = subprocess.run(
        [sys.executable, str(script), str(spec), str(tmp_path / "cache"), address, kind],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.parametrize("kind", ["architecture", "dataset", "detector"])
def test_a_function_edited_under_the_same_version_keeps_its_keys_and_is_noticed(
    kind: str, tmp_path: Path, cluster_address: str
) -> None:
    function, (before, after) = EDITS[kind]
    assert SCRIPT.count(before) == 1
    first, told = run_script(tmp_path, SCRIPT, kind, cluster_address)
    assert {"checkpoint": 1, "outputs": 1}.items() <= first["store"]["computed"].items()
    assert "PluginChangedWarning" not in told
    again, told = run_script(tmp_path, SCRIPT.replace(before, after), kind, cluster_address)
    assert again["store"]["computed"] == {}  # keys unchanged: the cached results are reused
    assert again["score"] == first["score"]
    notices = [line for line in told.splitlines() if "PluginChangedWarning" in line]
    assert len(notices) == 1, told
    script = re.escape(str(tmp_path / "edit_study.py"))
    for said in (
        rf"the {kind} '{function}' \(version '1'\) has changed since this cache first computed",
        rf"the body of {function} \({script}, line \d+\) is not the one this cache's entries "
        r"were computed with under the same name and version",
        r'register it with another version \(e\.g\. version="2"\)',
        r"to keep using the cached results, change nothing",
    ):
        assert re.search(said, notices[0]), (said, notices[0])


def _loader(body: str):
    """A loader named ``edited_loader`` returning ``body`` (the same name for every body)."""
    namespace: dict = {"__name__": "edited_study"}  # a script's module, not oodsim's
    exec(
        f"def edited_loader(root=None, download=False, image_size=None):\n    return {body}",
        namespace,
    )  # noqa: S102, E501
    return namespace["edited_loader"]


def test_a_worker_takes_a_loader_again_once_its_body_was_edited_under_the_same_version() -> None:
    """A worker of a long-lived cluster took the loader of an earlier run; the driver ships the
    same name and version with another body: the worker loads with the new body."""
    registry.register_dataset(
        "edited_loader_probe", n_classes=2, hflip=False, description="probe", replace=True
    )(_loader("'old'"))
    try:
        taken = registry.DATASETS["edited_loader_probe"]
        registry.adopt_datasets([attrs.evolve(taken, load=_loader("'old'"))])  # a new object
        assert registry.DATASETS["edited_loader_probe"] is taken  # the same body: kept
        edited = attrs.evolve(taken, load=_loader("'new'"))
        registry.adopt_datasets([edited])
        assert registry.DATASETS["edited_loader_probe"].load() == "new"
    finally:
        registry._USER.pop("edited_loader_probe", None)
