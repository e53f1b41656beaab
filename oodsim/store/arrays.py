"""The arrays of a store entry: one zarr v3 group in one uncompressed ZIP file.

A zarr hierarchy on disk is a folder per array with a metadata file and one file per chunk: a
checkpoint of 29 tensors made 58 files, and a 50-seed run left 5,800 files and 7,100 folders,
which is what slows a shared file system (NFS, Lustre) down. ``arrays.zarr.zip`` holds the same
zarr v3 group in one file (zarr's own ``ZipStore`` reads it: ``zarr.open_group(ZipStore(path))``).

Most arrays oodsim stores are numbers, each written as one chunk with the plain ``bytes`` codec.
For those this module writes and reads the zarr v3 metadata and chunks itself: zarr's API costs
about a millisecond per array (its async machinery), which made a put 20 to 100 times slower
than the bytes it writes. Anything else (strings, objects) is written by zarr into memory and
copied into the same ZIP, and any metadata this module did not write is read by zarr. The ZIP
is deterministic (fixed dates, sorted names): the same arrays give the same bytes and checksum.
Entries written before this layout (an ``arrays.zarr`` folder) are read by zarr as before.
"""

from __future__ import annotations

import io
import json
import os
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

from oodsim.store.fs import parse_json

#: The file of an entry's arrays, and the folder older entries hold them in.
ARRAYS_ZIP = "arrays.zarr.zip"
ARRAYS_FOLDER = "arrays.zarr"
#: zarr v3 data type names of the numpy types written here (one chunk, ``bytes`` codec).
_NATIVE = {
    np.dtype(name): name
    for name in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
}
_BY_NAME = {name: dtype for dtype, name in _NATIVE.items()}
_EPOCH = (1980, 1, 1, 0, 0, 0)  # ZIP's earliest date: entries carry no time of their own
_GROUP = {"attributes": {}, "zarr_format": 3, "node_type": "group"}


def _fill(dtype: np.dtype) -> Any:
    """The zero fill value of a data type, as zarr v3 metadata writes it."""
    if dtype.kind == "b":
        return False
    if dtype.kind == "c":
        return [0.0, 0.0]
    return 0.0 if dtype.kind == "f" else 0


def _metadata(value: np.ndarray) -> dict[str, Any]:
    """zarr v3 metadata of ``value`` stored as one chunk with the ``bytes`` codec."""
    codec: dict[str, Any] = {"name": "bytes"}
    if value.dtype.itemsize > 1:
        codec["configuration"] = {"endian": "little"}
    return {
        "shape": list(value.shape),
        "data_type": _NATIVE[value.dtype],
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(value.shape)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": _fill(value.dtype),
        "codecs": [codec],
        "attributes": {},
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
    }


def _chunk_key(name: str, ndim: int) -> str:
    """The key of an array's only chunk (zarr's default chunk key encoding)."""
    return "/".join([name, "c", *["0"] * ndim])


def _native(value: Any) -> np.ndarray | None:
    """``value`` as a little-endian, C-ordered array of a type written here; None otherwise."""
    array = np.asarray(value)
    dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    if dtype not in _NATIVE:
        return None
    return array.astype(dtype, order="C", copy=False)  # (ascontiguousarray makes 0-d 1-d)


def _by_zarr(arrays: Mapping[str, Any]) -> dict[str, bytes]:
    """Files of a zarr v3 group holding ``arrays``, written by zarr itself (in memory)."""
    # only for types this module does not write (strings, objects): zarr's import is slow
    import zarr

    memory = zarr.storage.MemoryStore()
    group = zarr.open_group(memory, mode="w")
    for name, value in arrays.items():
        value = np.ascontiguousarray(value)
        group.create_array(name, data=value, chunks=value.shape or "auto", compressors=None)
    return {key: buffer.to_bytes() for key, buffer in memory._store_dict.items()}


