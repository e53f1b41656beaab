"""The folder a report owns: ``results/foo.zarr`` → ``results/foo.report`` (:func:`report_folder`),
marked by :data:`REPORT_MARKER`, which names the results reported and the files written.

:func:`claim` takes a folder before anything is written: a report of the same results is
refreshed, any other folder refused (:class:`ReportFolderError`) unless ``overwrite``, and the
files of a report of other results are removed first, so that an interrupted report never
leaves them under a marker that names these results. A file that a report would write
(:data:`REPORT_FILES`) but the marker does not list (a user's ``summary.md``) is never
replaced: such a folder is refused whatever ``overwrite`` says, and :func:`write_file` refuses
any such file a protocol's own hook would write. The marker says ``"complete": false`` until
:func:`finish` removes what an earlier report wrote and this one did not, and records the files
(:func:`is_complete`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from oodsim.errors import OodsimError
from oodsim.protocols import protocol_of
from oodsim.results import MANIFEST, check_writable, is_remote
from oodsim.stats import as_score
from oodsim.store.fs import owned, read_json, what_is, write_replacing

#: The file that marks a folder as an oodsim report, and names the results it reports.
REPORT_MARKER = ".oodsim-report.json"
#: The largest report marker read (it lists the files of one report).
MARKER_LIMIT = 16 << 20
SUMMARY = "summary.md"
#: figure → its file: :mod:`oodsim.report.summary` names the files it writes from here
FIGURE_FILES = {
    name: f"{name}.png"
    for name in (
        "forest",
        "distributions",
        "paired_differences",
        "running_mean",
        "win_probability",
        "variance_sources",
        "risk_coverage",
    )
}
#: The file of each table format a report writes when asked (:mod:`oodsim.report.paper`).
TABLE_FILES: dict[str, str] = {"latex": "table.tex", "csv": "table.csv"}
#: The files a report writes at the top of its folder (``summary.md`` and the figures of
#: :mod:`oodsim.report.summary`); a protocol's own report files (its report hooks' ``files``)
#: go in the sub-folder named after the protocol (:func:`section`).
REPORT_FILES = (SUMMARY, *FIGURE_FILES.values(), *TABLE_FILES.values())


class ReportFolderError(OodsimError, FileExistsError):
    """A report folder that holds something other than a report of the same results."""


def named(path: str | Path) -> Path:
    """``path``, resolved when it has no name of its own (``.``, ``..``, ``r.zarr/..``): the
    folder it names, as the system takes it, so that a name can be derived from it."""
    path = Path(path)
    return path.resolve() if path.name in ("", "..") else path


def report_folder(results_path: str | Path) -> Path:
    """Where ``oodsim report`` writes the report of the results at ``results_path`` by default:
    ``results/foo.zarr`` → ``results/foo.report`` (another name gets ``.report`` appended);
    ``.`` inside ``foo.zarr`` → ``../foo.report`` (:func:`named`); results on object storage
    (``s3://bucket/results/foo.zarr``) → ``foo.report`` in the working folder."""
    if is_remote(results_path):
        results_path = str(results_path).rstrip("/").rsplit("/", 1)[-1]
    path = named(results_path)
    name = path.stem if path.suffix == ".zarr" else path.name
    return path.with_name(f"{name}.report")


def _results_key(results: xr.Dataset | xr.DataArray) -> str:
    """What identifies the results a report shows: the spec key, else a hash of the scores."""
    if results.attrs.get("spec_key"):
        return str(results.attrs["spec_key"])
    score = as_score(results)
    digest = hashlib.sha256(np.ascontiguousarray(score.values, dtype=float).tobytes())
    labels = {str(d): [str(v) for v in score[d].values] for d in score.dims}
    digest.update(json.dumps(labels, sort_keys=True).encode())
    return "scores-" + digest.hexdigest()


def marker_for(results: xr.Dataset | xr.DataArray, source: str | Path | None) -> dict[str, Any]:
    """The content of :data:`REPORT_MARKER` (less the list of files written)."""
    return {
        "oodsim_report": 1,
        "results_key": _results_key(results),
        "experiment": results.attrs.get("experiment"),
        "protocol": results.attrs.get("protocol"),
        "results": None if source is None else str(source),
    }


def _read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of a report folder; None when there is none, ``{}`` when it is unreadable."""
    path = folder / REPORT_MARKER
    if not path.is_file():
        return None
    try:
        data = read_json(path, MARKER_LIMIT)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_marker(folder: Path, marker: dict[str, Any]) -> None:
    """Write the marker atomically (a reader never sees half of it)."""
    text = json.dumps(marker, indent=1, sort_keys=True) + "\n"
    write_file(folder / REPORT_MARKER, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_file(path: Path, write: Callable[[Path], object]) -> Path:
    """Write a report file through ``write(tmp)`` into a new temporary sibling, then rename it
    onto ``path``: a link at ``path`` is replaced, never written through (the file it points
    to is never changed). Inside a report folder (one holding
    :data:`REPORT_MARKER` above ``path``), a link on the way down to ``path`` is refused with
    :class:`ReportFolderError`: what is written stays in the folder the report owns, and is
    recorded in its marker at once (a report interrupted later leaves nothing unrecorded)."""
    folder = None
    for parent in path.parents:
        if (parent / REPORT_MARKER).is_file():
            folder = parent
            break
        if parent.is_symlink():
            if any((p / REPORT_MARKER).is_file() for p in parent.parents):
                raise ReportFolderError(
                    f"{parent} is a link in the report folder: a report never writes through "
                    "links; remove it, or choose another folder"
                )
            break  # a path the caller chose outside any report folder
    if folder is not None and path != folder / REPORT_MARKER:
        _refuse_unlisted(folder, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = write_replacing(path, write)
    if folder is not None and path != folder / REPORT_MARKER:
        _record(folder, path.relative_to(folder).as_posix())
    return written


def _refuse_unlisted(folder: Path, path: Path) -> None:
    """Raise :class:`ReportFolderError` if ``path`` exists but the marker of ``folder``, which
    lists the report's files, does not name it: it is not the report's to replace."""
    files = (_read_marker(folder) or {}).get("files")
    name = path.relative_to(folder).as_posix()
    if isinstance(files, list) and name not in files and os.path.lexists(path):
        raise ReportFolderError(
            f"{path} is not a file of the report in {folder} (its {REPORT_MARKER} does not "
            "list it): a report never replaces a file it did not write; move it, or choose "
            "another folder"
        )


def section(protocol: str | None) -> str:
    """The sub-folder of a report folder that holds the report files of protocol
    ``protocol``'s own (its report hooks' ``files``): the protocol's name ("" for none)."""
    return str(protocol or "")


