"""The ``k2is`` format: Gatan K2 IS raw data (8 sector ``.bin`` files and a ``.gtg``).

``ctx.load("k2is", path=...)`` with ``path`` the ``.gtg`` or any of the
``.bin`` files, and LiberTEM's optional ``nav_shape``, ``sig_shape`` and
``sync_offset``. The layout (see :mod:`raytile.io.testing.k2is`): every
sector file holds, per frame, 32 blocks of ``0x5758`` bytes, each a 40-byte
header and 930 x 16 pixels packed 12-bit; sector ``s`` is columns
``256 s .. 256 s + 255`` of the 1860 x 2048 frame.

Opening a data set syncs the sectors from their block headers, as LiberTEM
does: all sectors start at the same ``block_count`` and end at the same one,
incomplete frames at either end are dropped, and the scan starts at the
first block with the shutter-active flag (found by bisection, so opening
touches a few dozen headers, not the data). A ``.gtg`` holding
``SI Dimensions`` makes a scan: ``nav_shape`` comes from it and the data
starts one frame before the shutter flag (LiberTEM: "the sync flag appears
to be set one frame too late"); otherwise a time series of every
shutter-active frame. ``sync_offset`` defaults to the number of frames
before the shutter flag: nav position ``i`` reads synced frame
``i + sync_offset - 1`` in a scan (as LiberTEM) and ``i + sync_offset`` in a
time series (LiberTEM reads ``i + sync_offset + (frames before the flag)``
there, skipping those frames twice; the two agree when the shutter flag is
set from the first frame on). Positions outside the synced data are left out of runs.

Reading: the partitions' base shape is one block, ``(1, 930, 16)``, and
``adjust_tileshape`` makes every tile that is not whole frames one block
column, ``(depth, 930, 16)``, as deep as the negotiated tile was large (up
to 32 frames): LiberTEM's native tile, in which a block decodes in place
into contiguous memory and the tile stays in the L2 cache. Each tile is one
read range per block and frame, decoded by numba in the worker
(:func:`decode_k2is_tile`, the only jitted function on the path: the read
ranges of the regular block grid come from numpy) straight into the tile's dtype, on every IO
backend (``mmap`` decodes from the file map; ``buffered``/``direct`` read
each nav block's ranges, coalesced per sector and frame, into a buffer
first).
"""

from __future__ import annotations

import glob
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable

import numba
import numpy as np

from raytile.common.errors import DataSetException
from raytile.common.shape import Shape
from raytile.common.tiling import TilingScheme
from raytile.io.dataset import DEFAULT_PARTITION_BYTES, DataSetMeta
from raytile.io.decoders import Decoder
from raytile.io.fileset import FILE_FRAME_PARAMS, File, FileDataSet, FilePartition, FileSet
from raytile.io.formats.dm_tags import flat_numbers, read_dm_tags
from raytile.io.read_ranges import META_ENTRIES, RR_ENTRIES, RR_FILE, RR_NPX, RR_OUT, RR_SKIP, RR_START, RR_STOP

__all__ = ["K2ISDataSet", "get_filenames", "decode_uint12_le", "K2ISPartition", "K2ISFileSet", "K2ISDecoder",
           "sync_sectors", "SectorSync", "sector_files", "decode_k2is_tile", "k2is_read_ranges"]

BLOCK_SIZE = 0x5758
HEADER_SIZE = 40
DATA_SIZE = BLOCK_SIZE - HEADER_SIZE
BLOCK_ROWS, BLOCK_COLS = 930, 16
BLOCK_PX = BLOCK_ROWS * BLOCK_COLS
BLOCKS_PER_FRAME = 32
NUM_SECTORS = 8
SECTOR_W = 256
SIG_SHAPE = (2 * BLOCK_ROWS, NUM_SECTORS * SECTOR_W)
#: Bytes of one frame in one sector file.
FRAME_BYTES = BLOCKS_PER_FRAME * BLOCK_SIZE
SYNC_WORD = 0xFFFF0055
SHUTTER_ACTIVE = 0x1
#: Deepest tile ``adjust_tileshape`` makes when it trades width for depth (32 x 930 x 16 uint16: 952 KB,
#: float32: 1.9 MB, in a 2 MB L2 cache).
DEEPEST = 32
#: File bytes a partition aims for unless ``num_partitions``/``partition_bytes`` are given: a K2 IS
#: partition's results are frame-sized (15 MB for a float32 sum), so fewer, larger partitions than the
#: general default spend less on merging (measured, SumUDF on 1 GB, 2 Ray workers: 11 partitions
#: 1.6-1.9 GB/s, 2 partitions 2.0-2.5 GB/s).
PARTITION_FILE_BYTES = 512 * 2**20
#: Block headers read at a time while looking for a block count or frame change.
_SCAN = 256

