"""The ``dm`` format: Gatan DigitalMicrograph files (DM3, DM4), one 3D/4D file or a stack of files.

As LiberTEM 0.16's ``dm``: ``path=`` opens one file holding a 2D image, a
3D stack or a 4D scan; ``files=[...]`` opens a stack of files (each an
image or a stack), frames in list order. The tag tree is parsed by
:mod:`raytile.io.formats.dm_tags` (no third-party reader); the image's
``Data`` array is then read in place like a raw file (every IO backend,
straight zero-copy reads).

Which image: ``ImageList`` entries with at least two dimensions, skipping
a leading thumbnail (DataType 23, 2D), the first unless ``dataset_index``
(the 0-based ``ImageList`` index) names one. Shape: ``Dimensions`` are
stored x first; reversed they give ``nav + sig`` (sig: the last two, or
the last one for a "Spectrum image" ``Format``). Order: 2D images and 3D
stacks are C-ordered; 4D data and 3D spectrum images only if the image's
``Meta Data`` tag ``Data Order Swapped`` says so, else the file is refused
unless ``force_c_order=True`` (as LiberTEM does). For stacks,
``same_offset=True`` reads the header of the first file only and assumes
the others put their data at the same offset (files are still checked
for size).

Example::

    ds = ctx.load("dm", path="scan.dm4")
    ds = ctx.load("dm", files=sorted(glob.glob("series/*.dm3")), nav_shape=(16, 16))
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from raytile.common.errors import ConfigValidationError, DataSetException
from raytile.io.fileset import File, expand_paths
from raytile.io.formats.dm_tags import ArrayRef, DMTree, TagGroup, read_dm_tags, tag_text
from raytile.io.formats.framefiles import FrameFileDataSet, FrameLayout

__all__ = ["DMDataSet", "DMImage", "dm_images", "dm_image", "DM_DATA_TYPES"]

#: ImageData.DataType -> numpy kind and size (byte order from the file header).
DM_DATA_TYPES = {1: "i2", 2: "f4", 6: "u1", 7: "i4", 9: "i1", 10: "u2", 11: "u4", 12: "f8", 14: "u1",
                 39: "i8", 40: "u8"}
_UNSUPPORTED = {3: "complex64", 13: "complex128", 8: "RGB", 23: "RGBA", 4: "packed complex", 5: "packed complex"}


@dataclass(frozen=True)
class DMImage:
    """One image of a DM file's ``ImageList``: where its data lies and how to read it."""

    index: int
    dims: tuple[int, ...]  # as stored: x first
    data_type: int
    data: ArrayRef
    format: str
    order_swapped: bool | None

    @property
    def thumbnail(self) -> bool:
        return self.data_type == 23 and len(self.dims) == 2

    @property
    def sig_dims(self) -> int:
        return 1 if self.format.strip().lower() == "spectrum image" and len(self.dims) in (2, 3) else 2

    @property
    def c_order(self) -> bool:
        if self.order_swapped is not None:
            return self.order_swapped
        if self.sig_dims == 1 and len(self.dims) == 3:
            return False
        return len(self.dims) in (2, 3)

    @property
    def shape(self) -> tuple[int, ...]:
        """Nav + sig, C order (dims reversed); a 2D image gets the nav shape ``(1,)``."""
        full = tuple(reversed(self.dims))
        nav = full[:-self.sig_dims] or (1,)
        return nav + full[-self.sig_dims:]


