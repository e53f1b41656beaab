"""One image file opened with Pillow, for image folders and a model's own pipeline alike."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from oodsim.errors import DataNotFoundError


@contextlib.contextmanager
def opened_image(path: str | os.PathLike[str]) -> Iterator[Any]:
    """The Pillow image at ``path``, or one :class:`~oodsim.errors.DataNotFoundError` naming
    the file: for a file Pillow cannot read, and for anything that is not a regular file. A
    FIFO named like an image (``005.png``) made Pillow's open wait forever for a writer, and
    the run hung before any output."""
    # Pillow loads only when image files are read
    from PIL import Image, UnidentifiedImageError

    if not os.path.isfile(path):
        kind = "missing" if not os.path.lexists(path) else "not a regular file (a FIFO, device?)"
        raise DataNotFoundError(f"cannot read image {path}: {kind}")
    try:
        with Image.open(path) as image:
            yield image
    except (UnidentifiedImageError, OSError) as error:
        raise DataNotFoundError(f"cannot read image {path}: {error}") from None
