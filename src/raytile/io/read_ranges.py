"""Read ranges: tiles translated into byte ranges of files, by numba.

A tile is a block of up to ``depth`` frames times one signal slice of the
tiling scheme. :func:`get_read_ranges` turns a list of frames and the
scheme's signal slices into

``tile_meta`` ``(n_tiles, META_ENTRIES)`` int64
    ``(first frame of the block as an index into frames, frame count,
    scheme index, number of read ranges used, lowest and highest file index
    read (``fmax < fmin`` when none), 1 if some frames lie outside every file)``
``read_ranges`` ``(n_tiles, rr_per_tile, RR_ENTRIES)`` int64
    ``(file_idx, start, stop, out_start, n_px, skip)``: read bytes
    ``[start, stop)`` of file ``file_idx`` and decode ``n_px`` pixels into the
    flat tile buffer at ``out_start``, dropping ``skip`` leading pixels of the
    decoded bytes (for bit-packed data whose first pixel is not byte-aligned).
    ``file_idx == -1`` marks pixels of frames outside every file (blank frames
    of a negative ``sync_offset``): they are zero-filled.

Signal slices come in as "runs" (:func:`slice_runs`): contiguous pixel
ranges of the flat frame, ``(px_start, px_stop, out_start)``, so one read
range serves a run of one frame. The file layout picks the mapping of
pixels to bytes: :data:`LAYOUT_FRAMES` (frames of optionally bit-packed
pixels with headers/footers), :data:`LAYOUT_TILED` (frames stored in
tiles, see :mod:`raytile.io.formats.tiled`) or :data:`LAYOUT_CHUNKED`
(uncompressed chunks at arbitrary offsets, as in HDF5; see
:func:`chunked_extra`). The layouts live in one
module-level function so numba caches its compiled code on disk; jitted
closures would be compiled again in every worker process.

``fileset_arr`` rows are ``(first frame, stop frame, file header bytes)``
of each file in the global frame index space; ``extra`` is an int64 array
of layout parameters.
"""

from __future__ import annotations

import math
from typing import Sequence

import numba
import numpy as np

#: Entries per read range: file_idx, start, stop, out_start, n_px, skip.
RR_ENTRIES = 6
RR_FILE, RR_START, RR_STOP, RR_OUT, RR_NPX, RR_SKIP = range(6)

#: Entries per tile of ``tile_meta``.
META_ENTRIES = 7
META_FIRST, META_COUNT, META_SLICE, META_NRR, META_FMIN, META_FMAX, META_BLANK = range(7)

#: File layouts understood by :func:`get_read_ranges`.
LAYOUT_FRAMES, LAYOUT_TILED, LAYOUT_CHUNKED = range(3)


@numba.njit(cache=True, nogil=True)
def pixel_groups(bpp):
    """(pixels, bytes) of the smallest whole-byte group of ``bpp``-bit pixels."""
    a, b = bpp, 8
    while b:
        a, b = b, a % b
    lcm = bpp * 8 // a
    return lcm // bpp, lcm // 8