_HEADER = np.dtype({
    "names": ["sync", "flags", "block_count", "width", "height", "frame_id"],
    "formats": [">u4", "u1", ">u4", ">u2", ">u2", ">u4"],
    "offsets": [0, 9, 16, 20, 22, 24],
    "itemsize": BLOCK_SIZE,
})


# -- files -----------------------------------------------------------------

def _base(path: str) -> tuple[str, str]:
    stem, ext = os.path.splitext(path)
    ext = ext.lower()
    if ext == ".gtg":
        return stem, ext
    if ext == ".bin":
        return re.sub(r"[0-9]+$", "", stem), ext
    raise DataSetException(f"{path}: a K2 IS data set is opened by its .gtg or one of its .bin files, "
                           f"not a {ext or 'extension-less'} file")


def get_filenames(path: str | os.PathLike, disable_glob: bool = False) -> list[str]:
    """The sector files of the K2 IS data set ``path`` (its ``.gtg`` or one ``.bin``) names, as the glob finds
    them (unsorted, any number); ``[path]`` with ``disable_glob``. LiberTEM's ``k2is.get_filenames``."""
    path = os.fspath(path)
    if disable_glob:
        return [path]
    stem, _ = _base(path)
    return glob.glob(f"{glob.escape(stem)}*.bin")


def sector_files(path: str) -> tuple[list[str], str]:
    """``(the 8 sector files in sector order, the .gtg path)`` of the data set ``path`` belongs to.

    As LiberTEM names them: ``Capture_.gtg`` with ``Capture_1.bin`` ..
    ``Capture_8.bin``; from a ``.bin`` the trailing digits are dropped.
    """
    stem, ext = _base(path)
    pattern = f"{glob.escape(stem)}*.bin"
    files = sorted(get_filenames(path))
    if len(files) != NUM_SECTORS:
        raise DataSetException(
            f"{path}: a K2 IS data set has {NUM_SECTORS} sector files, found {len(files)} matching {pattern}"
            + (f": {', '.join(files)}" if files else "") + " (a sector file missing?)"
        )
    return files, (path if ext == ".gtg" else stem + ".gtg")


def scan_shape_from_gtg(gtg: str) -> tuple[int, int] | None:
    """The scan's ``(y, x)`` from the ``.gtg``'s ``SI Dimensions``, None without them (a time series)."""
    if not os.path.exists(gtg):
        return None
    tags = flat_numbers(read_dm_tags(gtg).root)
    y, x = tags.get(".SI Dimensions.Size Y"), tags.get(".SI Dimensions.Size X")
    if y is None or x is None:
        return None
    if int(y) <= 0 or int(x) <= 0:
        raise DataSetException(f"{gtg}: SI Dimensions {y} x {x} is not a scan size")
    return int(y), int(x)


# -- syncing the sectors -----------------------------------------------------