def is_report_file(name: str, protocol: str | None = None) -> bool:
    """Whether a report of results of ``protocol`` may write ``name`` (a path relative to its
    folder): a file of every report, or one in the protocol's :func:`section`."""
    own = section(protocol)
    return name in REPORT_FILES or bool(own) and name.startswith(f"{own}/")


def _unlisted(folder: Path, listed: Iterable[str], protocol: str | None) -> list[str]:
    """The paths in ``folder`` that a report of ``protocol``'s results would write
    (:func:`is_report_file`) and that ``listed``, the files of the report there, does not
    name."""
    found = [name for name in REPORT_FILES if os.path.lexists(folder / name)]
    own = section(protocol)
    if own and (folder / own).is_dir() and not (folder / own).is_symlink():
        files = (p for p in (folder / own).rglob("*") if not p.is_dir())
        names = (p.relative_to(folder).as_posix() for p in files)
        found += [name for name in names if is_report_file(name, protocol)]
    return sorted(set(found) - set(listed))


def _listed(marker: dict[str, Any] | None) -> list[str] | None:
    """The files a report marker lists: none without a marker (None given); None when a
    marker lists none that can be read (unreadable, or no list of files in it)."""
    if marker is None:
        return []
    files = marker.get("files")
    return [f for f in files if isinstance(f, str)] if isinstance(files, list) else None


def _refuse_foreign_files(folder: Path, old: dict[str, Any] | None, protocol: str | None) -> None:
    """Refuse ``folder`` if it holds files a report of ``protocol``'s results would write that
    its marker (``old``; None: no marker) does not list, whatever ``overwrite`` says. A marker
    that lists nothing readable is oodsim's by its name: the report's files there are taken as
    its own."""
    listed = _listed(old)
    clash = _unlisted(folder, listed, protocol) if listed is not None else []
    if not clash:
        return
    shown = ", ".join(clash[:3]) + (f" and {len(clash) - 3} more" if len(clash) > 3 else "")
    why = f"no {REPORT_MARKER}" if old is None else f"its {REPORT_MARKER} does not list them"
    raise ReportFolderError(
        f"{folder} holds {shown}, which a report writes but oodsim did not write there ({why}); "
        "a report never replaces a file it did not write, even with --overwrite (overwrite=True): "
        "move them, or choose another folder"
    )


def _record(folder: Path, name: str) -> None:
    """Add ``name`` to the files the marker of ``folder`` lists."""
    marker = _read_marker(folder)
    files = marker.get("files") if marker else None
    if isinstance(files, list) and name not in files:
        _write_marker(folder, {**marker, "files": sorted([*files, name])})


def _describe(marker: dict[str, Any]) -> str:
    key = str(marker.get("results_key") or "?")
    return f"{marker.get('experiment') or 'unnamed'}, key {key[:12]}"