def _image(path: str, index: int, group: Any) -> DMImage | None:
    if not isinstance(group, TagGroup):
        return None
    data = group.get("ImageData")
    if not isinstance(data, TagGroup):
        return None
    arr, dtype_code, dims_group = data.get("Data"), data.get("DataType"), data.get("Dimensions")
    if not isinstance(arr, ArrayRef) or not isinstance(dtype_code, int) or not isinstance(dims_group, TagGroup):
        return None
    dims = tuple(int(v) for v in dims_group.children() if isinstance(v, int))
    if not dims or any(d <= 0 for d in dims):
        raise DataSetException(f"{path}: image {index} has invalid Dimensions {dims}")
    meta = group.get("ImageTags")
    meta = meta.get("Meta Data") if isinstance(meta, TagGroup) else None
    fmt, swapped = "Unknown", None
    if isinstance(meta, TagGroup):
        fmt = tag_text(meta.get("Format")) or "Unknown"
        value = meta.get("Data Order Swapped")
        if value is not None:
            try:
                swapped = bool(int(value)) if isinstance(value, (bool, int, float)) else \
                    bool(int((tag_text(value) or "0").strip() or 0))
            except (ValueError, OverflowError):
                raise DataSetException(f"{path}: image {index}: tag 'Data Order Swapped' = {value!r} is not a "
                                       f"boolean") from None
    return DMImage(index, dims, dtype_code, arr, fmt, swapped)


def dm_images(tree: DMTree) -> list[DMImage]:
    """The images of a parsed DM file, in ``ImageList`` order (entries without image data left out)."""
    image_list = tree.root.get("ImageList")
    if not isinstance(image_list, TagGroup):
        raise DataSetException(f"{tree.path}: DM file without an ImageList")
    return [img for i, g in enumerate(image_list.children()) if (img := _image(tree.path, i, g)) is not None]


def _select(path: str, images: list[DMImage], index: int | None) -> DMImage:
    """The image to read: ``index`` if given, else the first of >= 2 dimensions that is not a thumbnail."""
    usable = [im for im in images if len(im.dims) >= 2 and not (im.thumbnail and im is images[0])]
    if index is not None:
        for im in images:
            if im.index == index:
                if len(im.dims) < 2:
                    raise DataSetException(f"{path}: dataset_index {index} is a {len(im.dims)}-D array, not an image")
                return im
        raise DataSetException(f"{path}: dataset_index {index} not found; images at "
                               f"{[im.index for im in images]}")
    if not usable:
        raise DataSetException(f"{path}: no 2D/3D/4D image in this DM file (images: "
                               f"{[(im.index, im.dims) for im in images]})")
    if len(usable) > 1:
        warnings.warn(f"{path}: {len(usable)} images in the file, reading image {usable[0].index}; "
                      f"choose another with dataset_index", RuntimeWarning, stacklevel=3)
    return usable[0]


def dm_image(path: str, dataset_index: int | None = None) -> DMImage:
    """The image of the DM file ``path`` a data set reads (``dataset_index``, else the first 2D+ image that is
    not a thumbnail): its shape, dtype code and whether its data is stored C-ordered (``c_order``)."""
    return _select(path, dm_images(read_dm_tags(path)), dataset_index)


def _dtype(path: str, tree: DMTree, im: DMImage) -> np.dtype:
    kind = DM_DATA_TYPES.get(im.data_type)
    if kind is None:
        what = _UNSUPPORTED.get(im.data_type, "unknown")
        raise DataSetException(f"{path}: image {im.index} has DataType {im.data_type} ({what}), which is not supported")
    dtype = np.dtype(tree.byteorder + kind)
    need = math.prod(im.dims) * dtype.itemsize
    if im.data.nbytes != need:
        raise DataSetException(
            f"{path}: image {im.index}: Dimensions {im.dims} of {dtype} need {need} bytes, its Data array holds "
            f"{im.data.nbytes} (corrupt header?)"
        )
    return dtype