class _Sector:
    """The block headers of one sector file, as a strided view of its map (only touched pages are read)."""

    def __init__(self, path: str):
        self.path = path
        size = os.path.getsize(path)
        self.n = size // BLOCK_SIZE
        if self.n == 0:
            raise DataSetException(f"{path}: file of {size} bytes holds no K2 IS block of {BLOCK_SIZE} bytes")
        self.h = np.memmap(path, dtype=_HEADER, mode="r", shape=(self.n,))

    def field(self, name: str, start: int, stop: int) -> np.ndarray:
        return np.asarray(self.h[name][max(start, 0):min(stop, self.n)])

    def check_valid(self, i: int, what: str) -> None:
        h = self.h[i]
        if int(h["sync"]) != SYNC_WORD or int(h["width"]) != SECTOR_W or int(h["height"]) != SIG_SHAPE[0]:
            raise DataSetException(
                f"{self.path}: {what} block (byte {i * BLOCK_SIZE}) is not a K2 IS block header: sync "
                f"{int(h['sync']):#x} (expected {SYNC_WORD:#x}), sector {int(h['width'])} x {int(h['height'])} "
                f"(expected 256 x 1860) (corrupt or not a K2 IS file?)")

    def find(self, name: str, pred: Callable[[np.ndarray], np.ndarray], start: int, stop: int,
             backward: bool = False) -> int:
        """First (last, if ``backward``) block index in ``[start, stop]`` whose ``name`` satisfies ``pred``."""
        if not backward:
            for a in range(start, stop + 1, _SCAN):
                hit = np.flatnonzero(pred(self.field(name, a, min(a + _SCAN, stop + 1))))
                if hit.size:
                    return a + int(hit[0])
        else:
            for b in range(stop + 1, start, -_SCAN):
                a = max(start, b - _SCAN)
                hit = np.flatnonzero(pred(self.field(name, a, b)))
                if hit.size:
                    return a + int(hit[-1])
        raise DataSetException(f"{self.path}: no block with the {name} the other sectors have "
                               f"(blocks {start}..{stop}); the sectors cannot be synced (missing data?)")


@dataclass(frozen=True)
class SectorSync:
    """Where the synced frames lie: frame ``k`` of sector ``s`` starts at byte ``offsets[s] + k * FRAME_BYTES``.

    ``image_count`` frames in all; the first ``native_sync_offset`` of them
    lack the shutter-active flag.
    """

    offsets: tuple[int, ...]
    image_count: int
    native_sync_offset: int
    first_frame_id: int


def sync_sectors(paths: list[str]) -> SectorSync:
    """Sync the 8 sector files from their block headers (LiberTEM's ``K2Syncer``; see the module doc)."""
    sectors = [_Sector(p) for p in paths]
    for s in sectors:
        s.check_valid(0, "first")
    # start at the same block count, then skip an incomplete first frame
    start_count = max(int(s.h["block_count"][0]) for s in sectors)
    first = [s.find("block_count", lambda v: v == start_count, 0, s.n - 1) for s in sectors]
    overlap = any(len(set(s.field("frame_id", f, f + BLOCKS_PER_FRAME).tolist())) > 1
                  for s, f in zip(sectors, first))
    if overlap:
        fid = int(sectors[0].h["frame_id"][first[0]])
        first = [s.find("frame_id", lambda v: v != fid, f, s.n - 1) for s, f in zip(sectors, first)]
    # end at the same block count, then drop an incomplete last frame
    for s in sectors:
        s.check_valid(s.n - 1, "last")
    end_count = min(int(s.h["block_count"][s.n - 1]) for s in sectors)
    last = [s.find("block_count", lambda v: v == end_count, f, s.n - 1, backward=True)
            for s, f in zip(sectors, first)]
    overlap = any(len(set(s.field("frame_id", la - BLOCKS_PER_FRAME + 1, la + 1).tolist())) > 1
                  for s, la in zip(sectors, last))
    if overlap:
        fid = int(sectors[0].h["frame_id"][last[0]])
        last = [s.find("frame_id", lambda v: v != fid, f, la, backward=True)
                for s, f, la in zip(sectors, first, last)]
    image_count = (last[0] - first[0] + 1) // BLOCKS_PER_FRAME
    if image_count <= 0:
        raise DataSetException(f"{paths[0]}: no complete frame in the sector files after syncing them")
    ids = [int(s.h["frame_id"][f]) for s, f in zip(sectors, first)]
    if len(set(ids)) > 1:
        raise DataSetException(f"{paths[0]}: the sectors' first synced blocks belong to different frames "
                               f"{ids}; the data set is inconsistent")
    # the first frame with the shutter-active flag (monotone: bisect over frames of sector 0)
    s0 = sectors[0]
    lo, hi = 0, image_count
    while lo < hi:
        mid = (lo + hi) // 2
        if int(s0.h["flags"][first[0] + mid * BLOCKS_PER_FRAME]) & SHUTTER_ACTIVE:
            hi = mid
        else:
            lo = mid + 1
    if lo == image_count:
        raise DataSetException(f"{paths[0]}: no frame has the shutter-active flag set")
    for s, f in zip(sectors, first):
        if not int(s.h["flags"][f + lo * BLOCKS_PER_FRAME]) & SHUTTER_ACTIVE:
            raise DataSetException(f"{s.path}: the shutter-active flag starts at another frame than in "
                                   f"{paths[0]} (frame {lo} of the synced data)")
    return SectorSync(tuple(f * BLOCK_SIZE for f in first), image_count, lo, ids[0])


