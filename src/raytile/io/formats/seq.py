"""The ``seq`` format: NorPix StreamPix ``.seq`` files (DE cameras), with their dark, gain and bad pixels.

Header (little-endian, 1024 bytes): ``magic`` u32 (0xFEED) at 0, ``name``
(24 bytes UTF-16) at 4, ``version`` i32 at 28, ``header_size`` at 32, a
512-byte description, then ``width``, ``height``, ``bit_depth``,
``bit_depth_real``, ``image_size_bytes``, ``image_format`` (100:
monochrome), ``allocated_frames``, ``origin``, ``true_image_size`` (u32 at
548 .. 580), ``suggested_frame_rate`` f8, ..., ``compression_format`` u32
at 620. Frames start at byte 8192 (version >= 5) or 1024, every
``true_image_size`` bytes: ``height x width`` unsigned pixels of
``bit_depth`` bits and a footer (the timestamp). Only uncompressed
monochrome files are read.

Corrections, as LiberTEM 0.16 finds them next to ``name.seq``: a dark
frame ``name.seq.dark.mrc``, a gain map ``name.seq.gain.mrc`` and bad
pixels from ``name.seq.Config.Metadata.xml`` (``BadPixelMap`` elements of
``Defect`` rows, row ranges "a-b", columns, column ranges and pixels) with
the sensor geometry of ``name.seq.metadata`` (unbinned frame size, offset
and hardware binning at byte 282). They become the data set's own
:class:`~raytile.io.corrections.CorrectionSet` (``ds.corrections``,
``ds.get_correction_data()``), applied when a run passes none; a
``corrections=`` parameter replaces them. Differences from LiberTEM: the
defect map is indexed (row, column) with ``Rows`` x ``Columns`` shape, and
the crop to the sensor window is ``[offset, offset + size)`` on each axis
(LiberTEM builds a ``Columns x Rows`` map and drops the last row/column
of odd-sized windows); both agree on square sensors and even windows.

Example::

    ds = ctx.load("seq", path="scan.seq", nav_shape=(128, 128))
"""

from __future__ import annotations

import os
import struct
import xml.etree.ElementTree as ET
from typing import Any

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.corrections import CorrectionSet
from raytile.io.fileset import File
from raytile.io.formats.framefiles import FrameFileDataSet, FrameLayout, read_exact, square_nav
from raytile.io.formats.mrc import read_mrc_header

__all__ = ["SEQDataSet", "read_seq_header", "seq_excluded_pixels", "bad_pixel_map", "_load_xml_from_string",
           "SEQ_MAGIC"]

SEQ_MAGIC = 0xFEED
_FIELDS = struct.Struct("<I24sii512s9IdiIIIiiiIiHH")
_NAMES = ("magic", "name", "version", "header_size", "description", "width", "height", "bit_depth",
          "bit_depth_real", "image_size_bytes", "image_format", "allocated_frames", "origin", "true_image_size",
          "suggested_frame_rate", "description_format", "reference_frame", "fixed_size", "flags", "bayer_pattern",
          "time_offset_us", "extended_header_size", "compression_format", "reference_time_s", "reference_time_ms",
          "reference_time_us")
_META_KEYS = ("DEMetadataSize", "DEMetadataVersion", "UnbinnedFrameSizeX", "UnbinnedFrameSizeY", "OffsetX",
              "OffsetY", "HardwareBinning", "Bitmode", "FrameRate", "RotationMode", "FlipMode", "OkraMode")


def read_seq_header(path: str) -> dict[str, Any]:
    """The header fields of a ``.seq`` file (DataSetException if it is not one)."""
    values = _FIELDS.unpack(read_exact(path, 0, _FIELDS.size, "SEQ header"))
    header = dict(zip(_NAMES, values))
    if header["magic"] != SEQ_MAGIC:
        raise DataSetException(f"{path}: not a SEQ file: magic {header['magic']:#x} (expected {SEQ_MAGIC:#x})")
    for key in ("name", "description"):
        header[key] = header[key].decode("utf-16-le", errors="replace").split("\x00", 1)[0]
    return header


def _basename(path: str) -> str:
    """``/d/x`` for ``/d/x.seq`` and ``/d/x.seq.seq`` (both occur, LiberTEM #1120)."""
    name, ext = os.path.splitext(path)
    name2, ext2 = os.path.splitext(name)
    if ext.lower() == ".seq":
        return name2 if ext2.lower() == ".seq" else name
    return path


