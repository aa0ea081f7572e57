"""The ``frms6`` format: PNDetector pnCCD data (``.hdr`` + ``_000.frms6`` dark frames + data ``.frms6`` files).

``ctx.load("frms6", path="scan.hdr")`` (or any of its ``.frms6`` files) with
LiberTEM's parameters: ``enable_offset_correction=True`` (subtract the mean
of the dark frames in ``_000.frms6``), ``gain_map_path`` (a ``.mat`` with
``GainMap`` or a ``;``-separated ``.csv``, transposed, as LiberTEM reads
it), ``nav_shape`` (default: ``stemimagesize`` of the ``.hdr``),
``sig_shape``, ``sync_offset=0``. Layout: see :mod:`raytile.io.testing.frms6`.

Decoding: a stored frame ``h x w`` (little-endian uint16 after a 64-byte
frame header) is unfolded to ``2 h x w / 2``: the bottom half is the
stored right half turned by 180 degrees; with binning ``b`` each stored row
fills ``b`` rows (``sig_shape`` is ``(2 h b, w / 2)``). The read ranges are
one per output row (numpy, :func:`frms6_read_ranges`) and the decoder
(:func:`decode_frms6_tile`) copies or reverses each row straight into the
tile's dtype, in the worker, on every IO backend. Tiles are whole rows, in
multiples of the binning (base shape ``(1, b, w / 2)``), so any depth or
band of rows the UDFs ask for is read without touching other rows.

The dark frame and gain map become the data set's
:attr:`~raytile.io.dataset.DataSet.corrections` (a
:class:`~raytile.io.corrections.CorrectionSet`, applied to every tile as
``(tile - dark) * gain``) unless the run passes its own; with offset
correction the data set's dtype is float32, as in LiberTEM.
"""

from __future__ import annotations

import configparser
import csv
import glob
import math
import os
import re
import warnings
from typing import Any, Callable

import numba
import numpy as np

from raytile.common.errors import DataSetException
from raytile.common.shape import Shape
from raytile.common.tiling import TilingScheme
from raytile.io.corrections import CorrectionSet
from raytile.io.dataset import DataSetMeta
from raytile.io.decoders import Decoder
from raytile.io.fileset import FILE_FRAME_PARAMS, File, FileDataSet, FilePartition, FileSet, check_sync_offset
from raytile.io.read_ranges import META_ENTRIES, RR_ENTRIES, RR_FILE, RR_NPX, RR_OUT, RR_SKIP, RR_START, RR_STOP

__all__ = ["FRMS6DataSet", "get_filenames", "stored_rows", "_map_y", "FRMS6Partition", "FRMS6FileSet",
           "FRMS6Decoder", "read_hdr", "read_file_header", "frms6_read_ranges", "decode_frms6_tile", "unfold"]

FILE_HEADER_SIZE = 1024
FRAME_HEADER_SIZE = 64
_FILE_HEADER = np.dtype([
    ("header_size", "<u2"), ("frame_header_size", "<u2"), ("padding_1", "V3"), ("version", "u1"),
    ("comment_1", "V80"), ("width", "<u2"), ("height", "<u2"), ("comment_2", "V928"), ("num_frames", "<u4"),
])
_READOUT_MODE = re.compile(r'^"?bin:\s*(?P<bin>\d+),\s*windowing:\s*(?P<win_i>\d+)\s*x\s*(?P<win_j>\d+)\s*"?$')


# -- files and headers ---------------------------------------------------------

def _base(path: str) -> str:
    stem, ext = os.path.splitext(path)
    if ext == ".hdr":
        return stem
    if ext == ".frms6":
        return re.sub(r"_[0-9]+$", "", stem)
    raise DataSetException(f"{path}: an FRMS6 data set is opened by its .hdr or one of its .frms6 files, "
                           f"not a {ext or 'extension-less'} file")


