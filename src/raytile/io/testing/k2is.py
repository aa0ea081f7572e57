"""Write Gatan K2 IS raw data sets (8 sector ``.bin`` files and a ``.gtg``) from the documented layout.

The layout, as LiberTEM documents and reads it:

- the 1860 x 2048 detector is cut into 8 sectors of 1860 x 256 pixels, one
  file each (``<name>_1.bin`` .. ``<name>_8.bin``, sector 0 leftmost; the
  ``.gtg`` is ``<name>_.gtg``);
- a sector's frame is 32 blocks of ``0x5758`` bytes: a 40-byte big-endian
  header, then 930 x 16 pixels as 12-bit values packed two in three bytes,
  least significant bits first (``p0 = b0 | (b1 & 0xF) << 8``,
  ``p1 = b1 >> 4 | b2 << 4``), rows of 16 pixels one after another;
- block ``i`` of a frame covers block row ``i // 16`` (930 rows) and block
  column ``15 - i % 16`` (16 columns) of its sector;
- header fields: sync ``0xFFFF0055``, 4 bytes padding, version, flags (bit 0:
  shutter active), 6 bytes padding, block_count (counts the blocks of a
  sector's stream, equal across sectors for the same block), width 256,
  height 1860, frame_id, first/last pixel x, y within the sector, block
  size ``0x5758``.

Recording starts at a different point in each sector's stream and ends at
another: ``lead_blocks`` and ``tail_blocks`` put that many blocks of the
neighbouring (incomplete) frames before and after the frames, as a reader
has to sync them away. The ``.gtg`` is a minimal DM4 tag file, holding the
scan size in ``SI Dimensions`` (``Size X``/``Size Y``) when given.
"""

from __future__ import annotations

import os
import struct
from typing import Sequence

import numpy as np

__all__ = ["write_k2is", "write_dm4_tags", "pack_block", "BLOCK_SIZE", "HEADER_SIZE", "SIG_SHAPE"]

BLOCK_SIZE = 0x5758
HEADER_SIZE = 40
BLOCK_ROWS, BLOCK_COLS = 930, 16
SECTORS = 8
SECTOR_W = 256
BLOCKS_PER_FRAME = 32
SIG_SHAPE = (1860, 2048)
SYNC = 0xFFFF0055
_HEADER = struct.Struct(">I4sBB6sIHHIHHHHI")


def pack_block(pixels: np.ndarray) -> bytes:
    """930 x 16 12-bit pixels as 22320 bytes, two pixels in three bytes, LSB first."""
    p = np.asarray(pixels, dtype=np.uint16).reshape(-1, 2).astype(np.uint32)
    p0, p1 = p[:, 0], p[:, 1]
    out = np.empty((p.shape[0], 3), dtype=np.uint8)
    out[:, 0] = p0 & 0xFF
    out[:, 1] = (p0 >> 8) | ((p1 & 0xF) << 4)
    out[:, 2] = p1 >> 4
    return out.tobytes()


def _block(frame: np.ndarray | None, sector: int, idx: int, frame_id: int, block_count: int, shutter: bool) -> bytes:
    by, bx = idx // 16, 15 - idx % 16
    y0, x0 = by * BLOCK_ROWS, bx * BLOCK_COLS
    head = _HEADER.pack(SYNC, b"\0" * 4, 1, 1 if shutter else 0, b"\0" * 6, block_count & 0xFFFFFFFF,
                        SECTOR_W, SIG_SHAPE[0], frame_id & 0xFFFFFFFF, x0, y0, x0 + BLOCK_COLS - 1,
                        y0 + BLOCK_ROWS - 1, BLOCK_SIZE)
    if frame is None:
        data = np.zeros(BLOCK_ROWS * BLOCK_COLS, dtype=np.uint16)
    else:
        xs = sector * SECTOR_W + x0
        data = frame[y0:y0 + BLOCK_ROWS, xs:xs + BLOCK_COLS]
    return head + pack_block(data)


