"""The built-in datasets: digits, Fashion-MNIST, torchvision sets and image folders."""

from __future__ import annotations

import gzip
import importlib.util
import struct
from pathlib import Path

import numpy as np

from oodsim.data.image_files import opened_image
from oodsim.data.registry import ImageData, register_dataset
from oodsim.environment import read
from oodsim.errors import DataNotFoundError

FASHION_MNIST_DEBIAN = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_CLASSES = (
    "t-shirt/top",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "ankle boot",
)


@register_dataset(
    "digits",
    n_classes=10,
    hflip=False,
    description="scikit-learn's bundled 8x8 handwritten digits (1,797 images); no files needed",
)
def load_digits(
    root: str | None = None, download: bool = False, image_size: int | None = None
) -> ImageData:
    """scikit-learn's bundled digits: gray levels 0..16 as 8x8 uint8 images, times 16."""
    pixels, labels = _bundled_digits()
    images = np.clip(pixels * 16.0, 0, 255).astype(np.uint8).reshape(-1, 8, 8, 1)
    return ImageData(images, labels, tuple(map(str, range(10))))


def _bundled_digits() -> tuple[np.ndarray, np.ndarray]:
    """(n, 64) gray levels and (n,) labels of the digits file scikit-learn ships, read as
    ``sklearn.datasets.load_digits`` reads it but without importing ``sklearn.datasets``
    (about a second of CPU, paid by the driver of every digits run and by its workers);
    where the file is not where that loader keeps it, through the loader."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    folders = (spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            table = np.loadtxt(path, delimiter=",")
            return table[:, :-1], table[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits as sklearn_digits  # (about 1 s): a fallback only

    bunch = sklearn_digits()
    return bunch.data, bunch.target.astype(np.int64)


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (optionally gzipped), the format of MNIST and Fashion-MNIST."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        data = handle.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise DataNotFoundError(f"{path} is not an unsigned-byte IDX file")
    ndim = data[3]
    shape = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    array = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if array.size != int(np.prod(shape)):
        raise DataNotFoundError(f"{path} is truncated: expected {shape}, got {array.size} bytes")
    return array.reshape(shape)


def _idx_file(folder: Path, stem: str) -> Path | None:
    for name in (f"{stem}.gz", stem):
        if (folder / name).is_file():
            return folder / name
    return None


def _check_idx_pair(folder: Path, part: str, images: np.ndarray, labels: np.ndarray) -> None:
    """Fail with what was found when IDX files have the right names but not Fashion-MNIST's
    content (another dataset's files: other image sizes, label counts or classes)."""
    found = []
    if images.ndim != 3 or images.shape[1:] != (28, 28):
        found.append(f"images of shape {images.shape[1:]}, not (28, 28)")
    if labels.ndim != 1 or len(labels) != len(images):
        found.append(f"{labels.shape} labels for {len(images)} images")
    elif len(labels) and labels.max() >= len(FASHION_MNIST_CLASSES):
        found.append(f"labels up to {labels.max()}, not 0..9")
    if found:
        raise DataNotFoundError(
            f"{folder} does not hold Fashion-MNIST IDX files: its {part} files have "
            + " and ".join(found)
            + ". Point root= at the four Fashion-MNIST IDX files."
        )


def fashion_mnist_candidates(root: str | None) -> list[Path]:
    """Where Fashion-MNIST is looked for: ``root``, ``$OODSIM_DATA[/fashion-mnist]``, Debian."""
    if root:
        return [Path(root), Path(root) / "fashion-mnist"]
    candidates = []
    if (base := read("OODSIM_DATA")) is not None:
        candidates += [base / "fashion-mnist", base]
    return candidates + [FASHION_MNIST_DEBIAN]


FASHION_MNIST_STEMS = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def fashion_mnist_files(root: str | None) -> list[Path]:
    """The four IDX files Fashion-MNIST is read from (the first folder holding all four), or
    the folders looked in when none does."""
    candidates = fashion_mnist_candidates(root)
    for folder in candidates:
        files = [_idx_file(folder, stem) for stem in FASHION_MNIST_STEMS]
        if all(files):
            return files  # type: ignore[return-value]
    return candidates


@register_dataset(
    "fashion_mnist",
    n_classes=10,
    hflip=True,
    description="Fashion-MNIST from IDX files (train + test, 70,000 images 28x28)",
    files=fashion_mnist_files,
)
def load_fashion_mnist(
    root: str | None = None, download: bool = False, image_size: int | None = None
) -> ImageData:
    candidates = fashion_mnist_candidates(root)
    for folder in candidates:
        files = [_idx_file(folder, stem) for stem in FASHION_MNIST_STEMS]
        if all(files):
            train_x, train_y, test_x, test_y = (read_idx(f) for f in files)
            _check_idx_pair(folder, "train", train_x, train_y)
            _check_idx_pair(folder, "t10k", test_x, test_y)
            images = np.concatenate([train_x, test_x])[..., None]
            labels = np.concatenate([train_y, test_y]).astype(np.int64)
            return ImageData(images, labels, FASHION_MNIST_CLASSES)
    raise DataNotFoundError(
        "Fashion-MNIST IDX files (train-images-idx3-ubyte[.gz], ...) not found; looked in "
        + ", ".join(map(str, candidates))
        + ". Install them with `apt-get install dataset-fashion-mnist`, or pass root= / set "
        "$OODSIM_DATA to a folder holding the four IDX files."
    )


def _from_torchvision(name: str, root: str | None, download: bool) -> ImageData:
    """Train + test split of a torchvision dataset, read from ``root``."""
    # torchvision loads only for its datasets
    import torchvision.datasets as tvd

    if not root:
        raise DataNotFoundError(
            f"dataset {name!r} needs root= pointing at its torchvision folder "
            f"(or root= plus download=true on a machine with internet access)"
        )
    parts = []
    for train in (True, False):
        try:
            if name == "svhn":
                part = tvd.SVHN(root, split="train" if train else "test", download=download)
                images, labels = np.transpose(part.data, (0, 2, 3, 1)), np.asarray(part.labels)
            else:
                cls = {"mnist": tvd.MNIST, "cifar10": tvd.CIFAR10, "cifar100": tvd.CIFAR100}[name]
                part = cls(root, train=train, download=download)
                images, labels = np.asarray(part.data), np.asarray(part.targets)
        except RuntimeError as error:  # torchvision: "Dataset not found or corrupted"
            raise DataNotFoundError(
                f"{name} not found under {root!r} ({error}). Place the torchvision files there, "
                "or set download = true on a machine with internet access."
            ) from None
        except OSError as error:  # download attempted without network
            raise DataNotFoundError(
                f"could not download {name} into {root!r}: {error}. This machine may have no "
                "internet access: download it elsewhere and point root= at the files."
            ) from None
        if images.ndim == 3:
            images = images[..., None]
        parts.append((np.asarray(images, dtype=np.uint8), labels.astype(np.int64)))
    classes = getattr(part, "classes", None) or [str(c) for c in range(int(labels.max()) + 1)]
    return ImageData(
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        tuple(map(str, classes)),
    )


def _torchvision_loader(name: str):
    def load(
        root: str | None = None, download: bool = False, image_size: int | None = None
    ) -> ImageData:
        return _from_torchvision(name, root, download)

    return load


#: what torchvision reads under root= for each dataset (files or folders)
TORCHVISION_FILES = {
    "mnist": ("MNIST/raw",),
    "svhn": ("train_32x32.mat", "test_32x32.mat"),
    "cifar10": ("cifar-10-batches-py",),
    "cifar100": ("cifar-100-python",),
}


def _torchvision_files(name: str):
    def files(root: str | None) -> list[Path]:
        return [Path(root) / part for part in TORCHVISION_FILES[name]] if root else []

    return files


for _name, _classes, _flip in (
    ("mnist", 10, False),
    ("svhn", 10, False),
    ("cifar10", 10, True),
    ("cifar100", 100, True),
):
    register_dataset(
        _name,
        n_classes=_classes,
        hflip=_flip,
        description=f"torchvision {_name} (train + test) read from root=",
        files=_torchvision_files(_name),
    )(_torchvision_loader(_name))


IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}