def _results_around(folder: Path, results: Path | None) -> Path | None:
    """The results store that ``folder`` is or lies in: one oodsim wrote (its manifest is on
    the way up), or ``results``, the output of the run about to write it; None outside any.
    Paths are compared where the writes would land: links followed, ``..`` taken as the
    system takes it (``r.zarr/../x.report`` is beside the results, not in them)."""
    here = folder.resolve()
    target = results.resolve() if results is not None else None
    for candidate in (here, *here.parents):
        if candidate == target or (candidate / MANIFEST).is_file():
            return candidate
    return None


def _check(
    folder: Path, marker: dict[str, Any], overwrite: bool, results: Path | None = None
) -> dict[str, Any] | None:
    """Refuse a folder in results, one holding files a report writes that oodsim did not, and
    one that cannot be written (a file on the way, a read-only folder, ``/proc``), even with
    ``overwrite``; a file, a folder of other things and a report of other results unless
    ``overwrite`` (changing nothing: writability is tried with a file made and removed);
    return the marker of the report already there (None if none, {} if unreadable)."""
    inside = _results_around(folder, results)
    if inside is not None:
        raise ReportFolderError(
            f"{folder} is in the results at {inside}: a report there would change the results, "
            f"which would then be refused as altered; choose another folder, e.g. "
            f"{report_folder(inside)}"
        )
    if folder.exists() and not folder.is_dir():
        raise ReportFolderError(f"{folder} is a file, not a report folder; choose another folder")
    old = _check_contents(folder, marker, overwrite) if folder.exists() else None
    check_writable(folder / SUMMARY, "the report")
    return old


def _check_contents(folder: Path, marker: dict[str, Any], overwrite: bool) -> dict[str, Any] | None:
    """The part of :func:`_check` that reads an existing ``folder``."""
    old = _read_marker(folder)
    _refuse_foreign_files(folder, old, marker.get("protocol"))
    how = "use --overwrite (overwrite=True) to write into it anyway, or choose another folder"
    if old is None and any(folder.iterdir()) and not overwrite:
        raise ReportFolderError(
            f"{folder} exists and is not an oodsim report (no {REPORT_MARKER}); {how} "
            "(no file oodsim did not write is replaced or deleted)"
        )
    if old and old.get("results_key") != marker["results_key"] and not overwrite:
        raise ReportFolderError(
            f"{folder} holds the report of other results ({_describe(old)}), not of "
            f"{_describe(marker)}; {how}"
        )
    return old


def check_report_folder(
    folder: str | Path, spec: Any, overwrite: bool = False, results: str | Path | None = None
) -> None:
    """Before a run computes anything: raise :class:`ReportFolderError` if the report of
    ``spec``'s results could not be written into ``folder`` (see :func:`claim`), or if
    ``folder`` is in ``results``, where the run will write its results;
    :class:`~oodsim.results.OutputError` if ``folder`` cannot be written (a file on the way,
    a read-only folder)."""
    marker = {"results_key": spec.key, "experiment": spec.name, "protocol": protocol_of(spec).name}
    on_disk = results is not None and not is_remote(results)
    _check(Path(folder), marker, overwrite, Path(results) if on_disk else None)


def claim(folder: Path, marker: dict[str, Any], overwrite: bool) -> list[str]:
    """Make ``folder`` this report's (before anything is written); return the files the
    report there before wrote. Refuses what :func:`check_report_folder` refuses."""
    old = _check(folder, marker, overwrite)
    folder.mkdir(parents=True, exist_ok=True)
    previous = _listed(old)
    adopted = []  # a marker listing nothing readable: its folder's report files, never removed
    if previous is None:
        previous, adopted = [], _unlisted(folder, [], marker.get("protocol"))
    if old and old.get("results_key") != marker["results_key"]:  # overwrite: another report
        _write_marker(folder, {**old, "complete": False})
        _remove(folder, previous)
        previous = []
    _write_marker(folder, {**marker, "files": sorted({*previous, *adopted}), "complete": False})
    return previous


def finish(folder: Path, marker: dict[str, Any], written: list[Path], previous: list[str]):
    """Remove files an earlier report wrote and this one did not (only those), then record
    what this report wrote in the marker, complete."""
    names = sorted(p.relative_to(folder).as_posix() for p in written)
    _remove(folder, set(previous) - set(names))
    _write_marker(folder, {**marker, "files": names, "complete": True})


def is_complete(folder: str | Path) -> bool:
    """Whether ``folder`` holds a report that was written to the end (not interrupted)."""
    marker = _read_marker(Path(folder))
    return bool(marker) and marker.get("complete", True) is True


def _remove(folder: Path, names: Iterable[str]) -> None:
    """Remove the files ``names`` (relative to ``folder``) that a report wrote, and folders
    they leave empty; a name leaving the folder, or a link, is never followed or removed."""
    for name in names:
        path = owned(folder, name)
        if path is None or what_is(path) != "file":
            continue
        path.unlink()
        parent = path.parent
        while parent != folder and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