def write_k2is(directory: str | os.PathLike, frames: np.ndarray, name: str = "k2is",
               scan_shape: tuple[int, int] | None = None, inactive_frames: int = 0,
               lead_blocks: Sequence[int] | int = 0, tail_blocks: Sequence[int] | int = 0,
               first_frame_id: int = 1000, first_block_count: int = 50_000) -> str:
    """Write ``frames`` ``(n, 1860, 2048)`` (12-bit values) as a K2 IS data set; return the ``.gtg`` path.

    The first ``inactive_frames`` of ``frames`` are written without the
    shutter-active flag (frames before the scan starts). ``lead_blocks[s]``
    blocks of the frame before the first one start sector ``s``'s file,
    ``tail_blocks[s]`` blocks of the frame after the last one end it (both
    filled with zeros; at most 31, an incomplete frame). ``scan_shape``
    ``(y, x)`` goes into the ``.gtg`` as ``SI Dimensions``.

    >>> import numpy as np, tempfile
    >>> frames = np.zeros((2, 1860, 2048), dtype=np.uint16)
    >>> path = write_k2is(tempfile.mkdtemp(), frames)
    """
    frames = np.asarray(frames)
    if frames.ndim != 3 or frames.shape[1:] != SIG_SHAPE:
        raise ValueError(f"frames must be (n, 1860, 2048), got {frames.shape}")
    if frames.size and int(frames.max()) >= 4096:
        raise ValueError("K2 IS pixels are 12-bit: values must be < 4096")
    lead = [lead_blocks] * SECTORS if isinstance(lead_blocks, int) else list(lead_blocks)
    tail = [tail_blocks] * SECTORS if isinstance(tail_blocks, int) else list(tail_blocks)
    if len(lead) != SECTORS or len(tail) != SECTORS or not all(0 <= v < 32 for v in lead + tail):
        raise ValueError("lead_blocks/tail_blocks: 8 values in 0..31")
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    n = frames.shape[0]
    for s in range(SECTORS):
        with open(os.path.join(directory, f"{name}_{s + 1}.bin"), "wb") as f:
            # blocks of stream position p: frame p // 32 (frame -1 is the lead), block p % 32
            for p in range(-lead[s], n * BLOCKS_PER_FRAME + tail[s]):
                fi, idx = divmod(p, BLOCKS_PER_FRAME)
                frame = frames[fi] if 0 <= fi < n else None
                shutter = fi >= inactive_frames
                f.write(_block(frame, s, idx, first_frame_id + fi, first_block_count + p, shutter))
    gtg = os.path.join(directory, f"{name}_.gtg")
    tags: dict = {"Test": {"Writer": 1}}
    if scan_shape is not None:
        tags["SI Dimensions"] = {"Size X": int(scan_shape[1]), "Size Y": int(scan_shape[0])}
    write_dm4_tags(gtg, tags)
    return gtg


def _dm4_entry(label: str, value) -> bytes:
    name = label.encode("latin-1")
    if isinstance(value, dict):
        body = struct.pack(">BBQ", 0, 1, len(value)) + b"".join(_dm4_entry(k, v) for k, v in value.items())
        kind = 20
    else:
        # a signed 32-bit integer (DM type 3), little-endian data as the header declares
        body = b"%%%%" + struct.pack(">QQ", 1, 3) + struct.pack("<i", int(value))
        kind = 21
    return struct.pack(">BH", kind, len(name)) + name + struct.pack(">Q", len(body)) + body


def write_dm4_tags(path: str | os.PathLike, tags: dict) -> None:
    """A DM4 file holding only the tag tree ``tags`` (nested dicts of int values), little-endian data.

    DM4: version 4, root length, byte order (1: little-endian data), then the
    root group (sorted, open, number of entries, entries); an entry is a type
    byte (20 group, 21 data), a label, the entry's byte length, then a group
    or ``%%%%``, the type description length and entries, and the data.
    """
    root = struct.pack(">BBQ", 0, 1, len(tags)) + b"".join(_dm4_entry(k, v) for k, v in tags.items())
    with open(path, "wb") as f:
        f.write(struct.pack(">IQI", 4, len(root), 1) + root + b"\0" * 8)
