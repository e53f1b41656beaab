"""Every Python example in the README and docs/ runs as a saved script (the docs' contract).

Each ```python block is written to a file and run with ``sys.executable`` in a fresh
interpreter, so Dask's spawned workers re-import it exactly as they would a user's script. The
working directory is a fresh temporary folder per block holding a link to the repository's
``specs/`` (examples use relative paths such as ``specs/digits.toml``), so whatever an example
writes (``results/``, reports, a ``cache/``) stays out of the repository. All blocks share one
temporary store (``$OODSIM_CACHE``): the models one example trains are reused by the next.

A block is skipped only when the line right before its fence is ``<!-- no-run: reason -->``
(e.g. it needs ImageNet on disk); the reason must not be empty.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import attrs
import pytest

from tests.conftest import ROOT

DOCUMENTS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
#: read-only inputs of the examples, linked into each block's working directory
INPUTS = ("specs",)
NO_RUN = re.compile(r"^\s*<!--\s*no-run:(?P<reason>.*?)-->\s*$")
FENCE = re.compile(r"^\s*```")
TIMEOUT_S = 600


@attrs.frozen
class Block:
    """One ```python block: where it starts (the fence line, 1-based) and its code."""

    document: Path
    line: int
    code: str
    no_run: str | None  # the reason given in a no-run marker, None without a marker

    @property
    def id(self) -> str:
        return f"{self.document.relative_to(ROOT).as_posix()}:{self.line}"


def python_blocks(document: Path) -> list[Block]:
    """The ```python blocks of a Markdown file, with the no-run marker right before each."""
    lines = document.read_text(encoding="utf-8").splitlines()
    blocks, index = [], 0
    while index < len(lines):
        fence = lines[index].strip()
        if not fence.startswith("```"):
            index += 1
            continue
        end = next((i for i in range(index + 1, len(lines)) if FENCE.match(lines[i])), len(lines))
        if fence[3:].strip().split(" ")[0] in ("python", "py"):
            marker = NO_RUN.match(lines[index - 1]) if index else None
            code = textwrap.dedent("\n".join(lines[index + 1 : end])) + "\n"
            reason = marker["reason"].strip() if marker else None
            blocks.append(Block(document, index + 1, code, reason))
        index = end + 1
    return blocks


BLOCKS = [block for document in DOCUMENTS for block in python_blocks(document)]


def _params() -> list:
    params = []
    for block in BLOCKS:
        marks = []
        if block.no_run is not None:
            marks.append(pytest.mark.skip(reason=f"no-run: {block.no_run or '(no reason)'}"))
        params.append(pytest.param(block, id=block.id, marks=marks))
    return params


@pytest.fixture(scope="session")
def doc_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store for every example of the session."""
    return tmp_path_factory.mktemp("doc-cache")


def test_docs_have_examples() -> None:
    assert any(b.document.name == "README.md" for b in BLOCKS)
    assert len(BLOCKS) >= 10, [b.id for b in BLOCKS]


def test_every_excluded_block_says_why() -> None:
    unexplained = [b.id for b in BLOCKS if b.no_run is not None and not b.no_run]
    assert not unexplained, f"no-run markers without a reason: {unexplained}"


def test_no_run_markers_sit_right_before_a_python_fence() -> None:
    misplaced = []
    for document in DOCUMENTS:
        lines = document.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, start=1):
            following = lines[number].strip() if number < len(lines) else ""
            if NO_RUN.match(line) and following not in ("```python", "```py"):
                misplaced.append(f"{document.relative_to(ROOT).as_posix()}:{number}")
    assert not misplaced, f"no-run markers not followed by a ```python fence: {misplaced}"


def test_blocks_are_found_with_their_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n```bash\necho no\n```\n<!-- no-run: needs ImageNet -->\n```python\nx = 1\n```\n"
        "- item\n\n  ```python\n  if x:\n      y = 2\n  ```\n<!-- no-run: -->\n```python\n```\n"
    )
    first, second, third = python_blocks(page)
    assert (first.line, first.code, first.no_run) == (6, "x = 1\n", "needs ImageNet")
    assert (second.line, second.code, second.no_run) == (11, "if x:\n    y = 2\n", None)
    assert (third.line, third.no_run) == (16, "")


@pytest.mark.parametrize("block", _params())
def test_example_runs_as_a_script(block: Block, tmp_path: Path, doc_cache: Path) -> None:
    for name in INPUTS:
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    script = tmp_path / "example.py"
    script.write_text(block.code, encoding="utf-8")
    env = {
        **os.environ,
        "OODSIM_CACHE": str(doc_cache),
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": "1",
        # the repository's own package, also in the spawned Dask workers
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    try:
        done = subprocess.run(
            [sys.executable, script.name],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as error:
        stderr = error.stderr.decode() if isinstance(error.stderr, bytes) else error.stderr
        pytest.fail(
            f"{block.id} ran over {TIMEOUT_S} s\n--- stderr ---\n{(stderr or '')[-6000:]}",
            pytrace=False,
        )
    if done.returncode != 0:
        pytest.fail(
            f"{block.id} exited with {done.returncode}\n"
            f"--- stderr ---\n{done.stderr[-6000:]}\n--- stdout ---\n{done.stdout[-2000:]}",
            pytrace=False,
        )