def read_image_folder(root: str | Path, image_size: int | None = None) -> ImageData:
    """Class folders of images (``root/<class>/**/<image>``); RGB, resized to ``image_size``.

    Tiny-ImageNet's ``train/<wnid>/images/*.JPEG`` layout is read by pointing root at ``train``.
    """
    # Pillow loads only for image folders
    from PIL import Image

    root = Path(root)
    if not root.is_dir():
        raise DataNotFoundError(f"image folder {root} does not exist")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not classes:
        raise DataNotFoundError(f"image folder {root} has no class sub-folders")
    images, labels = [], []
    for label, name in enumerate(classes):
        files = sorted(p for p in (root / name).rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise DataNotFoundError(f"class folder {root / name} holds no images")
        for path in files:
            with opened_image(path) as image:
                image = image.convert("RGB")
                if image_size:
                    image = image.resize((image_size, image_size), Image.BILINEAR)
                images.append(np.asarray(image, dtype=np.uint8))
            labels.append(label)
    shapes = {im.shape for im in images}
    if len(shapes) > 1:
        raise DataNotFoundError(
            f"images in {root} have different sizes {sorted(shapes)[:3]}...; set image_size"
        )
    return ImageData(np.stack(images), np.asarray(labels, dtype=np.int64), tuple(classes))


def _image_folder_loader(default_size: int | None):
    def load(
        root: str | None = None, download: bool = False, image_size: int | None = None
    ) -> ImageData:
        if not root:
            raise DataNotFoundError("image folder datasets need root= (a folder of class folders)")
        if download:
            raise DataNotFoundError("image folder datasets cannot be downloaded; pass root=")
        return read_image_folder(root, image_size or default_size)

    return load


def image_folder_files(root: str | None) -> list[Path]:
    """An image folder is read whole: every file under ``root``."""
    return [Path(root)] if root else []


register_dataset(
    "image_folder",
    n_classes=None,
    hflip=True,
    description="class folders of images under root=",
    files=image_folder_files,
)(_image_folder_loader(None))
register_dataset(
    "tiny_imagenet",
    n_classes=200,
    hflip=True,
    description="Tiny-ImageNet train folder (root=.../tiny-imagenet-200/train)",
    files=image_folder_files,
)(_image_folder_loader(64))
