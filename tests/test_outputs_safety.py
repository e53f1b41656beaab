"""``--out`` never destroys what oodsim did not write, and results carry checksums.

Each test is one row of the "Outputs" table in docs/reliability.md. The run-level tests call
``oodsim.run`` (or ``oodsim run``) with a small real spec and show that the refusal comes before
any compute: the cache folder is not even created. Results are built by the project's own
constructors (``tests.factories.synthetic_results``, ``save_results``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import attrs
import numpy as np
import pytest
import xarray as xr

import oodsim
import oodsim.results.save as results_save
from oodsim.cli import main as cli_main
from oodsim.engine import OutputExists
from oodsim.engine.run import check_out
from oodsim.errors import OodsimError
from oodsim.keys import digest
from oodsim.results import (
    MANIFEST,
    ForeignOutput,
    OutputError,
    ResultsCorrupt,
    check_output,
    open_results,
    save_results,
    store_counts,
)
from oodsim.specs import load_spec
from oodsim.store import META_DIGEST, Store
from oodsim.store.digests import meta_digest
from tests import command_server
from tests.conftest import (
    ROOT,
    digits_toml,
    drop_file_permission_override,
    run_denied,
    small_digits,
    wait_for,
)
from tests.factories import synthetic_results


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (links not followed) with its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _user_folder(folder: Path) -> Path:
    """A folder of someone's own files: other results, notes, a sub-folder."""
    (folder / "old").mkdir(parents=True)
    (folder / "notes.txt").write_text("my notes")
    (folder / "old" / "table.csv").write_text("a,b\n1,2\n")
    return folder


def _refused_before_compute(tmp_path: Path, out: Path | str, match: str, **options) -> None:
    """``oodsim.run`` with ``out`` raises an OodsimError matching ``match`` before the cache
    is created (so before any cluster, training or write)."""
    cache = tmp_path / "cache"
    with pytest.raises(OodsimError, match=match):
        oodsim.run(small_digits(1), cache=cache, out=out, progress=False, **options)
    assert not cache.exists()


def _siblings(path: Path) -> list[str]:
    """Hidden leftovers next to ``path`` (temporary or renamed-aside copies)."""
    return sorted(p.name for p in path.parent.glob(f".{path.name}*"))


@pytest.mark.parametrize("overwrite", [False, True])
def test_existing_folder_of_other_files_is_refused_before_compute_and_untouched(
    tmp_path: Path, overwrite: bool
) -> None:
    folder = _user_folder(tmp_path / "results")
    before = _tree(folder)
    _refused_before_compute(
        tmp_path,
        folder,
        r"results is not oodsim results: it is a folder holding other things "
        r"\(notes.txt, old\)",
        overwrite=overwrite,
    )
    assert _tree(folder) == before
    assert _siblings(folder) == []