@numba.njit(cache=True, nogil=True)
def frame_stride_bytes(bpp, frame_px, frame_header, frame_footer):
    """Bytes one frame takes in a file: header, whole pixel groups, footer.

    Calls no other jitted function, so Python code can use its ``py_func``
    (exact integers) without compiling anything.
    """
    a, b = bpp, 8
    while b:
        a, b = b, a % b
    g, bpg = 8 // a, bpp // a  # pixels and bytes of the smallest whole-byte group
    return frame_header + ((frame_px + g - 1) // g) * bpg + frame_footer


@numba.njit(cache=True, nogil=True)
def frames_px_to_bytes(bpp, frame_in_file, px_start, px_stop, frame_px, frame_header, frame_footer,
                       file_header):
    """Bytes of pixels ``[px_start, px_stop)`` of frame ``frame_in_file`` of a file of equal frames.

    Returns ``(start, stop, skip)``; ``skip`` pixels at the start of the
    decoded bytes precede ``px_start`` (non-zero only for bit-packed data).
    """
    g, bpg = pixel_groups(bpp)
    stride = frame_stride_bytes(bpp, frame_px, frame_header, frame_footer)
    base = file_header + frame_in_file * stride + frame_header
    start = base + (px_start // g) * bpg
    stop = base + ((px_stop + g - 1) // g) * bpg
    return start, stop, px_start % g


@numba.njit(cache=True, nogil=True)
def tiled_px_to_bytes(bpp, frame_in_file, px_start, px_stop, frame_px, file_header, extra):
    """Bytes of a run of pixels in the tiled layout; a run never crosses a stored tile row.

    ``extra`` is ``(tile_depth, tile_h, tile_w, sig_w)``.
    """
    td, th, tw, w = extra[0], extra[1], extra[2], extra[3]
    isz = bpp // 8
    y = px_start // w
    x = px_start % w
    block = frame_in_file // td
    k = frame_in_file % td
    tile_bytes = td * th * tw * isz
    tile_idx = (y // th) * (w // tw) + x // tw
    off = (file_header + block * (frame_px * td * isz) + tile_idx * tile_bytes
           + k * th * tw * isz + (y % th) * tw * isz + (x % tw) * isz)
    return off, off + (px_stop - px_start) * isz, 0


def chunked_extra(file_nav: Sequence[int], chunks: Sequence[int], sig_shape: Sequence[int],
                  offsets: np.ndarray) -> np.ndarray:
    """The ``extra`` array of :data:`LAYOUT_CHUNKED`.

    ``file_nav``: the nav shape as stored; ``chunks``: the chunk shape (nav
    dims then the two sig dims); ``offsets``: the byte offset of every chunk,
    shaped like the chunk grid. Layout: ``nav_dims, file_nav, chunk_nav,
    chunk_h, chunk_w, sig_w, grid (nav dims, h, w), offsets``.
    """
    nd = len(file_nav)
    grid = offsets.shape
    head = [nd, *file_nav, *chunks[:nd], chunks[nd], chunks[nd + 1], sig_shape[1], *grid]
    return np.concatenate([np.asarray(head, dtype=np.int64), offsets.reshape(-1).astype(np.int64)])


@numba.njit(cache=True, nogil=True)
def chunked_px_to_bytes(bpp, frame_in_file, px_start, px_stop, extra):
    """Bytes of a run of pixels in :data:`LAYOUT_CHUNKED`; a run never crosses a chunk's row."""
    nd = extra[0]
    ch = extra[1 + 2 * nd]
    cw = extra[2 + 2 * nd]
    w = extra[3 + 2 * nd]
    grid = extra[4 + 2 * nd:4 + 3 * nd + 2]
    offsets = extra[4 + 3 * nd + 2:]
    isz = bpp // 8
    y = px_start // w
    x = px_start % w
    # nav coordinates of the frame, last dim fastest; chunk index and position inside the chunk
    rest = frame_in_file
    chunk_idx = 0
    inner = 0
    stride_grid = grid[nd] * grid[nd + 1]
    stride_inner = ch * cw
    for d in range(nd - 1, -1, -1):
        n = extra[1 + d]
        c = extra[1 + nd + d]
        pos = rest % n
        rest //= n
        chunk_idx += (pos // c) * stride_grid
        inner += (pos % c) * stride_inner
        stride_grid *= grid[d]
        stride_inner *= c
    chunk_idx += (y // ch) * grid[nd + 1] + x // cw
    inner += (y % ch) * cw + x % cw
    off = offsets[chunk_idx] + inner * isz
    return off, off + (px_stop - px_start) * isz, 0


@numba.njit(cache=True, nogil=True)
def find_file(fileset_arr, frame):
    """Index of the file holding global ``frame``, or -1 (binary search over sorted rows)."""
    lo, hi = 0, fileset_arr.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if fileset_arr[mid, 1] <= frame:
            lo = mid + 1
        else:
            hi = mid
    if lo < fileset_arr.shape[0] and fileset_arr[lo, 0] <= frame < fileset_arr[lo, 1]:
        return lo
    return -1


@numba.njit(cache=True, nogil=True)
def _tile_block(frames, runs, n_runs, slice_px, frame_px, fileset_arr, bpp, frame_header, frame_footer,
                layout, extra, out, meta):
    """Fill the read ranges of one tile (frames x runs of one signal slice) and its meta entries."""
    n = 0
    fmin = fileset_arr.shape[0]
    fmax = -1
    blank = 0
    for k in range(frames.shape[0]):
        frame = frames[k]
        f = find_file(fileset_arr, frame)
        if f < 0:
            blank = 1
        else:
            fmin = min(fmin, f)
            fmax = max(fmax, f)
        for r in range(n_runs):
            px_start = runs[r, 0]
            px_stop = runs[r, 1]
            out[n, RR_OUT] = k * slice_px + runs[r, 2]
            out[n, RR_NPX] = px_stop - px_start
            if f < 0:
                out[n, RR_FILE] = -1
                out[n, RR_START] = 0
                out[n, RR_STOP] = 0
                out[n, RR_SKIP] = 0
            else:
                if layout == LAYOUT_CHUNKED:
                    start, stop, skip = chunked_px_to_bytes(bpp, frame - fileset_arr[f, 0], px_start, px_stop,
                                                            extra)
                elif layout == LAYOUT_TILED:
                    start, stop, skip = tiled_px_to_bytes(bpp, frame - fileset_arr[f, 0], px_start, px_stop,
                                                          frame_px, fileset_arr[f, 2], extra)
                else:
                    start, stop, skip = frames_px_to_bytes(bpp, frame - fileset_arr[f, 0], px_start, px_stop,
                                                           frame_px, frame_header, frame_footer,
                                                           fileset_arr[f, 2])
                out[n, RR_FILE] = f
                out[n, RR_START] = start
                out[n, RR_STOP] = stop
                out[n, RR_SKIP] = skip
            n += 1
    meta[META_NRR] = n
    meta[META_FMIN] = fmin if fmax >= 0 else 0
    meta[META_FMAX] = fmax
    meta[META_BLANK] = blank


@numba.njit(cache=True, nogil=True)
def get_read_ranges(frames, depth, runs, n_runs, slice_px, frame_px, fileset_arr, bpp,
                    frame_header, frame_footer, layout, extra, rr_per_tile):
    """``(tile_meta, read_ranges)`` of ``frames`` in blocks of ``depth``, every signal slice per block."""
    n_frames = frames.shape[0]
    n_slices = n_runs.shape[0]
    n_blocks = (n_frames + depth - 1) // depth
    n_tiles = n_blocks * n_slices
    meta = np.zeros((n_tiles, META_ENTRIES), dtype=np.int64)
    rr = np.zeros((n_tiles, rr_per_tile, RR_ENTRIES), dtype=np.int64)
    t = 0
    for b in range(n_blocks):
        first = b * depth
        last = min(first + depth, n_frames)
        block = frames[first:last]
        for s in range(n_slices):
            _tile_block(block, runs[s], n_runs[s], slice_px[s], frame_px, fileset_arr, bpp,
                        frame_header, frame_footer, layout, extra, rr[t], meta[t])
            meta[t, META_FIRST] = first
            meta[t, META_COUNT] = last - first
            meta[t, META_SLICE] = s
            t += 1
    return meta, rr


def slice_runs(slices: Sequence, sig_shape: tuple[int, ...], split_x: int = 0):
    """Contiguous pixel runs of each signal slice of a scheme, padded into one array.

    Returns ``(runs (n_slices, max_runs, 3), n_runs (n_slices,), slice_px (n_slices,))``;
    a run is ``(px_start, px_stop, out_start)`` in the flat frame / flat slice.
    Rows of a slice as wide as the frame merge into one run. ``split_x > 0``
    cuts runs at multiples of ``split_x`` along the last axis (for formats
    stored in tiles of that width).
    """
    sig_shape = tuple(int(v) for v in sig_shape)
    strides = [math.prod(sig_shape[i + 1:]) for i in range(len(sig_shape))]
    per_slice = []
    for sl in slices:
        origin = tuple(int(v) for v in sl.origin)
        shape = tuple(int(v) for v in sl.shape)
        # merge trailing dims that the slice covers completely
        merged = len(shape) - 1
        while merged > 0 and shape[merged] == sig_shape[merged] and not split_x:
            merged -= 1
        run_len = math.prod(shape[merged:])
        runs = []
        out = 0
        for idx in np.ndindex(*shape[:merged]) if merged else [()]:
            px = sum((o + i) * st for o, i, st in zip(origin, idx, strides)) + origin[merged] * strides[merged]
            if split_x and merged == len(shape) - 1:
                x0 = origin[-1]
                x1 = x0 + shape[-1]
                x = x0
                while x < x1:
                    nx = min(x1, (x // split_x + 1) * split_x)
                    runs.append((px + x - x0, px + nx - x0, out + x - x0))
                    x = nx
            else:
                runs.append((px, px + run_len, out))
            out += run_len
        per_slice.append(runs)
    max_runs = max(len(r) for r in per_slice)
    arr = np.zeros((len(per_slice), max_runs, 3), dtype=np.int64)
    n_runs = np.zeros(len(per_slice), dtype=np.int64)
    slice_px = np.zeros(len(per_slice), dtype=np.int64)
    for i, (runs, sl) in enumerate(zip(per_slice, slices)):
        arr[i, :len(runs)] = runs
        n_runs[i] = len(runs)
        slice_px[i] = math.prod(tuple(sl.shape))
    return arr, n_runs, slice_px


@numba.njit(cache=True, nogil=True)
def plan_block_reads(rr, meta, t0, t1, align, gap):
    """Coalesce the read ranges of tiles ``[t0, t1)`` (one nav block) into reads.

    Ranges of one file closer than ``gap`` bytes merge into one read. Returns
    ``(reads (n, 4): file_idx, start, stop, buf_pos; translated rr)`` where the
    translated ranges (file indices kept) point into one buffer holding all
    reads back to back;
    with ``align > 1`` read starts, lengths and buffer positions are multiples
    of ``align`` (O_DIRECT).
    """
    total = 0
    for t in range(t0, t1):
        total += meta[t, META_NRR]
    keys = np.empty((total, 3), dtype=np.int64)  # file, start, stop
    n = 0
    for t in range(t0, t1):
        for i in range(meta[t, META_NRR]):
            if rr[t, i, RR_FILE] >= 0:
                keys[n, 0] = rr[t, i, RR_FILE]
                keys[n, 1] = rr[t, i, RR_START]
                keys[n, 2] = rr[t, i, RR_STOP]
                n += 1
    keys = keys[:n]
    order = np.argsort(keys[:, 0] * (1 << 42) + keys[:, 1]) if n else np.empty(0, dtype=np.int64)
    reads = np.empty((max(n, 1), 4), dtype=np.int64)
    nr = 0
    pos = 0
    for j in range(n):
        k = order[j]
        f, s, e = keys[k, 0], keys[k, 1], keys[k, 2]
        s = (s // align) * align
        e = ((e + align - 1) // align) * align
        if nr > 0 and reads[nr - 1, 0] == f and s <= reads[nr - 1, 2] + gap:
            if e > reads[nr - 1, 2]:
                pos += e - reads[nr - 1, 2]
                reads[nr - 1, 2] = e
        else:
            reads[nr, 0] = f
            reads[nr, 1] = s
            reads[nr, 2] = e
            reads[nr, 3] = pos
            pos += e - s
            nr += 1
    reads = reads[:nr]
    out = rr[t0:t1].copy()
    for t in range(t1 - t0):
        for i in range(meta[t0 + t, META_NRR]):
            f = out[t, i, RR_FILE]
            if f < 0:
                continue
            s = out[t, i, RR_START]
            # reads are sorted by (file, start): binary search for the last read starting <= s
            lo, hi = 0, nr
            while lo < hi:
                mid = (lo + hi) // 2
                if reads[mid, 0] < f or (reads[mid, 0] == f and reads[mid, 1] <= s):
                    lo = mid + 1
                else:
                    hi = mid
            r = lo - 1
            off = reads[r, 3] + s - reads[r, 1]
            out[t, i, RR_STOP] = off + out[t, i, RR_STOP] - s
            out[t, i, RR_START] = off
    return reads, out