def write_zip(path: Path, arrays: Mapping[str, Any]) -> None:
    """Write ``arrays`` as a zarr v3 group into a new ZIP file at ``path``, and fsync it."""
    for name in arrays:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(
                f"array name {name!r}: a name without '/' that does not start with '.'"
            )
    native = {name: _native(value) for name, value in arrays.items()}
    other = _by_zarr({n: arrays[n] for n, v in native.items() if v is None})
    files: dict[str, Any] = {"zarr.json": json.dumps(_GROUP).encode()}
    for name, value in native.items():
        if value is not None:
            files[f"{name}/zarr.json"] = json.dumps(_metadata(value)).encode()
            if value.size:
                files[_chunk_key(name, value.ndim)] = value
    files.update((key, data) for key, data in other.items() if key != "zarr.json")
    with path.open("xb") as handle:
        with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_STORED) as archive:
            for key in sorted(files):
                data = files[key]
                view = memoryview(data).cast("B") if isinstance(data, np.ndarray) else data
                info = zipfile.ZipInfo(key, date_time=_EPOCH)
                with archive.open(info, "w", force_zip64=len(view) >= zipfile.ZIP64_LIMIT) as out:
                    out.write(view)
        handle.flush()
        os.fsync(handle.fileno())


def _simple(meta: Any) -> np.dtype | None:
    """The numpy type of array metadata of the form :func:`write_zip` writes; None otherwise."""
    if not isinstance(meta, dict) or meta.get("node_type") != "array":
        return None
    name = meta.get("data_type")
    dtype = _BY_NAME.get(name) if isinstance(name, str) else None
    shape, grid = meta.get("shape"), meta.get("chunk_grid")
    codecs = meta.get("codecs")
    plain = isinstance(codecs, list) and len(codecs) == 1 and codecs[0].get("name") == "bytes"
    endian = plain and codecs[0].get("configuration", {}).get("endian", "little") == "little"
    one_chunk = grid == {"name": "regular", "configuration": {"chunk_shape": shape}}
    encoding = meta.get("chunk_key_encoding")
    default_keys = encoding == {"name": "default", "configuration": {"separator": "/"}}
    if (
        dtype is None
        or not endian
        or not one_chunk
        or not default_keys
        or meta.get("storage_transformers", []) != []
        or meta.get("fill_value") != _fill(dtype)
    ):
        return None
    return dtype


def read_zip(source: Path | bytes) -> dict[str, np.ndarray]:
    """The arrays of a ZIP written by :func:`write_zip` (or any zarr v3 group in a ZIP), from
    its file or its bytes.

    The file is read once; its stored (uncompressed) members are sliced out of those bytes
    rather than opened one by one (an entry of 32 arrays took 64 member opens)."""
    raw = source if isinstance(source, bytes) else source.read_bytes()
    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        infos = {info.filename: info for info in archive.infolist()}
        arrays: dict[str, np.ndarray] = {}
        for key in sorted(infos):
            name, _, rest = key.partition("/")
            if rest != "zarr.json":
                continue
            meta = parse_json(bytes(_member(raw, archive, infos[key])), key)
            dtype = _simple(meta)
            if dtype is None:
                return _read_by_zarr(source)
            array = np.zeros(meta["shape"], dtype=dtype)
            chunk = _chunk_key(name, array.ndim)
            if array.size:  # write_zip writes the chunk of every non-empty array
                if chunk not in infos:
                    raise ValueError(f"chunk {chunk} is missing (zarr would read zeros)")
                if infos[chunk].file_size != array.nbytes:
                    raise ValueError(f"chunk {chunk} is not {array.nbytes} bytes")
                data = _member(raw, archive, infos[chunk])
                memoryview(array).cast("B")[:] = data  # type: ignore[attr-defined]
            arrays[name] = array
    return arrays


#: a ZIP local file header: signature, versions, flags, method, times, CRC, sizes, the
#: lengths of the name and of the extra field that precede a member's data
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")