def test_cli_refuses_a_folder_of_other_files_with_one_line_and_exit_code_2(
    tmp_path: Path, capsys
) -> None:
    folder = _user_folder(tmp_path / "results")
    before = _tree(folder)
    spec = digits_toml(tmp_path / "s.toml", 1)
    cache = tmp_path / "cache"
    code = cli_main(["run", str(spec), "--cache", str(cache), "--out", str(folder)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith(f"oodsim: error: {folder} is not oodsim results")
    assert _tree(folder) == before and not cache.exists()


@pytest.mark.parametrize("where", ["root", "entry kind", "new path inside", "holds the cache"])
def test_cache_root_anything_inside_it_or_holding_it_is_refused(tmp_path: Path, where: str) -> None:
    cache = tmp_path / "work" / "cache"
    store = Store(cache)
    store.put(
        "outputs", digest("test_entry", 1, {"n": 124}), {"logits": np.zeros((2, 3), np.float32)}
    )
    before = _tree(cache)
    out = {
        "root": cache,
        "entry kind": cache / "outputs",
        "new path inside": cache / "r.zarr",
        "holds the cache": tmp_path / "work",
    }[where]
    with pytest.raises(
        OutputExists, match=f"is not oodsim results: it is .*{re.escape(str(cache.resolve()))}"
    ):
        oodsim.run(small_digits(1), cache=cache, out=out, progress=False, overwrite=True)
    assert _tree(cache) == before
    assert not (cache / "r.zarr").exists()


@pytest.mark.parametrize("where", ["the results", "inside them"])
def test_results_are_refused_as_a_cache(tmp_path: Path, where: str) -> None:
    """The reverse of the above: `oodsim run --cache r.zarr` wrote the store's entries into
    the results, which every reader then refused ("files oodsim did not write were added")."""
    results = tmp_path / "r.zarr"
    save_results(synthetic_results(n_seeds=4), results)
    before = _tree(results)
    cache = results if where == "the results" else results / "cache"
    with pytest.raises(ForeignOutput, match=r"is oodsim results, not a cache"):
        oodsim.run(small_digits(1), cache=cache, progress=False)
    assert _tree(results) == before
    open_results(results)  # still whole


def test_a_fifo_is_refused_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it to read would block forever
    _refused_before_compute(tmp_path, fifo, "pipe is not oodsim results: it is a FIFO")
    with pytest.raises(ForeignOutput, match="a FIFO"):
        save_results(synthetic_results(2), fifo)
    assert fifo.is_fifo()


def test_a_regular_file_is_refused_not_renamed_aside(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    _refused_before_compute(tmp_path, notes, "notes.txt is not oodsim results: it is a file")
    assert notes.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # no .notes.txt.old-*
    with pytest.raises(ForeignOutput, match="it is a file"):
        save_results(synthetic_results(2), notes)
    assert notes.read_text() == "mine"


@pytest.mark.parametrize("target", ["a folder", "oodsim results", "nothing"])
def test_a_symbolic_link_is_refused_and_its_target_untouched(tmp_path: Path, target: str) -> None:
    pointed = tmp_path / "target"
    if target == "a folder":
        _user_folder(pointed)
    elif target == "oodsim results":
        save_results(synthetic_results(2), pointed)
    before = _tree(pointed) if pointed.exists() else None
    link = tmp_path / "link.zarr"
    link.symlink_to(pointed)
    _refused_before_compute(tmp_path, link, f"is a symbolic link \\(to {pointed}\\)")
    with pytest.raises(ForeignOutput, match="symbolic link"):
        save_results(synthetic_results(2), link)
    assert link.is_symlink() and os.readlink(link) == str(pointed)
    assert (_tree(pointed) if pointed.exists() else None) == before


@pytest.mark.parametrize("out", [".", "", "..", "sub/.."])
def test_the_current_folder_or_one_above_it_is_refused(
    tmp_path: Path, monkeypatch, out: str
) -> None:
    work = tmp_path / "empty" / "work"
    work.mkdir(parents=True)  # even empty: renaming it away would pull the floor out
    monkeypatch.chdir(work)
    _refused_before_compute(tmp_path, out, "current folder or one above it")
    assert work.is_dir() and list(work.iterdir()) == []


@pytest.mark.parametrize("where", ["under /proc", "under a file"])
def test_an_unwritable_output_location_fails_before_compute(tmp_path: Path, where: str) -> None:
    # root ignores permission bits, so these are places nobody can write: /proc takes no new
    # files, and no path can exist below a regular file
    if where == "under /proc":
        parent = Path("/proc")
        if not parent.is_dir():
            pytest.skip("no /proc file system here")
    else:
        parent = tmp_path / "notes.txt"
        parent.write_text("mine")
    out = parent / "deeper" / "r.zarr"
    _refused_before_compute(tmp_path, out, f"cannot write results to {out}")
    with pytest.raises(OutputError, match=f"cannot write results to {out}"):
        save_results(synthetic_results(2), out)
    assert not out.parent.exists()


def test_a_read_only_folder_fails_before_compute(tmp_path: Path) -> None:
    """A real ``chmod 555`` folder, ``oodsim run --out`` into it: one line, exit code 2, no
    cache created (so nothing computed)."""
    folder, cache = tmp_path / "ro", tmp_path / "cache"
    folder.mkdir()
    spec = digits_toml(tmp_path / "s.toml", 1)
    done = run_denied(
        [str(Path(sysconfig.get_path("scripts")) / "oodsim"), "run", str(spec), "--quiet"]
        + ["--cache", str(cache), "--out", str(folder / "r.zarr")],
        folder,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"oodsim: error: cannot write results to {folder / 'r.zarr'}: cannot create files in "
        f"{folder} (Permission denied); choose a writable output path"
    ]
    assert list(folder.iterdir()) == [] and not cache.exists()


def test_replacing_read_only_older_results_writes_the_new_ones_and_keeps_the_old(
    tmp_path: Path,
) -> None:
    """Older results made read-only (``chmod -R a-w``): the new results were swapped in, and
    then deleting the old ones ended the run with a raw PermissionError, exit 2."""
    out = tmp_path / "r.zarr"
    save_results(synthetic_results(2), out)
    folders = [out, *(p for p in out.rglob("*") if p.is_dir())]
    script = (
        "import warnings, sys\n"
        "from oodsim.results import save_results, open_results\n"
        "from tests.factories import synthetic_results\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    save_results(synthetic_results(3), {str(out)!r})\n"
        f"print(open_results({str(out)!r}).sizes['seed'])\n"
        "print([str(w.message) for w in caught])\n"
    )
    for folder in folders:
        folder.chmod(0o555)
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            preexec_fn=drop_file_permission_override,
        )
    finally:
        for folder in [*tmp_path.rglob("*"), tmp_path]:
            if folder.is_dir():
                folder.chmod(0o755)
    if done.returncode == 0 and "kept" not in done.stdout:
        pytest.skip("this process can still delete from a chmod 555 folder (capabilities kept)")
    assert done.returncode == 0, done.stderr
    seeds, messages = done.stdout.strip().splitlines()
    assert seeds == "3"  # the new results, whole
    assert "the results these replaced: they cannot be deleted" in messages
    assert open_results(out).sizes["seed"] == 3


def test_replacing_older_results_of_the_same_spec_works_and_is_atomic(tmp_path: Path) -> None:
    out = tmp_path / "r.zarr"
    old, new = synthetic_results(3), synthetic_results(5, seed=1)
    assert old.attrs["spec_key"] == new.attrs["spec_key"]
    save_results(old, out)
    assert check_output(out) == old.attrs["spec_key"]
    save_results(new, out)
    xr.testing.assert_identical(open_results(out), new)
    assert _siblings(out) == []  # the old store is gone, nothing left beside it
    # a writer killed (SIGKILL) just before the swap: the old results stay whole
    code = (
        "import os, signal\n"
        "import oodsim.results.save as r\n"
        "from tests.factories import synthetic_results\n"
        "r._exchange = lambda a, b: os.kill(os.getpid(), signal.SIGKILL)\n"
        f"r.save_results(synthetic_results(7), {str(out)!r})\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=120, check=False)
    assert done.returncode == -signal.SIGKILL
    xr.testing.assert_identical(open_results(out), new)
    leftovers = _siblings(out)
    assert len(leftovers) == 1 and leftovers[0].startswith(".r.zarr.tmp-")


def test_replacing_on_a_file_system_that_cannot_exchange_paths(tmp_path: Path, monkeypatch) -> None:
    """Without ``RENAME_EXCHANGE`` (some network file systems) the old store is renamed aside,
    the new one renamed in, and only then the old one deleted."""
    monkeypatch.setattr(results_save, "_exchange", lambda a, b: False)
    out = tmp_path / "r.zarr"
    save_results(synthetic_results(3), out)
    new = synthetic_results(5, seed=1)
    save_results(new, out)
    xr.testing.assert_identical(open_results(out), new)
    assert _siblings(out) == []


def test_a_reader_never_sees_half_of_a_replacement(tmp_path: Path) -> None:
    out = tmp_path / "r.zarr"
    versions = [synthetic_results(3), synthetic_results(6, seed=1)]
    save_results(versions[0], out)
    done, seen, errors = threading.Event(), set(), []

    def read() -> None:
        while not done.is_set():
            try:
                results = open_results(out)
                xr.testing.assert_identical(results, versions[results.sizes["seed"] == 6])
            except Exception as error:  # any failure, a mixed store included, is a finding
                errors.append(error)
                return
            seen.add(results.sizes["seed"])

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(12):
            save_results(versions[(i + 1) % 2], out)
    finally:
        done.set()
        reader.join()
    assert errors == []
    assert seen  # the reader read whole stores throughout the replacements
    assert _siblings(out) == []


READER = """
import os, sys
import xarray as xr
from oodsim.results import open_results
from tests.factories import synthetic_results

out, stop = sys.argv[1], sys.argv[2]
versions = {3: synthetic_results(3), 6: synthetic_results(6, seed=1)}
reads = 0
while True:
    last = os.path.exists(stop)
    results = open_results(out)  # any error ends this reader with a traceback
    xr.testing.assert_identical(results, versions[results.sizes["seed"]])
    reads += 1
    if last:
        break
print(reads)
"""


def test_readers_in_other_processes_see_old_or_new_results_under_load(tmp_path: Path) -> None:
    """The stress test of replacement: two reader processes open the results in a loop (both
    cores busy) while this process replaces them 40 times with the other of two versions;
    every read is one whole version, never an error or a mix."""
    out, stop = tmp_path / "r.zarr", tmp_path / "stop"
    versions = [synthetic_results(3), synthetic_results(6, seed=1)]
    save_results(versions[0], out)
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", READER, str(out), str(stop)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for i in range(40):
            save_results(versions[(i + 1) % 2], out)
    finally:
        stop.touch()
        finished = [reader.communicate(timeout=300) for reader in readers]
    for reader, (stdout, stderr) in zip(readers, finished, strict=True):
        assert reader.returncode == 0, stderr[-3000:]
        assert int(stdout) > 0  # it read whole stores while they were being replaced
    assert _siblings(out) == []


def test_a_failing_write_is_one_clear_error_and_keeps_the_old_results(tmp_path: Path) -> None:
    """A full file system at the results write (``RLIMIT_FSIZE``, writes fail with EFBIG, as
    in test_faults.py), after all compute: an OutputError saying nothing changed and that the
    cache has everything; the old results are intact and no temporary store is left."""
    out = tmp_path / "r.zarr"
    old = synthetic_results(3)
    save_results(old, out)
    code = (
        "import resource, signal\n"
        "from tests.factories import synthetic_results\n"
        "from oodsim.results import save_results\n"
        "results = synthetic_results(40)\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))\n"
        f"save_results(results, {str(out)!r})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1
    assert last.startswith(f"oodsim.results.save.OutputError: results were not written to {out}")
    assert "File too large" in last and "everything computed is in the cache" in last
    xr.testing.assert_identical(open_results(out), old)
    assert _siblings(out) == []


def test_a_flipped_byte_in_a_results_chunk_is_detected(tmp_path: Path) -> None:
    out = save_results(synthetic_results(4), tmp_path / "r.zarr")
    chunk = out / "score" / "c" / "0" / "0" / "0" / "0"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size: only a checksum can tell
    chunk.write_bytes(bytes(data))
    with pytest.raises(ResultsCorrupt, match=r"checksum mismatch in score/c/0/0/0/0"):
        open_results(out)
    save_results(synthetic_results(4), out)  # still oodsim's: a rerun rewrites it
    assert open_results(out).sizes["seed"] == 4


@pytest.mark.parametrize("where", [".", "sub/report"], ids=["the-results", "inside"])
def test_a_report_is_never_written_into_results(tmp_path: Path, where: str) -> None:
    """``oodsim report R --out R --overwrite`` used to write the report into the results,
    which were then refused as altered until cleaned by hand."""
    from oodsim.report import write_report
    from oodsim.report.folder import ReportFolderError

    results = synthetic_results(6)
    out = save_results(results, tmp_path / "r.zarr")
    with pytest.raises(ReportFolderError, match=r"is in the results at .*r\.zarr.*r\.report"):
        write_report(results, out / where, n_draws=100, overwrite=True)
    xr.testing.assert_identical(open_results(out), results)
    assert not (out / "sub").exists()


def test_a_report_beside_the_results_is_written_whatever_the_path_says(tmp_path: Path) -> None:
    """``r.zarr/../r.report`` is beside the results; it used to be refused as "in the results
    at r.zarr", with ``e.g. r.report``, the same folder, as the fix. A link into the results
    is still refused."""
    from oodsim.report import write_report
    from oodsim.report.folder import ReportFolderError

    results = synthetic_results(6)
    out = save_results(results, tmp_path / "r.zarr")
    summary = write_report(results, out / ".." / "r.report", n_draws=100, figures=False)
    assert summary.resolve() == (tmp_path / "r.report" / "summary.md")
    (tmp_path / "into").symlink_to(out / "score")
    with pytest.raises(ReportFolderError, match=r"is in the results at .*r\.zarr"):
        write_report(results, tmp_path / "into" / "report", n_draws=100, figures=False)
    xr.testing.assert_identical(open_results(out), results)


def test_out_and_report_on_one_path_are_refused_before_compute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--out r.zarr --report r.zarr`` used to compute everything, then refuse the report."""
    spec = digits_toml(tmp_path / "spec.toml", 1)
    out = tmp_path / "r.zarr"
    args = ["run", str(spec), "--cache", str(tmp_path / "cache"), "--out", str(out)]
    assert cli_main([*args, "--report", str(out), "--quiet", "--workers", "1"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "is in the results at" in lines[0], lines
    assert not (tmp_path / "cache").exists() and not out.exists()


def test_a_deeply_nested_manifest_is_one_clear_error(tmp_path: Path) -> None:
    """A manifest nested 30,000 levels deep used to escape as a RecursionError."""
    out = save_results(synthetic_results(4), tmp_path / "r.zarr")
    (out / MANIFEST).write_bytes(b"[" * 30_000 + b"]" * 30_000)
    with pytest.raises(ResultsCorrupt, match="cannot be read .*nested too deeply"):
        open_results(out)


def test_a_deleted_file_in_results_is_detected(tmp_path: Path) -> None:
    out = save_results(synthetic_results(4), tmp_path / "r.zarr")
    # without the manifest zarr would read a missing chunk as its fill value (NaN scores)
    (out / "score" / "c" / "0" / "0" / "0" / "0").unlink()
    with pytest.raises(ResultsCorrupt, match=r"damaged: missing score/c/0/0/0/0"):
        open_results(out)
    assert check_output(out) is not None  # still oodsim's: replaceable


def test_an_edited_manifest_is_detected_and_makes_the_store_irreplaceable(tmp_path: Path) -> None:
    out = save_results(synthetic_results(4), tmp_path / "r.zarr")
    (out / "notes.txt").write_text("mine")
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["files"]["notes.txt"] = "0" * 64  # claim the user's file as oodsim's
    (out / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ResultsCorrupt, match=f"{MANIFEST} was altered"):
        open_results(out)
    with pytest.raises(
        ForeignOutput, match=f"not oodsim results that oodsim can replace: {MANIFEST}"
    ):
        save_results(synthetic_results(4), out)
    assert (out / "notes.txt").read_text() == "mine"


def test_results_holding_a_file_oodsim_did_not_write_are_not_replaced(tmp_path: Path) -> None:
    out = save_results(synthetic_results(4), tmp_path / "r.zarr")
    (out / "score" / "my-note.md").write_text("mine")
    with pytest.raises(ResultsCorrupt, match=r"files oodsim did not write were added"):
        open_results(out)
    _refused_before_compute(tmp_path, out, r"also what oodsim did not write \(score/my-note.md\)")
    with pytest.raises(ForeignOutput, match="score/my-note.md"):
        save_results(synthetic_results(4), out)
    assert (out / "score" / "my-note.md").read_text() == "mine"


def test_results_written_before_manifests_open_only_when_trusted_and_are_replaced(
    tmp_path: Path,
) -> None:
    results = synthetic_results(4)
    out = save_results(results, tmp_path / "r.zarr")
    (out / MANIFEST).unlink()  # what save_results wrote before results carried a manifest
    with pytest.raises(ResultsCorrupt, match=f"have no {MANIFEST}, so oodsim cannot check them"):
        open_results(out)
    xr.testing.assert_identical(open_results(out, trust=True), results)  # unchecked
    assert check_output(out) == results.attrs["spec_key"]
    save_results(synthetic_results(2), out)
    assert (out / MANIFEST).is_file() and open_results(out).sizes["seed"] == 2
    (out / MANIFEST).unlink()
    (out / "README").write_text("mine")  # old results plus a user's file: not oodsim's alone
    with pytest.raises(ForeignOutput, match="it is a folder holding other things"):
        save_results(synthetic_results(2), out)
    assert (out / "README").read_text() == "mine"


def test_an_empty_folder_is_taken_and_a_folder_that_fills_meanwhile_is_not(
    tmp_path: Path, monkeypatch
) -> None:
    empty = tmp_path / "empty.zarr"
    empty.mkdir()
    assert check_output(empty) is None
    save_results(synthetic_results(2), empty)
    assert open_results(empty).sizes["seed"] == 2
    # a folder that is empty when checked but filled by someone before the swap is kept
    racing = tmp_path / "racing.zarr"
    racing.mkdir()
    write = results_save._write_store

    def write_then_someone_writes(results: xr.Dataset, folder: Path) -> None:
        write(results, folder)
        (racing / "theirs.txt").write_text("theirs")

    monkeypatch.setattr(results_save, "_write_store", write_then_someone_writes)
    with pytest.raises(ForeignOutput, match="theirs.txt"):
        save_results(synthetic_results(2), racing)
    assert _tree(racing) == {"theirs.txt": b"theirs"}
    assert _siblings(racing) == []


def test_results_of_another_spec_are_replaced_only_with_overwrite(tmp_path: Path) -> None:
    out = save_results(synthetic_results(2, methods=("msp", "energy")), tmp_path / "r.zarr")
    key = open_results(out).attrs["spec_key"]
    match = f"holds results of another spec named 'experiment' \\(key {key[:12]}\\)"
    _refused_before_compute(tmp_path, out, match)
    # with overwrite the check passes (it is oodsim's); that run's replacement is tested in
    # tests/test_engine.py::test_an_edited_spec_reruns_and_keeps_what_it_replaces
    check_out(out, small_digits(1), True, tmp_path / "cache")
    assert open_results(out).sizes["seed"] == 2


def test_results_whose_manifest_was_deleted_are_refused_by_the_report_unless_trusted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The probe: a deleted manifest, then one flipped bit changed 3 of 90 scores and
    `oodsim report` used them without a word."""
    out = save_results(synthetic_results(4), tmp_path / "r.zarr")
    (out / MANIFEST).unlink()
    chunk = max(
        (p for p in (out / "score").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size
    )
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x10
    chunk.write_bytes(bytes(data))
    report = tmp_path / "report"
    assert cli_main(["report", str(out), "--out", str(report)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("oodsim: error: ")
    assert f"have no {MANIFEST}" in err[0] and "oodsim report --trust" in err[0]
    assert not report.exists()
    assert cli_main(["report", str(out), "--out", str(report), "--trust"]) == 0
    assert (report / "summary.md").is_file()


def test_a_manifest_naming_files_outside_the_results_never_gets_them_deleted(
    tmp_path: Path,
) -> None:
    """The probe: a results manifest listing `../victim.txt`, or `sub/secret.txt` with `sub` a
    link out of the folder (its own checksum updated), had those files deleted when the
    results were replaced."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("user's")
    (tmp_path / "victim.txt").write_text("user's")
    out = save_results(synthetic_results(4), tmp_path / "r.zarr")
    (out / "sub").symlink_to(outside, target_is_directory=True)
    manifest = json.loads((out / MANIFEST).read_text())
    for name in ("../victim.txt", "sub/secret.txt", str(tmp_path / "victim.txt")):
        manifest["files"][name] = "0" * 64
    manifest[META_DIGEST] = meta_digest(manifest)
    (out / MANIFEST).write_text(json.dumps(manifest))
    # replaced: the old store is discarded, all but what oodsim did not write (the link)
    with pytest.warns(UserWarning, match="held files oodsim did not write"):
        save_results(synthetic_results(2), out)
    assert open_results(out).sizes["seed"] == 2
    assert (outside / "secret.txt").read_text() == "user's"
    assert (tmp_path / "victim.txt").read_text() == "user's"


def test_results_of_another_spec_written_while_a_run_computes_are_not_replaced(
    tmp_path: Path,
) -> None:
    """The probe: two runs of one output path, started together, both passed the check
    before compute; the one that ended last replaced the other's results without
    ``--overwrite``. The check is made again before the write: the run ends in one line, the
    results of the other spec name stay, and what it computed is in the cache. (Two runs of
    one spec name end with the last one's results, the other's kept beside them.)"""
    cache, out = tmp_path / "c", tmp_path / "r.zarr"
    other = small_digits(1, seeds=attrs.evolve(small_digits().seeds, n=1, start=100), name="other")
    oodsim.run(other, cache=cache, n_workers=1, progress=False)  # its rerun is quick
    spec_path = digits_toml(tmp_path / "spec.toml", 8)
    run = [sys.executable, "-m", "oodsim.cli", "run", str(spec_path), "--workers", "1"]
    driver = command_server.popen(
        [*run, "--cache", str(cache), "--out", str(out), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        wait_for(lambda: len(list(cache.glob("checkpoint/*/*/meta.json"))) >= 2, 300, "compute")
        oodsim.run(other, cache=cache, n_workers=1, out=out, progress=False)
        _, stderr = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 2, stderr
    (line,) = stderr.strip().splitlines()
    assert "holds results of another spec" in line, line
    assert "They were written there while this run computed; nothing there was replaced" in line
    assert oodsim.open_results(out).attrs["spec_key"] == other.key
    again = oodsim.run(
        load_spec(spec_path), cache=cache, n_workers=1, out=tmp_path / "r2.zarr", progress=False
    )
    assert store_counts(again)["computed"] == {}
