"""Fingerprints of the files a dataset is read from, for its key.

A folder or file dataset is identified by its data, not by its name: two image folders under
one name, or Fashion-MNIST files replaced by others, must not share cached models, outputs or
scores. The fingerprint covers

- every file's path (relative to the folder given) and size, and
- the content of a sample of the files: all of them when there are at most
  :data:`SAMPLE_FILES`, else that many spread evenly over the files in name order; a file up to
  :data:`WHOLE_FILE` bytes is hashed whole, a larger one by :data:`BLOCKS` blocks of
  :data:`BLOCK` bytes spread over it (with its size).

So a file added, removed, renamed or resized always changes it; an edit that keeps every name
and size changes it when the edited file is in the sample (always, for small datasets). A
missing path has its own fingerprint (``absent``): a key can be computed, the run then fails
where it reads the data.

Within one run the fingerprint of a folder is computed once and reused while the folder and
the folders right under it keep their modification times (a file added, removed or renamed
there changes them): a key is computed several times a seed, and statting every file each time
would cost seconds a seed on a large folder. Every run starts afresh (:func:`forget`, called by
:func:`oodsim.run` and on each worker as a run's cluster takes it up), so a file rewritten in
place between two runs of one Python session is seen by the second, which never reports the
old images' cached scores.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable
from pathlib import Path

#: files whose content is hashed at most (the rest enter by name and size)
SAMPLE_FILES = 256
#: files up to this size are hashed whole
WHOLE_FILE = 4 << 20
#: a larger file is hashed by this many blocks of BLOCK bytes spread over it
BLOCKS = 16
BLOCK = 64 << 10
#: the length of a fingerprint (hex characters of a sha256)
LENGTH = 16

_MEMO: dict[tuple, str] = {}
_LOCK = threading.Lock()


def fingerprint(paths: Iterable[str | os.PathLike[str]]) -> str:
    """The fingerprint of the files at ``paths`` (files, or folders read recursively)."""
    roots = [Path(p).absolute() for p in paths]
    signature = tuple(_signature(root) for root in roots)
    with _LOCK:
        known = _MEMO.get(signature)
    if known is not None:
        return known
    digest = hashlib.sha256()
    for root in roots:
        digest.update(f"{root.name}\0{_root_digest(root)}\n".encode())
    value = digest.hexdigest()[:LENGTH]
    with _LOCK:
        _MEMO[signature] = value
    return value


def forget() -> None:
    """Drop the fingerprints this process computed: the next key reads the files again."""
    with _LOCK:
        _MEMO.clear()


def _signature(root: Path) -> tuple:
    """What tells whether ``root`` may have changed since it was fingerprinted in this process,
    cheaply (a key is computed several times per seed): its own status and the modification
    times of the folders right under it (class folders: adding, removing or renaming an image
    in one changes its time)."""
    try:
        status = root.stat()
    except OSError:
        return (str(root), None)
    if not root.is_dir():
        return (str(root), status.st_size, status.st_mtime_ns, status.st_ino)
    folders = [(str(root), status.st_mtime_ns)]
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                if entry.is_dir():
                    folders.append((entry.name, entry.stat().st_mtime_ns))
    except OSError:
        folders.append(("", None))
    return tuple(sorted(folders))


def _root_digest(root: Path) -> str:
    """sha256 over the names, sizes and sampled contents of the files at ``root``."""
    if not root.exists():
        return "absent"
    if root.is_file():
        files = [(root.name, root)]
    else:
        files = sorted(
            (path.relative_to(root).as_posix(), path) for path in root.rglob("*") if path.is_file()
        )
    digest = hashlib.sha256()
    sizes = []
    for name, path in files:
        size = path.stat().st_size
        sizes.append(size)
        digest.update(f"{name}\0{size}\n".encode())
    for index in _sample(len(files)):
        digest.update(_content(files[index][1], sizes[index]))
    return digest.hexdigest()


def _sample(n_files: int) -> list[int]:
    """Indices of the files whose content is hashed: all, or SAMPLE_FILES spread evenly."""
    if n_files <= SAMPLE_FILES:
        return list(range(n_files))
    return sorted({i * (n_files - 1) // (SAMPLE_FILES - 1) for i in range(SAMPLE_FILES)})


def _content(path: Path, size: int) -> bytes:
    """The sha256 of a file's content (whole, or BLOCKS blocks spread over a large file)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        if size <= WHOLE_FILE:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        else:
            for i in range(BLOCKS):
                handle.seek(i * (size - BLOCK) // (BLOCKS - 1))
                digest.update(handle.read(BLOCK))
    return digest.digest()