def get_filenames(path: str | os.PathLike, disable_glob: bool = False) -> list[str]:
    """The ``.frms6`` files of the data set ``path`` (its ``.hdr`` or one ``.frms6``) names, sorted (the dark
    frame file first), maybe none; ``[path]`` with ``disable_glob``. LiberTEM's ``frms6.get_filenames``."""
    path = os.fspath(path)
    if disable_glob:
        return [path]
    return sorted(glob.glob(f"{glob.escape(_base(path))}_*.frms6"))


def data_files(path: str) -> tuple[str, list[str]]:
    """``(the .hdr, the .frms6 files in order: dark frames first)`` of the data set ``path`` belongs to."""
    base = _base(path)
    files = get_filenames(path)
    if len(files) < 2:
        raise DataSetException(f"{path}: an FRMS6 data set needs the dark frame file {base}_000.frms6 and at "
                               f"least one data file {base}_001.frms6, found {files or 'none'}")
    return base + ".hdr", files


def read_hdr(path: str) -> dict[str, Any]:
    """The ``[measurementInfo]`` of a ``.hdr``: numbers as ints, ``stemimagesize`` a tuple, ``readoutmode`` a dict."""
    if not os.path.exists(path):
        raise DataSetException(f"{path}: the FRMS6 .hdr file is missing")
    config = configparser.ConfigParser()
    try:
        config.read(path)
    except configparser.Error as e:
        raise DataSetException(f"{path}: not an FRMS6 .hdr (INI) file: {e}") from None
    if "measurementInfo" not in config:
        raise DataSetException(f"{path}: no [measurementInfo] section (have {config.sections()})")
    info: dict[str, Any] = dict(config["measurementInfo"])
    try:
        for key in ("darkframes", "dwelltimemicroseconds", "gain", "signalframes"):
            if key in info:
                info[key] = int(info[key])
        info["stemimagesize"] = tuple(int(v) for v in info["stemimagesize"].split("x"))
    except (KeyError, ValueError) as e:
        raise DataSetException(f"{path}: bad or missing measurementInfo entry: {e}") from None
    match = _READOUT_MODE.match(info.get("readoutmode", ""))
    if match is None:
        raise DataSetException(f"{path}: cannot parse readoutmode {info.get('readoutmode')!r}")
    info["readoutmode"] = {k: int(v) for k, v in match.groupdict().items()}
    if info["readoutmode"]["bin"] not in (1, 2, 4):
        raise DataSetException(f"{path}: binning {info['readoutmode']['bin']} is not 1, 2 or 4")
    return info


def read_file_header(path: str) -> dict[str, int]:
    """The checked 1024-byte header of a ``.frms6`` plus its frame count (from the size where the header has 0)."""
    size = os.path.getsize(path)
    if size < FILE_HEADER_SIZE:
        raise DataSetException(f"{path}: file of {size} bytes is shorter than the FRMS6 header (truncated?)")
    raw = np.fromfile(path, dtype=_FILE_HEADER, count=1)[0]
    head = {k: int(raw[k]) for k in ("header_size", "frame_header_size", "version", "width", "height", "num_frames")}
    if (head["header_size"], head["frame_header_size"], head["version"]) != (FILE_HEADER_SIZE, FRAME_HEADER_SIZE, 6):
        raise DataSetException(
            f"{path}: not an FRMS6 file: header size {head['header_size']}, frame header size "
            f"{head['frame_header_size']}, version {head['version']} (expected 1024, 64, 6; corrupt header?)")
    if head["width"] == 0 or head["height"] == 0 or head["width"] % 2:
        raise DataSetException(f"{path}: bad frame size {head['height']} x {head['width']} in the header")
    stride = FRAME_HEADER_SIZE + 2 * head["width"] * head["height"]
    if head["num_frames"] == 0:  # older files: from the size
        if (size - FILE_HEADER_SIZE) % stride:
            raise DataSetException(f"{path}: {size} bytes are not a whole number of {stride}-byte frames "
                                   f"after the header (truncated?)")
        head["num_frames"] = (size - FILE_HEADER_SIZE) // stride
    elif size < FILE_HEADER_SIZE + head["num_frames"] * stride:
        raise DataSetException(f"{path}: file is too short: {head['num_frames']} frames of {stride} bytes need "
                               f"{FILE_HEADER_SIZE + head['num_frames'] * stride} bytes, the file has {size} "
                               f"(truncated?)")
    head["size"] = size
    return head