def _read_mrc_image(path: str, sig_shape: tuple[int, ...], what: str) -> np.ndarray:
    h = read_mrc_header(path)
    count = int(np.prod(h["shape"]))
    data = np.frombuffer(read_exact(path, h["data_offset"], count * h["dtype"].itemsize, f"{what} data"),
                         dtype=h["dtype"]).astype(h["dtype"].newbyteorder("="))
    if count != int(np.prod(sig_shape)):
        raise DataSetException(f"{path}: {what} of shape {h['shape']} does not fit frames of {sig_shape}")
    return data.reshape(sig_shape)


def _span(text: str, xml_path: str) -> tuple[int, int]:
    parts = text.split("-")
    try:
        lo, hi = (int(parts[0]), int(parts[-1]))
    except ValueError:
        raise DataSetException(f"{xml_path}: defect {text!r} is not a number or a range a-b") from None
    return lo, hi + 1


def seq_excluded_pixels(xml_path: str, meta_path: str, sig_shape: tuple[int, ...]) -> np.ndarray:
    """The bad pixel mask of ``sig_shape`` from a ``.Config.Metadata.xml`` and its ``.metadata`` geometry."""
    raw = read_exact(meta_path, 282, struct.calcsize("<11i?"), "DE metadata (sensor geometry at byte 282)")
    meta = dict(zip(_META_KEYS, struct.unpack("<11i?", raw)))
    try:
        root = ET.parse(xml_path).getroot()
    except (ET.ParseError, OSError) as e:
        raise DataSetException(f"{xml_path}: cannot read the bad pixel XML: {e}") from None
    mask = bad_pixel_map(root, meta, xml_path)
    if mask.shape != tuple(sig_shape):
        raise DataSetException(f"{xml_path}: bad pixel map of {mask.shape} (after the sensor window of {meta_path}) "
                               f"does not fit frames of {tuple(sig_shape)}")
    return mask


