"""The README's commands and every Python example of the docs, run as a newcomer meets them.

In one copy of the checkout (its tracked files, :func:`tests.readme_sample.copy_checkout`),
with no ``$OODSIM_CACHE`` (the project's own ``cache/`` is the store): first the README's
main command (``oodsim run specs/digits.toml``), whose output must be the README's sample
block; then the collection of the test suite (the README's second command), which the main
job's ``results/`` and ``cache/`` must not disturb; then every ```python block of README.md,
docs/quickstart.md and the other pages, in that order, each saved as ``example.py`` in the
copy and run as ``python example.py`` runs it, so that Dask's worker processes re-import it
exactly as they would a user's script. Each script runs in a child forked from one server that
imported torch, distributed, xarray and oodsim once (:mod:`tests.script_server`): the imports
cost more than most examples. Later examples see what earlier ones wrote (``results/``,
reports) and reuse the models they trained, as a reader's would.

A block is skipped only when the line right before its fence is ``<!-- no-run: reason -->``
(e.g. it needs ImageNet on disk); the reason must not be empty.
"""

from __future__ import annotations

import re
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from tests.conftest import ROOT, byte_compile
from tests.readme_sample import (
    MARKER,
    copy_checkout,
    disagreements,
    newcomer_env,
    readme_block,
    run_main_job,
    sample_block,
)
from tests.script_server import ScriptServer

QUICKSTART = ROOT / "docs" / "quickstart.md"
#: in a newcomer's reading order: the README, the quickstart, then the other pages
DOCUMENTS = (
    ROOT / "README.md",
    QUICKSTART,
    *sorted(p for p in (ROOT / "docs").glob("*.md") if p != QUICKSTART),
)
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


@attrs.frozen
class Project:
    """A newcomer's copy of the checkout, after the README's main command ran in it."""

    folder: Path
    env: dict[str, str]
    main_job: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    folder = copy_checkout(tmp_path_factory.mktemp("newcomer") / "oodsim")
    byte_compile(folder)  # as the newcomer's first run would (not with PYTHONDONTWRITEBYTECODE)
    return Project(folder, newcomer_env(folder), run_main_job(folder))


@pytest.fixture(scope="session")
def scripts(project: Project) -> Iterator[ScriptServer]:
    """Runs scripts in the newcomer's copy, with the newcomer's environment."""
    server = ScriptServer(project.folder, project.env)
    yield server
    server.close()


def test_the_main_command_prints_the_readmes_sample(project: Project) -> None:
    done = project.main_job
    assert done.returncode == 0, done.stderr[-6000:]
    assert (project.folder / "results" / "digits.zarr").is_dir()
    assert (project.folder / "cache").is_dir()  # the project's store, not a user folder
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert MARKER in readme
    computed = sample_block(done.stdout)
    problems = disagreements(readme_block(readme), computed)
    assert problems == [], (
        "README.md's sample output is stale; run `python -m tests.readme_sample`. "
        f"The main command printed:\n{computed}"
    )


def test_the_suite_collects_after_the_main_command(
    project: Project, scripts: ScriptServer, request: pytest.FixtureRequest
) -> None:
    """The README's second command, after its first, in the same folder: every test this
    session runs is collected there too (in one process, ``-n 0``: collecting on two xdist
    workers checks nothing more; ``--assert=plain``: rewriting the asserts of 260 modules,
    a third of collecting, changes no test's id)."""
    script = project.folder / "collect.py"
    script.write_text(
        "import sys\n\nimport pytest\n\n"
        'if __name__ == "__main__":\n'
        '    options = ["-q", "-n", "0", "--assert=plain", "-p", "no:cacheprovider"]\n'
        '    sys.exit(pytest.main(["--collect-only", *options]))\n'
    )
    done = scripts.run(script, TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    collected = {line for line in done.stdout.splitlines() if "::" in line}
    ours = {item.nodeid for item in request.session.items}
    assert ours <= collected, sorted(ours - collected)[:10]


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


#: what the main command's sample block read on an AVX-512 EPYC (2026-12-03): other numbers,
#: and the P(best) columns one character wider (a row the block elides, openmax, reads
#: ``<0.001 [0.000, 0.002]`` there)
OTHER_PROCESSOR = """\
```
Mean [95% interval] over 50 seeds
method              auroc                 aupr_in               aupr_out              fpr95                 n
------------------  --------------------  --------------------  --------------------  --------------------  --
msp                 0.931 [0.914, 0.945]  0.950 [0.935, 0.961]  0.894 [0.871, 0.913]  0.316 [0.260, 0.379]  50
odin                0.934 [0.917, 0.948]  ...
mahalanobis         0.958 [0.951, 0.963]  ...
classifier accuracy (the same for every method): 0.988 [0.986, 0.991]
interval: 95% bound-aware interval (logit-t inside, two-part where seeds sit on a bound)

P(best mean auroc in a 5-seed comparison; 10000 draws) [95% bootstrap percentile interval: ...]:
  method              independent            paired
  ------------------  ---------------------  --------------------
  msp                 0.063 [0.032, 0.093]   0.000 [0.000, 0.002]
  mahalanobis         0.357 [0.192, 0.558]   0.889 [0.713, 0.976]
  ...
```"""  # noqa: E501


#: the same on an AVX-512 Xeon (2026-12-04): msp's paired P(best), zero on the README's
#: processor, is not zero there but rounds to it
THIRD_PROCESSOR = OTHER_PROCESSOR.replace(
    "  msp                 0.063 [0.032, 0.093]   0.000 [0.000, 0.002]",
    "  msp                 0.069 [0.035, 0.097]   <0.001 [0.000, 0.002]",
)


@pytest.mark.parametrize("printed", [OTHER_PROCESSOR, THIRD_PROCESSOR], ids=["epyc", "xeon"])
def test_the_sample_check_allows_another_processor_and_catches_a_moved_result(
    printed: str,
) -> None:
    """The README's block agrees with what other processors printed; a result moved past its
    interval, or a changed word, is still caught."""
    assert printed.count("<0.001") == (printed is THIRD_PROCESSOR)
    shown = readme_block((ROOT / "README.md").read_text(encoding="utf-8"))
    assert disagreements(shown, printed) == []
    mahalanobis = next(line for line in shown.splitlines() if line.startswith("mahalanobis"))
    estimate = re.compile(r"0\.\d+ \[0\.\d+, 0\.\d+\]")
    moved = estimate.sub("0.500 [0.490, 0.510]", mahalanobis)
    assert disagreements(shown, shown.replace(mahalanobis, moved)) == [
        f"{estimate.search(mahalanobis)[0]} shown; 0.500 [0.490, 0.510] computed (in 'mahalanobis')"
    ]
    assert len(disagreements(shown, shown.replace("paired", "pooled"))) == 1


@pytest.mark.parametrize("block", _params())
def test_example_runs_as_a_script(block: Block, project: Project, scripts: ScriptServer) -> None:
    script = project.folder / "example.py"
    script.write_text(block.code, encoding="utf-8")
    try:
        done = scripts.run(script, TIMEOUT_S)
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
