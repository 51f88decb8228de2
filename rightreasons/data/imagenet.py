"""ImageNet (ILSVRC-2012) classification from the class-per-folder ("ImageFolder") layout.

Layout::

    root/train/<wnid>/<image files>     e.g. train/n01440764/n01440764_10026.JPEG
    root/val/<wnid>/<image files>       e.g. val/n01440764/ILSVRC2012_val_00000293.JPEG
    root/LOC_synset_mapping.txt         optional: the class names, one line per class

The validation images must already lie in class folders, as the common ``valprep.sh`` puts them; any other split
(e.g. a held-out part of the training set) is one more folder ``root/<split>/<wnid>/...``. Image files are those
ending in ``.jpeg``, ``.jpg`` or ``.png`` (any case); other files, hidden entries (names starting with ``.``) and
folders nested inside a class folder are ignored.

Classes: the sorted wnid folder names of ``root/train`` when it exists, else of the requested split — the class
index of the published B-cos and torchvision ImageNet checkpoints. Every split uses this index: a class folder of
another split that is not in it is an error, while a class without images in a split is allowed (few-shot subsets),
as long as the split holds at least one image. Class names are the wnids, or the human-readable names of a synset
file (``synset_file``, by default ``root/LOC_synset_mapping.txt`` when it exists) with lines such as
``n01440764 tench, Tinca tinca``: the name is the text before the first comma (``tench``).

Samples: single-label one-hot ``labels``, no boxes (``has_boxes=False`` for every image, whatever
``annotated_fraction`` says), no groups. Ids are the paths relative to ``root`` (``train/n01440764/...JPEG``), in
sorted order (by class folder, then file name) so that runs are reproducible.

Listing reads only names (one ``os.scandir`` per folder, no ``stat`` and no image decoding per file), so that the
1.28 M training images are listed in seconds; images are decoded when a sample is loaded.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .base import AnnotatedDataset, Records
from .errors import DataError
from .io import read_text

__all__ = ["IMAGE_EXTENSIONS", "ImageNet", "read_synset_file"]

IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png")
SYNSET_FILE = "LOC_synset_mapping.txt"


def _scan(directory: Path) -> list[os.DirEntry]:
    """The visible (not hidden) entries of ``directory``, sorted by name; unreadable folders are a DataError."""
    try:
        with os.scandir(directory) as entries:
            return sorted((e for e in entries if not e.name.startswith(".")), key=lambda e: e.name)
    except OSError as e:
        raise DataError(f"{directory}: cannot list ImageNet folder: {e}") from e


def _class_folders(split_dir: Path) -> list[str]:
    """Sorted names of the class folders of a split folder."""
    return [e.name for e in _scan(split_dir) if e.is_dir()]


def _image_files(directory: Path) -> list[str]:
    """Sorted names of the image files directly in ``directory``, judged by extension only (no ``stat``)."""
    return [e.name for e in _scan(directory) if os.path.splitext(e.name)[1].lower() in IMAGE_EXTENSIONS]


def read_synset_file(path: str | os.PathLike) -> dict[str, str]:
    """``wnid → class name`` from a synset mapping file (lines ``n01440764 tench, Tinca tinca`` → ``tench``; blank
    lines are skipped); a malformed or repeated line is a :class:`DataError` naming the file and line."""
    path = Path(path)
    names: dict[str, str] = {}
    for number, line in enumerate(read_text(path, "ImageNet synset file").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)
        name = parts[1].split(",")[0].strip() if len(parts) == 2 else ""
        if not name:
            raise DataError(f"{path}: line {number}: {line.strip()!r} is not '<wnid> <name>[, <more names>]' "
                            "(e.g. 'n01440764 tench, Tinca tinca')")
        if parts[0] in names:
            raise DataError(f"{path}: line {number}: wnid {parts[0]!r} is listed a second time")
        names[parts[0]] = name
    return names


class ImageNet(AnnotatedDataset):
    """ImageNet classification from ``root/<split>/<wnid>/<image files>`` (see the module docstring).

    ``synset_file``: the class names (a path relative to ``root`` or absolute); default ``root/LOC_synset_mapping.txt``
    when it exists, else the classes are named by their wnids. ``wnids`` holds the wnid of every class index.
    """

    def __init__(self, root: str | os.PathLike, split: str = "train", *, synset_file: str | os.PathLike | None = None,
                 **options) -> None:
        root = Path(root)
        layout = f"{root}/train/<wnid>/<image files> and {root}/val/<wnid>/<image files>"
        if not root.is_dir():
            raise DataError(f"{root}: ImageNet root directory not found; expected {layout}")
        split_dir = root / split
        if not split_dir.is_dir():
            raise DataError(f"{split_dir}: ImageNet split folder {split!r} not found; expected {layout} (validation "
                            "images moved into class folders, e.g. by valprep.sh)")
        index_dir = root / "train" if (root / "train").is_dir() else split_dir
        wnids = _class_folders(index_dir)
        if not wnids:
            raise DataError(f"{index_dir}: no class folders; expected {index_dir}/<wnid>/<image files>")
        position = {wnid: i for i, wnid in enumerate(wnids)}
        present = wnids if split_dir == index_dir else _class_folders(split_dir)
        unknown = [wnid for wnid in present if wnid not in position]
        if unknown:
            raise DataError(f"{split_dir / unknown[0]}: class folder {unknown[0]!r} is not one of the {len(wnids)} "
                            f"classes of {index_dir} ({len(unknown)} unknown folder(s) in {split_dir}); every split "
                            "must use the class folders of the training split")
        files: list[str] = []
        targets: list[int] = []
        for wnid in present:
            names = _image_files(split_dir / wnid)
            files += [f"{split}/{wnid}/{name}" for name in names]
            targets += [position[wnid]] * len(names)
        if not files:
            loose = _image_files(split_dir)
            hint = f"; {len(loose)} image file(s) lie directly in {split_dir} and must be moved into class folders " \
                   "<wnid>/ (e.g. by valprep.sh)" if loose else ""
            raise DataError(f"{split_dir}: no image files ({', '.join(IMAGE_EXTENSIONS)}) in any class folder{hint}")
        labels = np.zeros((len(files), len(wnids)), dtype=bool)
        labels[np.arange(len(files)), targets] = True
        paths = np.array(files, dtype=str)
        # built directly rather than with Records.build: no boxes, and the paths are unique by construction, which
        # saves seconds of per-image box arrays and a sort of 1.28 M ids
        records = Records(ids=paths, files=paths, labels=labels, box_offsets=np.zeros(len(files) + 1, np.int64),
                          boxes=np.zeros((0, 4), np.float32), box_labels=np.zeros(0, np.int64))
        self.wnids = tuple(wnids)
        options["annotated_fraction"] = 0.0  # no boxes; the trainer passes its annotated_fraction to every dataset
        super().__init__(records, self._class_names(root, synset_file, wnids), name="imagenet", split=split,
                         image_root=root, **options)

    @staticmethod
    def _class_names(root: Path, synset_file: str | os.PathLike | None, wnids: list[str]) -> list[str]:
        """The names of the classes ``wnids``: from the synset file when there is one, else the wnids."""
        if synset_file is None:
            if not (root / SYNSET_FILE).is_file():
                return list(wnids)
            synset_file = SYNSET_FILE
        path = Path(synset_file) if Path(synset_file).is_absolute() else root / synset_file
        names = read_synset_file(path)
        missing = [wnid for wnid in wnids if wnid not in names]
        if missing:
            raise DataError(f"{path}: no line for class folder {missing[0]!r} ({len(missing)} of the {len(wnids)} "
                            "classes missing)")
        return [names[wnid] for wnid in wnids]