def bad_pixel_map(root: ET.Element, meta: dict[str, int], xml_path: str = "bad pixel XML") -> np.ndarray:
    """The bad pixel mask of the sensor window: the ``BadPixelMap`` of ``root`` for the hardware binning of
    ``meta`` (``UnbinnedFrameSizeX``/``Y``, ``OffsetX``/``Y``, ``HardwareBinning``: the ``.metadata``
    geometry), cut to the window."""
    binned = meta["HardwareBinning"] > 1
    maps = []
    for m in root.iter("BadPixelMap"):
        try:
            cols, rows, binning = int(m.attrib["Columns"]), int(m.attrib["Rows"]), int(m.attrib.get("Binning", 1))
        except (KeyError, ValueError):
            raise DataSetException(f"{xml_path}: BadPixelMap without integer Columns/Rows: {m.attrib}") from None
        if (binning > 1) == binned:
            maps.append((cols, rows, m))
    if not maps:
        raise DataSetException(f"{xml_path}: no BadPixelMap for hardware binning {meta['HardwareBinning']}")
    cols, rows, chosen = max(maps, key=lambda t: t[0])
    mask = np.zeros((rows, cols), dtype=bool)
    for d in chosen.iter("Defect"):
        a = d.attrib
        if "Row" in a and "Column" in a:
            mask[_span(a["Row"], xml_path)[0], _span(a["Column"], xml_path)[0]] = True
        elif "Row" in a or "Rows" in a:
            lo, hi = _span(a.get("Row", a.get("Rows", "")), xml_path)
            mask[lo:hi] = True
        elif "Column" in a or "Columns" in a:
            lo, hi = _span(a.get("Column", a.get("Columns", "")), xml_path)
            mask[:, lo:hi] = True
    bin_by = max(1, meta["HardwareBinning"])
    size = (meta["UnbinnedFrameSizeY"] // bin_by, meta["UnbinnedFrameSizeX"] // bin_by)
    off = (meta["OffsetY"] // bin_by, meta["OffsetX"] // bin_by)
    if off[0] + size[0] <= rows and off[1] + size[1] <= cols:
        mask = mask[off[0]:off[0] + size[0], off[1]:off[1] + size[1]]
    return mask


def _load_xml_from_string(xml: str, metadata: dict[str, int]) -> Any:
    """LiberTEM's ``seq._load_xml_from_string``: :func:`bad_pixel_map` of an XML text, as a ``sparse.COO``."""
    import sparse

    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise DataSetException(f"cannot read the bad pixel XML: {e}") from None
    return sparse.COO(bad_pixel_map(root, metadata))


class SEQDataSet(FrameFileDataSet):
    """NorPix ``.seq`` files; ``nav_shape`` is required (as in LiberTEM), frames are ``(height, width)``."""

    format_name = "seq"
    file_extensions = ("seq",)
    params_schema = {"nav_shape": {"type": "shape", "required": True}}

    def __init__(self, path: str, nav_shape: tuple[int, ...], **kwargs: Any):
        super().__init__(path, nav_shape, **kwargs)
        self._own_corrections: CorrectionSet | None = None
        self._found = {"dark": False, "gain": False, "excluded": False}

    def _read_layout(self) -> FrameLayout:
        path = self._path
        h = read_seq_header(path)
        if h["compression_format"] != 0:
            raise DataSetException(f"{path}: compressed SEQ files (compression_format "
                                   f"{h['compression_format']}) are not supported")
        if h["image_format"] != 100:
            raise DataSetException(f"{path}: SEQ image_format {h['image_format']} is not monochrome (100)")
        if h["bit_depth"] not in (8, 16, 32) or h["width"] <= 0 or h["height"] <= 0:
            raise DataSetException(f"{path}: SEQ frames of {h['height']} x {h['width']} at {h['bit_depth']} bits "
                                   f"are not supported (8, 16 or 32 bits)")
        dtype = np.dtype(f"<u{h['bit_depth'] // 8}")
        frame_bytes = h["width"] * h["height"] * dtype.itemsize
        footer = h["true_image_size"] - frame_bytes
        if footer < 0:
            raise DataSetException(f"{path}: SEQ true_image_size {h['true_image_size']} is smaller than a frame "
                                   f"({frame_bytes} bytes; corrupt header)")
        offset = 8192 if h["version"] >= 5 else 1024
        size = self._check_path(path)
        count = max(0, size - offset) // h["true_image_size"]
        sig = (h["height"], h["width"])
        self._load_corrections(sig)
        return FrameLayout(files=[File(path, 0, count, offset)], sig_shape=sig, dtype=dtype,
                           nav_shape=square_nav(count), frame_footer=footer,
                           info={"SEQ version": str(h["version"]), "footer bytes": str(footer),
                                 "dark frame": str(self._found["dark"]), "gain map": str(self._found["gain"]),
                                 "bad pixels": str(self._found["excluded"])})

    def _load_corrections(self, sig: tuple[int, ...]) -> None:
        base = _basename(self._path)
        dark_p, gain_p = base + ".seq.dark.mrc", base + ".seq.gain.mrc"
        xml_p, meta_p = base + ".seq.Config.Metadata.xml", base + ".seq.metadata"
        dark = _read_mrc_image(dark_p, sig, "dark frame") if os.path.exists(dark_p) else None
        gain = _read_mrc_image(gain_p, sig, "gain map") if os.path.exists(gain_p) else None
        excluded = seq_excluded_pixels(xml_p, meta_p, sig) if os.path.exists(xml_p) and os.path.exists(meta_p) \
            else None
        self._found = {"dark": dark is not None, "gain": gain is not None, "excluded": excluded is not None}
        self._own_corrections = CorrectionSet(dark=dark, gain=gain, excluded_pixels=excluded) \
            if any(self._found.values()) else None

    @property
    def corrections(self) -> Any:
        """The ``corrections=`` parameter if given, else the dark/gain/bad pixels found next to the file."""
        if self._corrections is not None:
            return self._corrections
        return self._own_corrections

    def get_correction_data(self) -> CorrectionSet:
        """LiberTEM's name: the corrections found next to the file (an empty set if none)."""
        return self._own_corrections if self._own_corrections is not None else CorrectionSet()

    @classmethod
    def _detect_params(cls, path: str) -> dict[str, Any] | None:
        """``{"path", "nav_shape", "sig_shape"}`` of a ``.seq`` file (nav square if the frame count is)."""
        if not cls.has_file_extension(path):
            return None
        try:
            h = read_seq_header(path)
        except DataSetException:
            return None
        if h["true_image_size"] <= 0:
            return None
        offset = 8192 if h["version"] >= 5 else 1024
        count = max(0, os.path.getsize(path) - offset) // h["true_image_size"]
        if count == 0:
            return None
        return {"path": path, "nav_shape": square_nav(count), "sig_shape": (h["height"], h["width"])}
