"""The ``mib`` format: Quantum Detectors Merlin acquisitions (``.hdr`` + one or more ``.mib`` files).

``ctx.load("mib", path="scan.hdr")`` (nav shape from the ``.hdr``) or
``ctx.load("mib", path="scan1.mib", nav_shape=(64, 64))``; LiberTEM 0.16's
parameters: ``path``, ``nav_shape``, ``sig_shape``, ``sync_offset``,
``disable_glob``, ``io_backend``, ``num_partitions`` (and the deprecated
``scan_size``/``tileshape``). The files of an acquisition are found as
LiberTEM does (``scan.hdr`` -> ``scan*.mib``; ``scan12.mib`` -> ``scan*.mib``
unless ``disable_glob``) and placed by the sequence number in their first
frame header, so ``scan10.mib`` follows ``scan9.mib``. Where that glob
catches another acquisition's files (``X.hdr`` and ``XRAW.mib`` beside
``X.mib``) the error says to pass ``disable_glob=True``; ``auto`` opens a
``.hdr`` with the files named after it (``X.mib``, ``X1.mib``, ...) only.

Every frame has its own ASCII header (:mod:`raytile.io.decoders_mib`).
``U08``/``U16``/``U32`` frames are big-endian integers read by numpy alone
(a strided view of the file map or read buffer, byte-swapped while
converting to the tile's dtype); raw ``R64`` frames (counter depths 1, 6,
12, 24; single chips and 2x2 quads) are decoded per tile in the workers by
:func:`~raytile.io.decoders_mib.decode_raw_rows` (a vectorised numpy byte
swap of the 64-bit words, then the quad re-arrangement as strided copies:
no compiled code, so a fresh worker's first run is as fast as the next).
Files holding more frames than the nav shape (extra trigger frames) are
read up to the nav shape; ``sync_offset`` skips (or, negative, inserts
blank) frames at the start.
"""

from __future__ import annotations

import glob
import math
import os
import re
import warnings
from typing import Any, Iterator

import numpy as np

from raytile.common.errors import ConfigValidationError, DataSetException
from raytile.common.shape import Shape
from raytile.common.slice import Slice
from raytile.common.tiling import DataTile, TilingScheme
from raytile.io.backends import FrameFile, FramesJob
from raytile.io.dataset import DataSetMeta, check_array_backend
from raytile.io.decoders import Decoder, NativeDecoder
from raytile.io.decoders_mib import MIB_MAGIC, MIBFrameHeader, MIBRawFrameDecoder, parse_frame_header
from raytile.io.fileset import REMOTE_PARAMS, File, FileDataSet, FilePartition, FileSet, check_sync_offset
from raytile.io.store import ObjectStore, display_url, open_path, path_size

__all__ = ["MIBDataSet", "MIBPartition", "read_hdr", "nav_shape_from_hdr", "mib_filenames", "files_of_header",
           "get_filenames"]

#: Bytes read to find a frame header (the largest Merlin header, a quad's, is 768 bytes).
_HEAD_READ = 4096


def read_hdr(path: str, store: ObjectStore | None = None) -> dict[str, str]:
    """The ``Key:<TAB>value`` fields of an acquisition's ``.hdr`` file (DataSetException if it is none)."""
    try:
        with open_path(path, store) as f:
            text = f.read(1 << 20).decode("ascii", errors="replace")
    except OSError as e:
        raise DataSetException(f"{path}: cannot read the .hdr file: {e}") from None
    if not text.startswith("HDR"):
        raise DataSetException(f"{path}: not a Merlin .hdr file (does not start with 'HDR')")
    fields = {}
    for line in text.splitlines()[1:]:
        if line.startswith("End"):
            break
        key, sep, value = line.partition("\t")
        if sep:
            fields[key.strip().rstrip(":")] = value.strip()
    return fields