# -- read ranges and decoding ----------------------------------------------

def _slice_blocks(rect: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The blocks of one signal slice ``(y0, x0, h, w)``: sector, byte offset in the sector's frame, and
    position of the block's first pixel in the flat slice."""
    y0, x0, h, w = (int(v) for v in rect)
    grid_y, grid_x = np.meshgrid(np.arange(y0 // BLOCK_ROWS, (y0 + h) // BLOCK_ROWS),
                                 np.arange(x0 // BLOCK_COLS, (x0 + w) // BLOCK_COLS), indexing="ij")
    by: np.ndarray = grid_y.ravel()
    bx: np.ndarray = grid_x.ravel()
    sector = bx // 16
    in_frame = ((15 - bx % 16) + by * 16) * BLOCK_SIZE + HEADER_SIZE
    out = (by * BLOCK_ROWS - y0) * w + bx * BLOCK_COLS - x0
    return sector, in_frame, out


def k2is_read_ranges(frames: np.ndarray, depth: int, rects: np.ndarray, lo: int, hi: int,
                     offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(tile_meta, read_ranges)`` (see :mod:`raytile.io.read_ranges`) for reading ``frames`` in blocks of ``depth``.

    ``rects`` ``(n_slices, 4)``: each signal slice as ``(y0, x0, h, w)`` of
    the 1860 x 2048 frame, whole blocks. One read range per block and frame:
    its 930 x 16 pixels go to the flat tile at ``out_start`` with rows
    ``RR_SKIP`` pixels apart. Frames outside ``[lo, hi)`` read as zeros
    (``file_idx -1``); frame ``j`` of sector ``s`` is at ``offsets[s] + j * FRAME_BYTES``.
    The layout is a regular grid, so numpy computes it (no jitted code to
    compile in a fresh worker; a few microseconds a tile).
    """
    frames = np.asarray(frames, dtype=np.int64)
    n = frames.shape[0]
    n_blocks = -(-n // depth)
    blocks = [_slice_blocks(r) for r in rects]
    rr_per_tile = max(1, depth * max(len(b[0]) for b in blocks))
    meta = np.zeros((n_blocks * len(blocks), META_ENTRIES), dtype=np.int64)
    rr = np.zeros((n_blocks * len(blocks), rr_per_tile, RR_ENTRIES), dtype=np.int64)
    t = 0
    for first in range(0, n, depth):
        fr = frames[first:first + depth]
        count = fr.shape[0]
        inside = (fr >= lo) & (fr < hi)
        for s, (sector, in_frame, out) in enumerate(blocks):
            h, w = int(rects[s][2]), int(rects[s][3])
            m = count * len(sector)
            start = offsets[sector][None, :] + fr[:, None] * FRAME_BYTES + in_frame[None, :]
            tile = rr[t, :m]
            tile[:, RR_FILE] = np.where(inside[:, None], sector[None, :], -1).ravel()
            tile[:, RR_START] = np.where(inside[:, None], start, 0).ravel()
            tile[:, RR_STOP] = np.where(inside[:, None], start + DATA_SIZE, 0).ravel()
            tile[:, RR_OUT] = (np.arange(count)[:, None] * (h * w) + out[None, :]).ravel()
            tile[:, RR_NPX] = BLOCK_PX
            tile[:, RR_SKIP] = w
            touched = sector if inside.any() else sector[:0]
            meta[t] = (first, count, s, m, touched.min() if touched.size else 0,
                       touched.max() if touched.size else -1, int(not inside.all()))
            t += 1
    return meta, rr


@numba.njit(cache=True, nogil=True)
def decode_uint12_le(inp, out):
    """A 12-bit stream (one block's) into the contiguous ``out``: two pixels from three bytes, least
    significant bits first, as many pairs as both hold. A plain loop over a contiguous output, which LLVM
    vectorises (measured: 12 GB/s of input a core into uint16, 7.8 GB/s into float32). LiberTEM's
    ``k2is.decode_uint12_le``."""
    for i in range(min(inp.shape[0] // 3, out.shape[0] // 2)):
        b0 = np.uint16(inp[3 * i])
        b1 = np.uint16(inp[3 * i + 1])
        b2 = np.uint16(inp[3 * i + 2])
        out[2 * i] = b0 | ((b1 & 0x0F) << 8)
        out[2 * i + 1] = (b1 >> 4) | (b2 << 4)


@numba.njit(cache=True, nogil=True)
def decode_k2is_tile(inp, ranges, out):
    """Decode the blocks ``ranges`` reads (one sector file's, see
    :func:`~raytile.io.decoders.decode_tile`) from ``inp`` into the flat tile ``out``.

    A block is 930 rows of 16 pixels (see :func:`decode_uint12_le`). In tiles
    one block wide the block is contiguous and decoded in place; in wider
    tiles it is decoded into a scratch block (in the L1 cache) and its rows
    copied to their places, ``RR_SKIP`` pixels apart.
    """
    scratch = np.empty(BLOCK_PX, dtype=out.dtype)
    for i in range(ranges.shape[0]):
        o = ranges[i, RR_OUT]
        w = ranges[i, RR_SKIP]
        src = inp[ranges[i, RR_START]:ranges[i, RR_START] + DATA_SIZE]
        if w == BLOCK_COLS:
            decode_uint12_le(src, out[o:o + BLOCK_PX])
        else:
            decode_uint12_le(src, scratch)
            for r in range(BLOCK_ROWS):
                p = o + r * w
                q = r * BLOCK_COLS
                for c in range(BLOCK_COLS):
                    out[p + c] = scratch[q + c]


class K2ISDecoder(Decoder):
    """Blocks of 930 x 16 12-bit pixels into tiles (:func:`decode_k2is_tile`)."""

    bpp = 12

    def tile_decoder(self) -> tuple[Callable, tuple]:
        return decode_k2is_tile, ()

    def describe(self) -> str:
        return "k2is 12-bit blocks"


class K2ISFileSet(FileSet):
    """The 8 sector files; frames ``[lo, hi)`` of the nav index space after ``sync_offset`` are in the files."""

    def __init__(self, paths: list[str], offsets: list[int], lo: int, hi: int, native_sig: bool):
        super().__init__([File(p, lo, hi, off) for p, off in zip(paths, offsets)], SIG_SHAPE, 12)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.lo, self.hi = lo, hi
        self.native_sig = native_sig

    def file_bytes(self, f: File) -> int:
        return f.file_header + f.end_idx * FRAME_BYTES

    @property
    def whole_frames(self) -> bool:
        return False

    def check(self) -> None:
        for f in self.files:
            try:
                size = os.path.getsize(f.path)
            except OSError as e:
                raise DataSetException(f"{f.path}: cannot stat: {e}") from None
            if size < self.file_bytes(f):
                raise DataSetException(f"{f.path}: file is too short: the synced frames need "
                                       f"{self.file_bytes(f)} bytes, the file has {size} (truncated?)")

    def get_read_ranges(self, frames: np.ndarray, scheme: TilingScheme):
        if self.native_sig:
            rects = np.array([sl.origin + sl.shape.to_tuple() for sl in scheme.sig_slices], dtype=np.int64)
            if (rects[:, [0, 2]] % BLOCK_ROWS).any() or (rects[:, [1, 3]] % BLOCK_COLS).any():
                raise DataSetException(f"{self.paths[0]}: K2 IS tiles are whole 930 x 16 blocks; the tiling "
                                       f"scheme {scheme} was not negotiated with this data set's partitions")
        else:  # a reshaped signal: whole frames only, in the flat order of the native frame
            rects = np.array([(0, 0) + SIG_SHAPE], dtype=np.int64)
        return k2is_read_ranges(frames, int(scheme.depth), rects, self.lo, self.hi, self.offsets)


class K2ISPartition(FilePartition):
    """Tiles of whole 930 x 16 blocks (or whole frames), see the module doc."""

    fileset: K2ISFileSet

    def get_base_shape(self, roi: np.ndarray | None) -> tuple[int, ...]:
        if not self.fileset.native_sig:
            return (1,) + self.meta.shape.sig.to_tuple()
        return (1, BLOCK_ROWS, BLOCK_COLS)

    def adjust_tileshape(self, tileshape: tuple[int, ...], roi: np.ndarray | None) -> tuple[int, ...]:
        sig = self.meta.shape.sig.to_tuple()
        if tuple(tileshape[1:]) == sig:
            return tuple(tileshape)
        if not self.fileset.native_sig:
            return (tileshape[0],) + sig
        depth, h, w = tileshape
        # One block column, as deep as the negotiated tile was large (up to DEEPEST frames): each block is
        # decoded in place into a contiguous 930 x 16 stretch of the tile (the vectorised loop) and the tile
        # stays in the L2 cache while the UDF works on it (measured, inline SumUDF on 1 GB:
        # (35, 930, 16) 1.6-2.0 GB/s per CPU-second, (4, 930, 256) 0.8-1.2, (1, 1860, 2048) 0.8).
        depth = min(max(depth, depth * h * w // BLOCK_PX), DEEPEST, max(self.shape[0], 1))
        return (depth, BLOCK_ROWS, BLOCK_COLS)


class K2ISDataSet(FileDataSet):
    """Gatan K2 IS raw data: ``ctx.load("k2is", path="scan.gtg")`` (or a ``.bin``); see the module doc.

    Parameters as LiberTEM's: ``path``; ``nav_shape`` (default: the scan
    size from the ``.gtg``, else every shutter-active frame); ``sig_shape``
    (default ``(1860, 2048)``; another shape of as many pixels reads whole
    frames); ``sync_offset`` (default: the frames before the shutter flag;
    positive skips frames, negative inserts blank ones); ``io_backend``,
    ``num_partitions``.

    >>> ds = ctx.load("k2is", path="scan.gtg")  # doctest: +SKIP
    """

    format_name = "k2is"
    file_extensions = ("gtg", "bin")
    partition_class = K2ISPartition
    params_schema = FILE_FRAME_PARAMS

    def __init__(self, path: str, nav_shape: tuple[int, ...] | None = None,
                 sig_shape: tuple[int, ...] | None = None, sync_offset: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self._path = path
        self._nav_shape_in = nav_shape
        self._sig_shape_in = sig_shape
        self._user_sync_offset = sync_offset
        self._sync: SectorSync | None = None
        self._time_series = True

    @classmethod
    def _detect_params(cls, path: str) -> dict | None:
        """For a ``.gtg``/``.bin`` of 8 sector files whose first block header is K2 IS's: ``path`` and, as
        LiberTEM detects it, ``nav_shape`` (the ``.gtg``'s scan size, else the shutter-active frames, square
        where their number is a square) and ``sync_offset`` (the frames before the shutter flag)."""
        if not cls.has_file_extension(path):
            return None
        try:
            files, gtg = sector_files(path)
        except DataSetException:
            return None
        with open(files[0], "rb") as f:
            head = f.read(4)
        if len(head) < 4 or int.from_bytes(head, "big") != SYNC_WORD:
            return None
        sync = sync_sectors(files)
        scan = scan_shape_from_gtg(gtg)
        nav: tuple[int, ...]
        if scan is not None:
            nav = scan
        else:
            n = sync.image_count - sync.native_sync_offset
            side = math.isqrt(n)
            nav = (side, side) if side * side == n else (n,)
        return {"path": path, "nav_shape": nav, "sync_offset": sync.native_sync_offset}

    def _do_initialize(self) -> DataSetMeta:
        _base(self._path)  # the extension first: a file of another format gets that said
        if not os.path.exists(self._path):
            raise DataSetException(f"file not found: {self._path}")
        files, gtg = sector_files(self._path)
        scan = scan_shape_from_gtg(gtg)
        sync = self._sync = sync_sectors(files)
        count, native = sync.image_count, sync.native_sync_offset
        self._time_series = scan is None
        user = native if self._user_sync_offset is None else self._user_sync_offset
        if not -count < user < count:
            raise DataSetException(f"{self._path}: sync_offset {user} must lie in ({-count}, {count}): "
                                   f"the data set holds {count} frames")
        # nav position i reads synced frame base + i + sync_offset; in a scan that is i + user - 1 (LiberTEM's
        # split into a file start and an offset), in a time series i + user (LiberTEM: i + user + native)
        if self._time_series:
            sync_offset, base = user, 0
        elif user >= native:
            sync_offset, base = user - native, native - 1
        elif user > 0:
            sync_offset, base = 0, user - 1
        else:
            sync_offset, base = user - 1, 0
        lo, hi = max(0, -base), min(count, count - base)
        nav = self._nav_shape_in or (scan if scan is not None else (count - native,))
        n = math.prod(nav)
        if max(sync_offset, lo) >= min(sync_offset + n, hi):
            raise DataSetException(f"{self._path}: nav_shape {nav} with sync_offset {user} reads no frame of "
                                   f"the {count} frames of the data set")
        if self._nav_shape_in is not None and self._user_sync_offset is None and sync_offset + n > hi:
            raise DataSetException(
                f"{self._path}: nav_shape {nav} needs {n} frames, the data set holds {hi - sync_offset} from "
                f"its start ({count} frames, {native} before the shutter flag); the nav shape is wrong, or "
                f"give sync_offset to read past the end as blank frames")
        sig = self._sig_shape_in or SIG_SHAPE
        if math.prod(sig) != math.prod(SIG_SHAPE):
            raise DataSetException(f"{self._path}: sig_shape {sig} must have {math.prod(SIG_SHAPE)} pixels "
                                   f"(the K2 IS frame is {SIG_SHAPE})")
        offsets = [off + base * FRAME_BYTES for off in sync.offsets]
        self._fileset = K2ISFileSet(files, offsets, lo, hi, tuple(sig) == SIG_SHAPE)
        self._decoder = K2ISDecoder()
        self._native_dtype = np.dtype(np.uint16)
        # the frames after sync_offset in the files are [lo, hi): lo is 0 but where the shutter flag is
        # on the first frame (base -1): then nav position -sync_offset reads no frame and is run as zeros
        return DataSetMeta(shape=Shape(tuple(nav) + tuple(sig), sig_dims=len(sig)), raw_dtype=np.dtype(np.uint16),
                           sync_offset=sync_offset, image_count=hi)

    @property
    def num_partitions(self) -> int:
        """Partitions of about :data:`PARTITION_FILE_BYTES`, a multiple of the workers (unless given)."""
        if self._num_partitions is not None or self._partition_bytes != DEFAULT_PARTITION_BYTES:
            return super().num_partitions
        frames = self.shape.nav.size
        n = math.ceil(frames * NUM_SECTORS * FRAME_BYTES / PARTITION_FILE_BYTES)
        n = math.ceil(n / self._num_workers) * self._num_workers
        return max(1, min(n, frames))

    def get_diagnostics(self) -> list[dict[str, Any]]:
        diag = super().get_diagnostics()
        if self._sync is not None:
            diag += [
                {"name": "frames after syncing", "value": str(self._sync.image_count)},
                {"name": "frames before the shutter flag", "value": str(self._sync.native_sync_offset)},
                {"name": "first frame id", "value": str(self._sync.first_frame_id)},
                {"name": "first block offsets", "value": ", ".join(str(o) for o in self._sync.offsets)},
                {"name": "mode", "value": "time series" if self._time_series else "scan (.gtg SI Dimensions)"},
            ]
        return diag
