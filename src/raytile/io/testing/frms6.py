"""Write PNDetector FRMS6 data sets (``.hdr`` + ``_000.frms6`` dark frames + data files) from the documented layout.

The layout, as LiberTEM documents and reads it:

- ``<name>.hdr``: an INI file whose ``[measurementInfo]`` section holds
  ``darkframes``, ``signalframes``, ``dwelltimemicroseconds``, ``gain``,
  ``stemimagesize`` (``"AxB"``, the scan shape) and ``readoutmode``
  (``"bin: 1, windowing: 264 x 264"``, the binning factor of the rows);
- ``<name>_000.frms6`` holds the dark (offset) frames, ``_001``, ``_002``, ...
  the signal frames, in order;
- each ``.frms6`` starts with a 1024-byte little-endian header: header size
  (``u2``, 1024), frame header size (``u2``, 64), 3 bytes padding, version
  (``u1``, 6), 80 bytes comment, width (``u2``), height (``u2``), 928 bytes
  comment, number of frames (``u4``; 0 in older files: from the file size);
- each frame is a 64-byte header (padding, timestamps, frame number,
  comment) and ``height x width`` little-endian uint16 pixels;
- the detector's two halves are read out side by side: a stored frame of
  ``height x width`` is the ``2 height x width / 2`` image whose top half is
  the stored left half, and whose bottom half is the stored right half
  turned by 180 degrees (rows bottom-up, columns right to left). With
  binning ``b`` each stored row stands for ``b`` detector rows.
"""

from __future__ import annotations

import os
import struct

import numpy as np

__all__ = ["write_frms6", "fold_frames", "write_gain_mat", "write_gain_csv"]

_FILE_HEADER = struct.Struct("<HH3sB80sHH928sI")
_FRAME_HEADER = struct.Struct("<4sIII12s36s")


def fold_frames(frames: np.ndarray) -> np.ndarray:
    """Images ``(n, 2h, w)`` as stored: ``(n, h, 2w)``, the bottom half turned by 180 degrees to the right."""
    frames = np.asarray(frames)
    n, hh, w = frames.shape
    h = hh // 2
    out = np.empty((n, h, 2 * w), dtype=frames.dtype)
    out[:, :, :w] = frames[:, :h]
    out[:, :, w:] = frames[:, h:][:, ::-1, ::-1]
    return out


def _write_file(path: str, stored: np.ndarray, first_number: int, num_frames_in_header: bool) -> None:
    n, h, w = stored.shape
    head = _FILE_HEADER.pack(1024, 64, b"\0" * 3, 6, b"raytile test file".ljust(80, b"\0"), w, h,
                             b"\0" * 928, n if num_frames_in_header else 0)
    with open(path, "wb") as f:
        f.write(head)
        for i in range(n):
            f.write(_FRAME_HEADER.pack(b"\0" * 4, 1_700_000_000 + i, i * 100, first_number + i, b"\0" * 12,
                                       b"\0" * 36))
            f.write(np.ascontiguousarray(stored[i], dtype="<u2").tobytes())


def write_frms6(directory: str | os.PathLike, frames: np.ndarray, dark_frames: np.ndarray, name: str = "frms6",
                scan_shape: tuple[int, int] | None = None, binning: int = 1, frames_per_file: int | None = None,
                num_frames_in_header: bool = True) -> str:
    """Write ``frames`` and ``dark_frames`` (``(n, 2h, w)`` binned images, uint16) as an FRMS6 set; return the ``.hdr``.

    ``scan_shape`` goes into ``stemimagesize`` (default ``(n,)`` as ``"nx1"``);
    ``binning`` into ``readoutmode``; ``frames_per_file`` splits the signal
    frames over ``_001``, ``_002``, ... files.

    >>> import numpy as np, tempfile
    >>> hdr = write_frms6(tempfile.mkdtemp(), np.zeros((4, 8, 6), np.uint16), np.zeros((2, 8, 6), np.uint16))
    """
    frames = np.asarray(frames)
    dark_frames = np.asarray(dark_frames)
    if frames.ndim != 3 or frames.shape[1] % 2 or dark_frames.shape[1:] != frames.shape[1:]:
        raise ValueError(f"frames (n, 2h, w) and dark frames of the same frame shape, got {frames.shape} "
                         f"and {dark_frames.shape}")
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    n = frames.shape[0]
    scan = scan_shape if scan_shape is not None else (n, 1)
    hh, w = frames.shape[1:]
    hdr = os.path.join(directory, f"{name}.hdr")
    with open(hdr, "w") as f:
        f.write("[measurementInfo]\n")
        f.write(f"darkframes={dark_frames.shape[0]}\n")
        f.write(f"signalframes={n}\n")
        f.write("dwelltimemicroseconds=100\n")
        f.write("gain=3\n")
        f.write(f"stemimagesize={scan[0]}x{scan[1]}\n")
        f.write(f'readoutmode="bin: {binning}, windowing: {hh * binning} x {w}"\n')
    _write_file(os.path.join(directory, f"{name}_000.frms6"), fold_frames(dark_frames), 0, num_frames_in_header)
    per = frames_per_file or max(n, 1)
    for i, a in enumerate(range(0, n, per)):
        _write_file(os.path.join(directory, f"{name}_{i + 1:03d}.frms6"), fold_frames(frames[a:a + per]), a,
                    num_frames_in_header)
    return hdr


def write_gain_mat(path: str | os.PathLike, gain: np.ndarray) -> None:
    """A gain map as a MATLAB ``.mat`` file with the variable ``GainMap`` (what LiberTEM reads)."""
    import scipy.io

    scipy.io.savemat(os.fspath(path), {"GainMap": np.asarray(gain)})


def write_gain_csv(path: str | os.PathLike, gain: np.ndarray) -> None:
    """A gain map as ``;``-separated text, transposed (a line is a column of the frame), as LiberTEM reads it."""
    with open(path, "w") as f:
        for col in np.asarray(gain).T:
            f.write(";".join(repr(float(v)) for v in col) + ";\n")