def _member(raw: bytes, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> memoryview | bytes:
    """The bytes of member ``info`` of the ZIP ``raw``: a slice of them where the member is
    stored uncompressed (as :func:`write_zip` stores every one), else read by ``zipfile``."""
    start = info.header_offset + _LOCAL_HEADER.size
    if info.compress_type != zipfile.ZIP_STORED or start > len(raw):
        return archive.read(info)
    fields = _LOCAL_HEADER.unpack_from(raw, info.header_offset)
    if fields[0] != zipfile.stringFileHeader:
        raise ValueError(f"member {info.filename} has no local header where the ZIP says")
    start += fields[-2] + fields[-1]  # the member's name and extra field
    data = memoryview(raw)[start : start + info.file_size]
    if len(data) != info.file_size:
        raise ValueError(f"member {info.filename} is cut short")
    if zlib.crc32(data) != info.CRC:  # what zipfile checks as it reads a member
        raise zipfile.BadZipFile(f"bad CRC-32 for member {info.filename}")
    return data


def members_problem(path: Path | IO[bytes], shapes: Mapping[str, Any]) -> str:
    """What is wrong with the members of the arrays ZIP at ``path`` (or open) against the array
    shapes its entry's meta record holds ("" when nothing), from the ZIP's directory and the small
    metadata members only: an array missing, renamed or added, another shape, a member that
    belongs to no array, and, for arrays :func:`write_zip` wrote itself, a missing or resized
    chunk. A ZIP resealed after such an edit (its checksum in meta updated) has a problem
    here too, so a lost array is never read as zeros."""
    with zipfile.ZipFile(path) as archive:
        infos = {info.filename: info for info in archive.infolist()}
        found = {k.split("/")[0] for k in infos if k.count("/") == 1 and k.endswith("/zarr.json")}
        for difference, says in (
            (set(shapes) - found, "lacks arrays that meta.json records"),
            (found - set(shapes), "holds arrays that meta.json does not record"),
        ):
            if difference:
                return f"{ARRAYS_ZIP} {says}: {sorted(difference)[:3]}"
        stray = [k for k in infos if k != "zarr.json" and k.split("/")[0] not in found]
        if stray:
            return f"{ARRAYS_ZIP} holds members of no array: {sorted(stray)[:3]}"
        for name, shape in sorted(shapes.items()):
            meta = parse_json(archive.read(f"{name}/zarr.json"), f"{name}/zarr.json")
            if not isinstance(meta, dict) or meta.get("shape") != list(shape):
                recorded = meta.get("shape") if isinstance(meta, dict) else None
                return f"array {name} has shape {recorded}, meta.json records {list(shape)}"
            dtype = _simple(meta)
            size = int(np.prod(shape, dtype=np.int64))
            if dtype is None or not size:
                continue
            chunk = infos.get(_chunk_key(name, len(shape)))
            if chunk is None:
                return f"array {name} lost its data ({_chunk_key(name, len(shape))})"
            if chunk.file_size != size * dtype.itemsize:
                return f"array {name} has {chunk.file_size} bytes, not {size * dtype.itemsize}"
    return ""


def _read_by_zarr(source: Path | bytes) -> dict[str, np.ndarray]:
    """Every array of a zarr v3 group in a ZIP (its file, or its bytes), read by zarr."""
    # only for metadata this module did not write (see write_zip)
    import zarr

    if isinstance(source, bytes):  # zarr reads a ZIP from a file only
        with tempfile.TemporaryDirectory(prefix="oodsim-zip-") as folder:
            (Path(folder) / ARRAYS_ZIP).write_bytes(source)
            return _read_by_zarr(Path(folder) / ARRAYS_ZIP)
    store = zarr.storage.ZipStore(source, mode="r")
    try:
        group = zarr.open_group(store, mode="r")
        return {name: np.asarray(group[name][...]) for name in group.array_keys()}
    finally:
        store.close()


def read_folder(folder: Path) -> dict[str, np.ndarray]:
    """Every array of a zarr group folder (entries written before :data:`ARRAYS_ZIP`)."""
    # only entries written by older versions need zarr here
    import zarr

    group = zarr.open_group(folder, mode="r")
    return {name: np.asarray(group[name][...]) for name in group.array_keys()}


def read_arrays(entry: Path) -> dict[str, np.ndarray]:
    """The arrays of an entry folder, in either layout."""
    if (entry / ARRAYS_ZIP).is_file():
        return read_zip(entry / ARRAYS_ZIP)
    return read_folder(entry / ARRAYS_FOLDER)