def nav_shape_from_hdr(fields: dict[str, str], path: str = ".hdr") -> tuple[int, ...]:
    """``(ScanY, ScanX)``, else ``(frames in acquisition // frames per trigger, frames per trigger)``."""
    try:
        if "ScanX" in fields and "ScanY" in fields:
            nav = (int(fields["ScanY"]), int(fields["ScanX"]))
        else:
            total = int(fields["Frames in Acquisition (Number)"])
            per_trigger = int(fields["Frames per Trigger (Number)"])
            nav = (total // per_trigger, per_trigger)
    except KeyError as e:
        raise DataSetException(f"{path}: no {e.args[0]!r} in the .hdr file; pass nav_shape") from None
    except (ValueError, ZeroDivisionError):
        raise DataSetException(f"{path}: unreadable scan size in the .hdr file; pass nav_shape") from None
    if min(nav) <= 0:
        raise DataSetException(f"{path}: the .hdr file gives the scan size {nav}; pass nav_shape")
    return nav


def _pattern(path: str) -> str:
    stem, ext = os.path.splitext(path)
    if ext.lower() == ".mib":
        return glob.escape(re.sub(r"[0-9]+$", "", stem)) + "*.mib"
    return glob.escape(stem) + "*.mib"


def _check_extension(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".mib", ".hdr"):
        raise DataSetException(f"{path}: a MIB data set is opened by its .hdr or a .mib file, not {ext or 'no'} "
                               f"extension")
    return ext


def get_filenames(path: str | os.PathLike, disable_glob: bool = False) -> list[str]:
    """The local ``.mib`` files of the acquisition ``path`` (its ``.hdr`` or one ``.mib``) names, as the glob
    finds them (unsorted, maybe none); ``[path]`` with ``disable_glob``. LiberTEM's ``mib.get_filenames``."""
    path = os.fspath(path)
    if disable_glob:
        return [path]
    _check_extension(path)
    return glob.glob(_pattern(path))


def mib_filenames(path: str, disable_glob: bool = False, store: ObjectStore | None = None) -> list[str]:
    """The ``.mib`` files of the acquisition ``path`` (a ``.hdr`` or one ``.mib``) names, sorted; with
    ``store``, objects under the same prefix. None found raises DataSetException."""
    ext = _check_extension(path)
    if disable_glob:
        return [path if ext == ".mib" else os.path.splitext(path)[0] + ".mib"]
    if store is not None:
        pattern = re.sub(r"[0-9]+$", "", os.path.splitext(path)[0]) + "*.mib"
        names = store.glob(pattern)
        if not names:
            raise DataSetException(f"{display_url(path)}: no .mib objects match {display_url(pattern)}")
        return names
    names = sorted(get_filenames(path))
    if not names:
        raise DataSetException(f"{path}: no .mib files match {_pattern(path)}")
    return names


def files_of_header(hdr_path: str, names: list[str]) -> list[str]:
    """The ``names`` that belong to the acquisition of ``hdr_path``: its stem plus an optional number
    (``X.mib``, ``X1.mib``, ``X12.mib``; not ``XRAW.mib``, another acquisition's)."""
    stem = os.path.basename(os.path.splitext(hdr_path)[0])
    own = re.compile(re.escape(stem) + r"[0-9]*\.mib", re.IGNORECASE)
    return [n for n in names if own.fullmatch(os.path.basename(n))]


def _read_at(path: str, offset: int, size: int, store: ObjectStore | None = None) -> bytes:
    with open_path(path, store) as f:
        f.seek(offset)
        return f.read(size)


def _file_header(path: str, store: ObjectStore | None = None) -> MIBFrameHeader:
    if store is None and not os.path.isfile(path):
        raise DataSetException(f"{path}: file not found")
    return parse_frame_header(_read_at(path, 0, _HEAD_READ, store), where=path)


class MIBRawDecoder(Decoder):
    """Raw MIB frames: decoded on the frames path by a :class:`~raytile.io.decoders_mib.MIBRawFrameDecoder`."""

    def __init__(self, header: MIBFrameHeader):
        self.header = header
        self.bpp = header.storage_bits

    def frame_decoder(self) -> MIBRawFrameDecoder:
        return MIBRawFrameDecoder(self.header)

    def tile_decoder(self):
        raise DataSetException("raw MIB frames are decoded on the frames path")

    def describe(self) -> str:
        return MIBRawFrameDecoder(self.header).describe()


class MIBPartition(FilePartition):
    """Frames of a MIB file set; raw frames are decoded per tile, in whole rows."""

    def _raw(self) -> MIBRawDecoder | None:
        return self.decoder if isinstance(self.decoder, MIBRawDecoder) else None

    def _natural_rows(self) -> bool:
        raw = self._raw()
        return raw is not None and self.meta.shape.sig.to_tuple() == raw.header.sig_shape

    def get_base_shape(self, roi: np.ndarray | None) -> tuple[int, ...]:
        sig = self.meta.shape.sig.to_tuple()
        if self._raw() is None:
            return super().get_base_shape(roi)
        if self._natural_rows():  # whole rows: raw pixels come in 64-bit words, quads in row pairs
            return (1, 1, sig[1])
        return (1,) + sig

    def adjust_tileshape(self, tileshape: tuple[int, ...], roi: np.ndarray | None) -> tuple[int, ...]:
        if self._raw() is None:
            return tileshape
        sig = self.meta.shape.sig.to_tuple()
        if self._natural_rows():
            return (tileshape[0], tileshape[1], sig[1])
        return (tileshape[0],) + sig

    def get_tiles(self, tiling_scheme: TilingScheme, roi: np.ndarray | None = None,
                  dest_dtype: Any = None, array_backend: str | None = None) -> Iterator[DataTile]:
        raw = self._raw()
        if raw is None:
            yield from super().get_tiles(tiling_scheme, roi, dest_dtype, array_backend)
            return
        check_array_backend(self, array_backend)
        dest_dtype = np.dtype(dest_dtype if dest_dtype is not None else self.meta.raw_dtype)
        frames = self._frames(roi)
        if frames.shape[0] == 0:
            return
        fs = self.fileset
        job = FramesJob(paths=fs.paths, scheme=tiling_scheme, frames=frames, nav_origin=self.roi_offset(roi),
                        dest_dtype=dest_dtype, decoder=raw,
                        frame_files=[FrameFile(f.path, f.file_header, f.start_idx, f.end_idx) for f in fs.files],
                        file_dtype=np.dtype(np.uint8), frame_stride=fs.frame_stride,
                        frame_header=fs.frame_header_bytes, frame_decoder=raw.frame_decoder())
        yield from self.backend().get_frame_tiles(job)


class MIBDataSet(FileDataSet):
    """A Merlin acquisition: ``ctx.load("mib", path="scan.hdr")`` or ``path="scan1.mib", nav_shape=(...)``.

    Parameters (LiberTEM 0.16's): ``path`` the ``.hdr`` or a ``.mib`` file;
    ``nav_shape`` (default: from the ``.hdr``: ScanY x ScanX, or frames in
    acquisition // frames per trigger x frames per trigger); ``sig_shape``
    (default: the frame shape; any shape of as many pixels); ``sync_offset``
    (frames to skip at the start, negative: blank frames to insert);
    ``disable_glob`` (read only the given ``.mib``); ``io_backend``;
    ``num_partitions``.

    >>> ds = ctx.load("mib", path="/data/scan.hdr")                 # doctest: +SKIP
    >>> ds = ctx.load("mib", path="/data/scan1.mib", nav_shape=(128, 128), sync_offset=2)  # doctest: +SKIP
    """

    format_name = "mib"
    file_extensions = ("mib", "hdr")
    partition_class = MIBPartition
    params_schema = {
        "path": {"type": "path", "required": True},
        "nav_shape": {"type": "shape"},
        "sig_shape": {"type": "shape"},
        "sync_offset": {"type": "int"},
        "disable_glob": {"type": "bool"},
        "scan_size": {"type": "shape"},
        "tileshape": {"type": "shape"},
        **REMOTE_PARAMS,
    }

    def __init__(self, path: str, nav_shape: tuple[int, ...] | None = None, sig_shape: tuple[int, ...] | None = None,
                 sync_offset: int = 0, disable_glob: bool = False, scan_size: tuple[int, ...] | None = None,
                 tileshape: tuple[int, ...] | None = None, **kwargs):
        super().__init__(**kwargs)
        if tileshape is not None:
            warnings.warn("mib: parameter 'tileshape' is ignored (as in LiberTEM); tiles are negotiated",
                          FutureWarning, stacklevel=3)
        if scan_size is not None:
            warnings.warn("mib: parameter 'scan_size' is deprecated, pass nav_shape", FutureWarning, stacklevel=3)
            if nav_shape is not None:
                raise ConfigValidationError("mib: give nav_shape or scan_size, not both")
            nav_shape = scan_size
        if nav_shape is None and not path.lower().endswith(".hdr"):
            raise ConfigValidationError(f"mib: parameter 'nav_shape' is required unless path is the acquisition's "
                                        f".hdr file, got path {path!r}")
        self._path = path
        self._nav_shape = nav_shape
        self._sig_shape = sig_shape
        self._sync_offset = sync_offset
        self._disable_glob = disable_glob
        self._header: MIBFrameHeader | None = None
        self._store = self.store_of(path)

    @property
    def header(self) -> MIBFrameHeader:
        """The first frame header (how the pixels are stored)."""
        if self._header is None:
            raise DataSetException("mib: not initialized; load it with Context.load")
        return self._header

    @classmethod
    def _detect_params(cls, path: str, store: ObjectStore | None = None) -> dict | None:
        """``path``, ``nav_shape`` and ``sig_shape`` of a ``.hdr`` or ``.mib`` acquisition (None otherwise).

        A ``.mib`` without ``.hdr`` gets a square nav shape where the frame
        count is a square number, else a line of frames.
        """
        ext = os.path.splitext(path)[1].lower()
        if ext == ".hdr":
            try:
                with open_path(path, store) as f:
                    if not f.read(3) == b"HDR":
                        return None
            except (OSError, DataSetException):
                return None
            nav = nav_shape_from_hdr(read_hdr(path, store), path)
            names = sorted(mib_filenames(path, store=store))
            own = files_of_header(path, names)
            params: dict[str, Any] = {"path": path, "nav_shape": nav}
            if own != names:  # the glob catches a neighbouring acquisition's files
                single = os.path.splitext(path)[0] + ".mib"
                if [os.path.basename(n) for n in own] != [os.path.basename(single)]:
                    raise DataSetException(
                        f"{path}: {_pattern(path)} matches files of other acquisitions "
                        f"({', '.join(os.path.basename(n) for n in names if n not in own)}) besides its own "
                        f"({', '.join(os.path.basename(n) for n in own) or 'none'}); move them apart or open "
                        f"one .mib with ctx.load('mib', path=..., nav_shape=..., disable_glob=True)")
                params["disable_glob"] = True
                names = own
            first = _file_header(names[0], store)
            return {**params, "sig_shape": first.sig_shape}
        if ext != ".mib":
            return None
        try:
            if _read_at(path, 0, len(MIB_MAGIC), store) != MIB_MAGIC:
                return None
        except (OSError, DataSetException):
            return None
        header = _file_header(path, store)
        count = sum(path_size(p, store) // header.frame_stride for p in mib_filenames(path, store=store))
        side = math.isqrt(count)
        nav = (side, side) if side * side == count and count > 1 else (count,)
        return {"path": path, "nav_shape": nav, "sig_shape": header.sig_shape}

    def _scan(self) -> tuple[MIBFrameHeader, list[File]]:
        """The first header and the files in frame order, every file's first and last frame checked;
        files that do not fit together, found by the glob, end in an error that says what to do."""
        names = mib_filenames(self._path, self._disable_glob, self._store)
        try:
            return self._scan_files(names)
        except DataSetException as e:
            if len(names) < 2 or self._disable_glob:
                raise
            raise DataSetException(
                f"{e}. {_pattern(self._path)} found {len(names)} files "
                f"({', '.join(os.path.basename(n) for n in sorted(names))}): another acquisition's files beside "
                f"this one? Open this one's file alone with disable_glob=True (ctx.load('mib', path=..., "
                f"disable_glob=True)), or load its .hdr with 'auto', which takes only the files named after it"
            ) from None

    def _scan_files(self, names: list[str]) -> tuple[MIBFrameHeader, list[File]]:
        found: list[tuple[str, MIBFrameHeader]] = []
        first: MIBFrameHeader | None = None
        for p in names:
            h = _file_header(p, self._store)
            if first is not None and (h.header_bytes, h.pixel_depth, h.counter_depth, h.header_x, h.header_y,
                                      h.num_chips, h.layout) != (
                    first.header_bytes, first.pixel_depth, first.counter_depth, first.header_x, first.header_y,
                    first.num_chips, first.layout):
                raise DataSetException(f"{p}: frames stored as {h.describe()}, but {found[0][0]} as "
                                       f"{first.describe()}; one acquisition's files must agree")
            first = first or h
            found.append((p, h))
        assert first is not None
        found.sort(key=lambda ph: ph[1].sequence)
        stride = first.frame_stride
        seq0 = found[0][1].sequence
        files: list[File] = []
        for i, (p, h) in enumerate(found):
            size = path_size(p, self._store)
            n, rest = divmod(size, stride)
            if n == 0:
                raise DataSetException(f"{p}: {size} bytes, shorter than one frame of {stride} bytes "
                                       f"({first.describe()}); truncated?")
            if rest and i < len(found) - 1:
                raise DataSetException(f"{p}: {size} bytes is not a whole number of {stride}-byte frames "
                                       f"({first.describe()}); truncated or corrupt")
            if rest:
                warnings.warn(f"{p}: ends with {rest} bytes of a partial frame (truncated acquisition?); "
                              f"reading its {n} whole frames", stacklevel=2)
            if n > 1:
                last = parse_frame_header(_read_at(p, (n - 1) * stride, first.header_bytes, self._store),
                                          where=f"{p} (frame {n - 1} at byte {(n - 1) * stride})")
                if last.header_bytes != first.header_bytes or last.pixel_depth != first.pixel_depth:
                    raise DataSetException(f"{p}: frame {n - 1} has another layout ({last.describe()}) than "
                                           f"frame 0 ({first.describe()})")
            start = h.sequence - seq0
            if files and start != files[-1].end_idx:
                prev = files[-1]
                what = "missing frames (a file missing?)" if start > prev.end_idx else "overlapping frames"
                raise DataSetException(
                    f"{p}: starts at sequence number {h.sequence}, but {prev.path} ends at "
                    f"{seq0 + prev.end_idx - 1}: {what}")
            files.append(File(p, start, start + n, 0))
        return first, files

    def _do_initialize(self) -> DataSetMeta:
        header, files = self._scan()
        self._header = header
        nav = self._nav_shape
        if nav is None:
            nav = nav_shape_from_hdr(read_hdr(self._path, self._store), self._path)
        natural = header.sig_shape
        sig = self._sig_shape or natural
        if math.prod(sig) != math.prod(natural):
            raise DataSetException(f"{self._path}: sig_shape {sig} has {math.prod(sig)} pixels, the frames are "
                                   f"{natural[0]}x{natural[1]} ({math.prod(natural)} pixels)")
        self._fileset = FileSet(files, natural, header.storage_bits, header.header_bytes, store=self._store)
        file_frames = self._fileset.num_frames
        where = files[0].path if len(files) == 1 else f"{files[0].path} (+{len(files) - 1} files)"
        check_sync_offset(where, self._sync_offset, math.prod(nav), file_frames)
        if self._sync_offset == 0 and file_frames < math.prod(nav):
            raise DataSetException(f"{where}: holds {file_frames} frames, nav_shape {nav} needs {math.prod(nav)}; "
                                   f"the acquisition is incomplete or the nav shape is wrong")
        stored = header.stored_dtype
        self._decoder = MIBRawDecoder(header) if stored is None else NativeDecoder(stored)
        self._native_dtype = header.dtype
        self._file_frames = file_frames
        return DataSetMeta(shape=Shape(tuple(nav) + tuple(sig), sig_dims=len(sig)), raw_dtype=header.dtype,
                           sync_offset=self._sync_offset, image_count=file_frames)

    def get_diagnostics(self) -> list[dict[str, Any]]:
        return super().get_diagnostics() + [
            {"name": "MIB frames", "value": self.header.describe()},
        ]