def unfold(stored: np.ndarray, binning: int) -> np.ndarray:
    """Stored frames ``(n, h, w)`` as detector images ``(n, 2 h b, w / 2)`` (numpy; for the dark frame)."""
    n, h, w = stored.shape
    half = w // 2
    out = np.concatenate([stored[:, :, :half], stored[:, ::-1, half:][:, :, ::-1]], axis=1)
    return np.repeat(out, binning, axis=1) if binning > 1 else out


def read_gain_map(path: str) -> np.ndarray:
    """A gain map as LiberTEM reads it: ``GainMap`` of a ``.mat``, or a ``;``-separated ``.csv`` transposed."""
    if not os.path.exists(path):
        raise DataSetException(f"gain map not found: {path}")
    ext = os.path.splitext(path)[1].lower()
    if ext == ".mat":
        import scipy.io

        try:
            mat = scipy.io.loadmat(path)
        except Exception as e:  # scipy raises several kinds for a bad file
            raise DataSetException(f"{path}: cannot read the .mat gain map: {e}") from None
        if "GainMap" not in mat:
            raise DataSetException(f"{path}: the .mat file has no 'GainMap' variable")
        return np.asarray(mat["GainMap"])
    if ext == ".csv":
        with open(path, newline="") as f:
            try:
                rows = [[float(v) for v in row if v.strip() != ""] for row in csv.reader(f, delimiter=";")]
            except ValueError as e:
                raise DataSetException(f"{path}: not a gain map of numbers: {e}") from None
        rows = [r for r in rows if r]
        if not rows or len({len(r) for r in rows}) != 1:
            raise DataSetException(f"{path}: the gain map's rows differ in length (or it is empty)")
        return np.array(rows).T
    raise DataSetException(f"{path}: gain maps are .mat or .csv files")


# -- read ranges and decoding ----------------------------------------------

def stored_rows(yb: np.ndarray, raw_h: int) -> tuple[np.ndarray, np.ndarray]:
    """``(stored row, in the bottom half)`` of the binned image rows ``yb``: the top half of the detector
    is stored as it is, the bottom half upside down in the right half of the ``raw_h`` stored rows."""
    yb = np.asarray(yb)
    bottom = yb >= raw_h
    return np.where(bottom, 2 * raw_h - 1 - yb, yb), bottom


