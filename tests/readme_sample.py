"""The README's sample output, generated from what its main command prints.

:func:`sample_block` abridges the output of ``oodsim run specs/digits.toml`` into the block
the README shows; ``tests/test_doc_examples.py`` runs that command in a copy of the checkout
and checks that the README's block agrees with it (:func:`disagreements`). After a change that
moves the numbers, ``python -m tests.readme_sample`` runs the command the same way and writes
the block into README.md.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from oodsim.store import PROJECT_DEFAULTS_ENV

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: the README's main command (after its install step)
MAIN_JOB = ("run", "specs/digits.toml")
#: the line right before the README's sample block
MARKER = "<!-- sample output of the main command: written by `python -m tests.readme_sample` -->"
FULL_ROWS = ("msp",)  # rows of the summary table shown whole
SHORT_ROWS = ("odin", "mahalanobis")  # rows shown with their first metric only
WIN_ROWS = ("msp", "mahalanobis")  # rows of the P(best) table shown


def sample_block(stdout: str) -> str:
    """The fenced block the README shows: the summary table's title, header and chosen rows
    (others elided) with the lines under it (the classifier's accuracy, the interval), and
    the chosen rows of the P(best) table."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Mean ["))
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    title, header, rule = lines[start : start + 3]
    table = lines[start + 3 : end]
    notes = [line for line in table if line.startswith(("classifier ", "interval:"))]
    rows = {line.split()[0]: line for line in table if line not in notes}
    second_metric = header.index(header.split()[2])  # where the second metric's column starts
    shown = [rows[name] for name in FULL_ROWS]
    shown += [rows[name][:second_metric].rstrip() + "  ..." for name in SHORT_ROWS]
    wins = next(i for i in range(end, len(lines)) if lines[i].startswith("P(best"))
    win_title = lines[wins][: lines[wins].index("interval:") + len("interval:")] + " ...]:"
    win_header = next(i for i in range(wins, len(lines)) if lines[i].split()[:1] == ["method"])
    win_end = next(i for i in range(win_header, len(lines)) if not lines[i].strip())
    win_rows = [line for line in lines[win_header + 2 : win_end] if line.split()[0] in WIN_ROWS]
    body = [title, header, rule, *shown, *notes, ""]
    body += [win_title, *lines[win_header : win_header + 2]]
    return "\n".join(["```", *body, *win_rows, "  ...", "```"])


#: a cell of the tables: a value and its interval
#: (a P(best) estimate that is not zero but rounds to it reads ``<0.001``)
CELL = re.compile(r"<?(\d+\.\d+) \[(\d+\.\d+), (\d+\.\d+)\]")
#: a column's rule under a table header, as wide as the column's widest cell
RULE = re.compile(r"-{2,}")


def _layout(line: str) -> list[str]:
    """A line's words, every table cell as ``#`` and every rule as ``-``: what must not change
    between processors."""
    return RULE.sub("-", CELL.sub("#", line)).split()


def disagreements(shown: str, computed: str) -> list[str]:
    """Where the README's block ``shown`` does not match the block ``computed`` now: lines
    must be the same apart from the numbers and the columns' padding, and each interval shown
    must overlap the one computed now. Trained models differ a little between processors
    (seen: msp's AUROC 0.931 [0.914, 0.945] on one, 0.921 [0.898, 0.939] on another; accuracy
    0.988 [0.986, 0.991] and 0.983 [0.974, 0.989]), so the numbers cannot be compared digit by
    digit, and a row the block elides can widen a column on one processor (openmax's P(best)
    ``<0.001 [0.000, 0.002]``); a change of the code that moves a result past its interval is
    caught."""
    problems = []
    old_lines, new_lines = shown.splitlines(), computed.splitlines()
    if len(old_lines) != len(new_lines):
        return [f"{len(old_lines)} lines shown, {len(new_lines)} computed"]
    for old, new in zip(old_lines, new_lines):
        if _layout(old) != _layout(new):
            problems.append(f"shown {old!r}, computed {new!r}")
            continue
        for before, now in zip(CELL.finditer(old), CELL.finditer(new)):
            if float(before[3]) < float(now[2]) or float(now[3]) < float(before[2]):
                problems.append(f"{before[0]} shown; {now[0]} computed (in {old.split()[0]!r})")
    return problems


def readme_block(text: str) -> str:
    """The block right after :data:`MARKER` in the README's text."""
    lines = text.splitlines()
    start = lines.index(MARKER) + 1
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
    return "\n".join(lines[start : end + 1])


def with_block(text: str, block: str) -> str:
    """The README's text with its sample block replaced by ``block``."""
    old = readme_block(text)
    return text.replace(old, block, 1)


def copy_checkout(destination: Path) -> Path:
    """The files of this checkout that git tracks or would track (not the ignored ones) in
    ``destination``: what a fresh clone of it holds, without this session's results, cache
    or build files."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in names)):
        source, target = ROOT / name, destination / name
        if source.is_symlink():  # as git keeps it (oodsim/examples: a link to specs/)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def newcomer_env(folder: Path) -> dict[str, str]:
    """The environment of a newcomer in ``folder``: no ``$OODSIM_CACHE`` or ``$OODSIM_RESULTS``
    (the project's own ``cache/`` and ``results/``), the copy's package first."""
    env = {k: v for k, v in os.environ.items() if k not in PROJECT_DEFAULTS_ENV}
    return env | {"PYTHONPATH": str(folder), "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}


def run_main_job(folder: Path, timeout: float = 1200) -> subprocess.CompletedProcess:
    """``oodsim run specs/digits.toml`` in ``folder``, as the README's first command runs it."""
    return subprocess.run(
        [sys.executable, "-m", "oodsim.cli", *MAIN_JOB],
        cwd=folder,
        env=newcomer_env(folder),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as temporary:
        folder = copy_checkout(Path(temporary) / "oodsim")
        print(f"running the main job in {folder} ...", file=sys.stderr)
        done = run_main_job(folder)
        if done.returncode != 0:
            sys.exit(f"the main job failed:\n{done.stderr}")
    text = README.read_text(encoding="utf-8")
    updated = with_block(text, sample_block(done.stdout))
    README.write_text(updated, encoding="utf-8")
    print("README.md: sample block " + ("updated" if updated != text else "unchanged"))


if __name__ == "__main__":
    main()