class DMDataSet(FrameFileDataSet):
    """DigitalMicrograph files: ``path`` (one file, 2D-4D) or ``files`` (a stack, in list order)."""

    format_name = "dm"
    file_extensions = ("dm3", "dm4")
    params_schema = {
        "path": {"type": "paths"},
        "files": {"type": "paths"},
        "same_offset": {"type": "bool"},
        "force_c_order": {"type": "bool"},
        "dataset_index": {"type": "int", "min": 0},
    }

    def __init__(self, path: str | list[str] | None = None, files: str | list[str] | None = None, *,
                 same_offset: bool = False, force_c_order: bool = False, dataset_index: int | None = None,
                 **kwargs: Any):
        if isinstance(path, list) and files is None:  # LiberTEM's DMDataSet(["a.dm4", ...]): a stack
            path, files = None, path
        if (path is None) == (files is None):
            raise ConfigValidationError("dm: give either 'path' (one DM file) or 'files' (a stack of DM files)")
        self._files_in = files
        self._same_offset = same_offset
        self._force_c_order = force_c_order
        self._dataset_index = dataset_index
        first = path if isinstance(path, str) else (files[0] if isinstance(files, list) else files)
        super().__init__(first or "", **kwargs)

    def _check_inputs(self) -> None:
        if self._files_in is None:
            super()._check_inputs()
        else:
            expand_paths(self._files_in)  # DataSetException naming a missing file or an empty pattern

    def _read_layout(self) -> FrameLayout:
        if self._files_in is None:
            return self._single()
        return self._stack(expand_paths(self._files_in))

    def _single(self) -> FrameLayout:
        path = self._path
        tree = read_dm_tags(path)
        im = _select(path, dm_images(tree), self._dataset_index)  # dm_image(), with the tree kept for _dtype
        dtype = _dtype(path, tree, im)
        if not (im.c_order or self._force_c_order):
            raise DataSetException(
                f"{path}: cannot identify the data of image {im.index} (Dimensions {im.dims}, Format "
                f"{im.format!r}) as C-ordered from its tags (no 'Data Order Swapped'); pass force_c_order=True to "
                f"read it as C-ordered anyway"
            )
        shape = im.shape
        nav, sig = shape[:-im.sig_dims], shape[-im.sig_dims:]
        return FrameLayout(files=[File(path, 0, math.prod(nav), im.data.offset)], sig_shape=sig, dtype=dtype,
                           nav_shape=nav, info={"DM version": str(tree.version), "image index": str(im.index),
                                                "DM format tag": im.format})

    def _stack(self, paths: list[str]) -> FrameLayout:
        files: list[File] = []
        first: tuple[tuple[int, ...], np.dtype, int, int] | None = None
        for p in paths:
            if first is not None and self._same_offset:
                files.append(File(p, files[-1].end_idx, files[-1].end_idx + first[3], first[2]))
                continue
            self._check_path(p)
            tree = read_dm_tags(p)
            im = _select(p, dm_images(tree), self._dataset_index)
            dtype = _dtype(p, tree, im)
            sig = (im.dims[1], im.dims[0])
            count = math.prod(im.dims[2:])
            if first is not None and (sig, dtype) != first[:2]:
                raise DataSetException(f"{p}: frames of {sig} {dtype} differ from the first file's "
                                       f"{first[0]} {first[1]} ({paths[0]}); a stack needs equal frames")
            if first is None:
                first = (sig, dtype, im.data.offset, count)
            start = files[-1].end_idx if files else 0
            files.append(File(p, start, start + count, im.data.offset))
        assert first is not None
        total = files[-1].end_idx
        return FrameLayout(files=files, sig_shape=first[0], dtype=first[1], nav_shape=(total,),
                           info={"DM files": str(len(files))})

    def get_cache_key(self) -> Any:
        return (super().get_cache_key(), self._dataset_index, self._force_c_order)

    @classmethod
    def _detect_params(cls, path: str) -> dict[str, Any] | None:
        """``{"path", "nav_shape", "sig_shape"}`` of a ``.dm3``/``.dm4`` file holding 2D frames, else None."""
        if not cls.has_file_extension(path):
            return None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = read_dm_tags(path)
                im = _select(path, dm_images(tree), None)
        except DataSetException:
            return None
        if im.sig_dims != 2:
            return None
        shape = im.shape
        return {"path": path, "nav_shape": shape[:-2], "sig_shape": shape[-2:]}