def _map_y(y: int, xs: int, binning: int, num_rows: int) -> tuple[int, int]:
    """LiberTEM's ``frms6._map_y``: ``(stored row, x offset)`` of row ``y`` of the binned image of
    ``num_rows`` detector rows, ``xs`` the offset of the stored rows' right half (see :func:`stored_rows`)."""
    r, bottom = stored_rows(np.asarray(y), num_rows // 2 // binning)
    return int(r), (xs if bool(bottom) else 0)


def frms6_read_ranges(frames: np.ndarray, depth: int, rows: np.ndarray, fileset_arr: np.ndarray, raw_h: int,
                      raw_w: int, binning: int) -> tuple[np.ndarray, np.ndarray]:
    """``(tile_meta, read_ranges)`` (see :mod:`raytile.io.read_ranges`) for reading ``frames`` in blocks of
    ``depth``; one read range per output row.

    ``rows`` ``(n_slices, 2)``: each signal slice's first row and row count
    (whole rows). Output row ``y`` is stored row ``y // binning`` of the top
    half, or, in the bottom half, the right half of stored row
    ``2 raw_h - 1 - y // binning`` reversed (``RR_SKIP`` = 1). A regular
    layout, so numpy computes it (no jitted code to compile in a fresh worker).
    """
    frames = np.asarray(frames, dtype=np.int64)
    half = raw_w // 2
    stride = FRAME_HEADER_SIZE + 2 * raw_h * raw_w
    starts, stops, headers = fileset_arr[:, 0], fileset_arr[:, 1], fileset_arr[:, 2]
    fidx = np.minimum(np.searchsorted(stops, frames, side="right"), len(stops) - 1)
    inside = (frames >= starts[fidx]) & (frames < stops[fidx])
    fidx = np.where(inside, fidx, -1)
    frame_base = np.where(inside, headers[fidx] + (frames - starts[fidx]) * stride + FRAME_HEADER_SIZE, 0)
    slices = []
    for y0, h in rows.tolist():
        y = np.arange(y0, y0 + h)
        r, bottom = stored_rows(y // binning, raw_h)
        slices.append((2 * (r * raw_w + np.where(bottom, half, 0)), (y - y0) * half, bottom.astype(np.int64), h))
    n = frames.shape[0]
    n_blocks = -(-n // depth)
    rr_per_tile = max(1, depth * int(rows[:, 1].max()))
    meta = np.zeros((n_blocks * len(slices), META_ENTRIES), dtype=np.int64)
    rr = np.zeros((n_blocks * len(slices), rr_per_tile, RR_ENTRIES), dtype=np.int64)
    t = 0
    for first in range(0, n, depth):
        ins = inside[first:first + depth]
        fi = fidx[first:first + depth]
        base = frame_base[first:first + depth]
        count = ins.shape[0]
        for s, (row_off, out_rel, rev, h) in enumerate(slices):
            m = count * h
            tile = rr[t, :m]
            start = base[:, None] + row_off[None, :]
            tile[:, RR_FILE] = np.repeat(fi, h)
            tile[:, RR_START] = np.where(ins[:, None], start, 0).ravel()
            tile[:, RR_STOP] = np.where(ins[:, None], start + 2 * half, 0).ravel()
            tile[:, RR_OUT] = (np.arange(count)[:, None] * (h * half) + out_rel[None, :]).ravel()
            tile[:, RR_NPX] = half
            tile[:, RR_SKIP] = np.tile(rev, count)
            used = fi[ins]
            meta[t] = (first, count, s, m, used.min() if used.size else 0, used.max() if used.size else -1,
                       int(not ins.all()))
            t += 1
    return meta, rr


@numba.njit(cache=True, nogil=True)
def decode_frms6_tile(inp, ranges, out):
    """Copy the rows ``ranges`` reads (one file's, see :func:`~raytile.io.decoders.decode_tile`;
    little-endian uint16) into ``out``, reversed where ``RR_SKIP`` says so."""
    for i in range(ranges.shape[0]):
        o = ranges[i, RR_OUT]
        n = ranges[i, RR_NPX]
        s = ranges[i, RR_START]
        row = inp[s:s + 2 * n].view(np.uint16)  # little-endian hosts
        dest = out[o:o + n]
        if ranges[i, RR_SKIP]:
            for x in range(n):
                dest[x] = row[n - 1 - x]
        else:
            for x in range(n):
                dest[x] = row[x]


class FRMS6Decoder(Decoder):
    """Rows of little-endian uint16, some reversed (:func:`decode_frms6_tile`)."""

    bpp = 16

    def tile_decoder(self) -> tuple[Callable, tuple]:
        return decode_frms6_tile, ()

    def describe(self) -> str:
        return "frms6 unfolded uint16 rows"


class FRMS6FileSet(FileSet):
    """The data ``.frms6`` files (not the dark frames), frames of ``raw_h x raw_w`` after 64-byte headers."""

    def __init__(self, files: list[File], raw_shape: tuple[int, int], binning: int, native_sig: bool):
        h, w = raw_shape
        super().__init__(files, (2 * h * binning, w // 2), 16, frame_header_bytes=FRAME_HEADER_SIZE)
        self.raw_shape = raw_shape
        self.binning = binning
        self.native_sig = native_sig

    def file_bytes(self, f: File) -> int:
        h, w = self.raw_shape
        return f.file_header + f.num_frames * (FRAME_HEADER_SIZE + 2 * h * w)

    @property
    def whole_frames(self) -> bool:
        return False

    def get_read_ranges(self, frames: np.ndarray, scheme: TilingScheme):
        if self.native_sig:
            rows = np.array([(sl.origin[0], sl.shape[0]) for sl in scheme.sig_slices], dtype=np.int64)
            if any(sl.shape[1] != self.sig_shape[1] for sl in scheme.sig_slices):
                raise DataSetException(f"{self.paths[0]}: FRMS6 tiles are whole rows; the tiling scheme {scheme} "
                                       f"was not negotiated with this data set's partitions")
        else:  # a reshaped signal: whole frames, in the flat order of the unfolded frame
            rows = np.array([(0, self.sig_shape[0])], dtype=np.int64)
        h, w = self.raw_shape
        return frms6_read_ranges(frames, int(scheme.depth), rows, self.to_array(), h, w, self.binning)


class FRMS6Partition(FilePartition):
    """Tiles of whole rows, in multiples of the binning (see the module doc)."""

    fileset: FRMS6FileSet

    def get_base_shape(self, roi: np.ndarray | None) -> tuple[int, ...]:
        sig = self.meta.shape.sig.to_tuple()
        if not self.fileset.native_sig:
            return (1,) + sig
        return (1, self.fileset.binning, sig[1])

    def adjust_tileshape(self, tileshape: tuple[int, ...], roi: np.ndarray | None) -> tuple[int, ...]:
        sig = self.meta.shape.sig.to_tuple()
        if tuple(tileshape[1:]) == sig or not self.fileset.native_sig:
            return (tileshape[0],) + sig
        b = self.fileset.binning
        return (tileshape[0], max(b, tileshape[1] // b * b), sig[1])


class FRMS6DataSet(FileDataSet):
    """PNDetector FRMS6 data: ``ctx.load("frms6", path="scan.hdr")``; see the module doc.

    >>> ds = ctx.load("frms6", path="scan.hdr", enable_offset_correction=True)  # doctest: +SKIP
    """

    format_name = "frms6"
    file_extensions = ("frms6", "hdr")
    partition_class = FRMS6Partition
    params_schema = {
        **FILE_FRAME_PARAMS,
        "enable_offset_correction": {"type": "bool"},
        "gain_map_path": {"type": "path"},
        "dest_dtype": {"type": "dtype"},
    }

    def __init__(self, path: str, enable_offset_correction: bool = True, gain_map_path: str | None = None,
                 dest_dtype: Any = None, nav_shape: tuple[int, ...] | None = None,
                 sig_shape: tuple[int, ...] | None = None, sync_offset: int = 0, **kwargs: Any):
        super().__init__(**kwargs)
        if dest_dtype is not None:
            warnings.warn("frms6: dest_dtype is ignored (the tile dtype is chosen per run), as in LiberTEM",
                          DeprecationWarning, stacklevel=3)
        self._path = path
        self._enable_offset_correction = enable_offset_correction
        self._gain_map_path = gain_map_path
        self._nav_shape_in = nav_shape
        self._sig_shape_in = sig_shape
        self._sync_offset = sync_offset
        self._dark: np.ndarray | None = None
        self._gain: np.ndarray | None = None
        self._hdr: dict[str, Any] = {}

    @classmethod
    def _detect_params(cls, path: str) -> dict | None:
        """``{"path", "nav_shape"}`` for a ``.hdr`` or ``.frms6`` whose ``.hdr`` has a ``[measurementInfo]``."""
        if not cls.has_file_extension(path):
            return None
        hdr = _base(path) + ".hdr"
        if not os.path.exists(hdr):
            return None
        with open(hdr, "rb") as f:
            if b"[measurementInfo]" not in f.read(65536):
                return None  # e.g. a Merlin .hdr
        info = read_hdr(hdr)
        return {"path": path, "nav_shape": tuple(info["stemimagesize"])}

    @property
    def corrections(self) -> Any:
        """The run's corrections: those given to the data set, else the dark frame and gain map (or None)."""
        if self._corrections is not None:
            return self._corrections
        if self._dark is None and self._gain is None:
            return None
        return CorrectionSet(dark=self._dark, gain=self._gain)

    def _do_initialize(self) -> DataSetMeta:
        if not os.path.exists(self._path):
            raise DataSetException(f"file not found: {self._path}")
        hdr_path, paths = data_files(self._path)
        self._hdr = hdr = read_hdr(hdr_path)
        binning = hdr["readoutmode"]["bin"]
        heads = [read_file_header(p) for p in paths]
        raw_shape = (heads[0]["height"], heads[0]["width"])
        for p, head in zip(paths, heads):
            if (head["height"], head["width"]) != raw_shape:
                raise DataSetException(f"{p}: frames of {head['height']} x {head['width']}, but {paths[0]} has "
                                       f"{raw_shape[0]} x {raw_shape[1]}")
        native = (2 * raw_shape[0] * binning, raw_shape[1] // 2)
        sig = self._sig_shape_in or native
        if math.prod(sig) != math.prod(native):
            raise DataSetException(f"{self._path}: sig_shape {sig} must have {math.prod(native)} pixels "
                                   f"(the unfolded frame is {native})")
        files, start = [], 0
        for p, head in zip(paths[1:], heads[1:]):
            files.append(File(p, start, start + head["num_frames"], FILE_HEADER_SIZE))
            start += head["num_frames"]
        image_count = int(hdr.get("signalframes", start))
        nav = self._nav_shape_in or tuple(hdr["stemimagesize"])
        n = math.prod(nav)
        if not -image_count < self._sync_offset < image_count:
            raise DataSetException(f"{self._path}: sync_offset {self._sync_offset} must lie in "
                                   f"({-image_count}, {image_count}) (signalframes of {hdr_path})")
        check_sync_offset(self._path, self._sync_offset, n, start)
        if self._sync_offset == 0 and n > start:
            raise DataSetException(f"{self._path}: nav_shape {nav} needs {n} frames, the data files hold {start}; "
                                   f"the nav shape is wrong or a data file is missing")
        self._fileset = FRMS6FileSet(files, raw_shape, binning, tuple(sig) == native)
        self._decoder = FRMS6Decoder()
        self._native_dtype = np.dtype("<u2")
        if self._enable_offset_correction:
            self._dark = self._dark_frame(paths[0], heads[0], binning).reshape(sig)
        if self._gain_map_path is not None:
            gain = read_gain_map(self._gain_map_path)
            if gain.size != math.prod(sig):
                raise DataSetException(f"{self._gain_map_path}: gain map of shape {gain.shape} does not fit the "
                                       f"signal shape {tuple(sig)}")
            self._gain = gain.reshape(sig)
        dtype = np.dtype(np.float32 if self._enable_offset_correction else np.uint16)
        return DataSetMeta(shape=Shape(tuple(nav) + tuple(sig), sig_dims=len(sig)), raw_dtype=dtype,
                           sync_offset=self._sync_offset, image_count=start)

    @staticmethod
    def _dark_frame(path: str, head: dict[str, int], binning: int) -> np.ndarray:
        """Mean of the unfolded frames of the dark frame file (float32, summed in chunks of 64 frames)."""
        h, w, n = head["height"], head["width"], head["num_frames"]
        if n == 0:
            raise DataSetException(f"{path}: the dark frame file holds no frame (offset correction needs one)")
        stride = FRAME_HEADER_SIZE + 2 * h * w
        raw = np.memmap(path, dtype=np.uint8, mode="r", offset=FILE_HEADER_SIZE, shape=(n * stride,))
        frames = raw.reshape(n, stride)[:, FRAME_HEADER_SIZE:].view("<u2").reshape(n, h, w)
        total = np.zeros((h, w), dtype=np.float64)
        for a in range(0, n, 64):
            total += frames[a:a + 64].sum(axis=0, dtype=np.float64)
        return unfold((total / n)[None], binning)[0].astype(np.float32)

    def get_cache_key(self) -> Any:
        return (super().get_cache_key(), self._enable_offset_correction, self._gain_map_path)

    def get_diagnostics(self) -> list[dict[str, Any]]:
        return super().get_diagnostics() + [
            {"name": "offset correction", "value": str(self._dark is not None)},
            {"name": "gain map", "value": str(self._gain_map_path)},
        ] + [{"name": str(k), "value": str(v)} for k, v in self._hdr.items()]
