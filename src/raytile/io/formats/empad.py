"""The ``empad`` format: EMPAD detector scans, an ``.xml`` description and a ``.raw`` file of frames.

The ``.raw`` file holds little-endian float32 frames of 130 x 128 pixels:
the 128 x 128 detector image followed by two rows (1024 bytes) of
per-frame metadata, which are skipped as a frame footer. The ``.xml``
names the ``.raw`` file (``<raw_file filename=...>``, looked up next to the
``.xml``) and the scan: ``<pix_x>``/``<pix_y>`` (EMPAD software 0.51: the
scan actually recorded, nav shape ``(pix_y, pix_x)``, which hyperspy and
rosettasciio read first), ``<scan_parameters mode="acquire">`` with
``scan_resolution_x``/``scan_resolution_y`` (nav shape ``(y, x)``), or
``<type>series</type>`` with ``<count>`` (nav shape ``(count,)``). The
first of these whose frame count fits the raw file's size is the nav shape;
as in LiberTEM 0.16, the "search" scan's size is tried last (some
acquisition software writes the search scan's frames). ``auto`` places an
``.xml`` that names a raw file; one whose raw file is missing or does not
fit is refused with the reason.

Example::

    ds = ctx.load("empad", path="scan.xml")
    ds = ctx.load("empad", path="scan.raw", nav_shape=(256, 256))
"""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from typing import Any

import numpy as np

from raytile.common.errors import DataSetException
from raytile.io.fileset import REMOTE_PARAMS, File
from raytile.io.formats.framefiles import FrameFileDataSet, FrameLayout
from raytile.io.store import ObjectStore, open_path

__all__ = ["EMPADDataSet", "read_empad_xml", "get_params_from_xml", "EMPAD_SIG_SHAPE", "EMPAD_FOOTER_BYTES"]

#: The detector image; each stored frame has two more rows of metadata.
EMPAD_SIG_SHAPE = (128, 128)
#: Bytes of the two metadata rows after each frame.
EMPAD_FOOTER_BYTES = 2 * 128 * 4
_FRAME_STRIDE = 128 * 128 * 4 + EMPAD_FOOTER_BYTES


def _scan_shape(root: ET.Element, path: str, mode: str) -> tuple[int, ...] | None:
    typ = root.find("type")
    if typ is not None and (typ.text or "").strip() == "series":
        count = root.find("count")
        if count is None or not (count.text or "").strip().isdigit():
            raise DataSetException(f"{path}: EMPAD series without a valid <count>")
        return (int(count.text or 0),)
    if typ is not None and (typ.text or "").strip() not in ("scan", ""):
        raise DataSetException(f"{path}: unknown EMPAD acquisition type {typ.text!r} (expected scan or series)")
    for elem in root.findall("scan_parameters"):
        if elem.attrib.get("mode") != mode:
            continue
        try:
            x = int((elem.findtext("scan_resolution_x") or "").strip())
            y = int((elem.findtext("scan_resolution_y") or "").strip())
        except ValueError:
            raise DataSetException(f"{path}: <scan_parameters mode={mode!r}> lacks integer "
                                   f"scan_resolution_x/scan_resolution_y") from None
        if x < 1 or y < 1:
            raise DataSetException(f"{path}: scan resolution {y} x {x} of mode {mode!r} is not positive")
        return (y, x)
    return None


def _pix_shape(root: ET.Element, path: str) -> tuple[int, ...] | None:
    """``(pix_y, pix_x)`` of a scan's XML (EMPAD 0.51 writes the recorded scan size there), else None."""
    x, y = root.findtext("pix_x"), root.findtext("pix_y")
    if x is None or y is None:
        return None
    try:
        shape = (int(y.strip()), int(x.strip()))
    except ValueError:
        raise DataSetException(f"{path}: <pix_x>/<pix_y> are not integers: {x!r}, {y!r}") from None
    if min(shape) < 1:
        raise DataSetException(f"{path}: scan size <pix_y> x <pix_x> {shape} is not positive")
    return shape


def _xml_root(path: str, store: ObjectStore | None) -> ET.Element:
    try:
        if store is not None:
            with open_path(path, store) as f:
                return ET.fromstring(f.read())
        return ET.parse(path).getroot()
    except (ET.ParseError, OSError, UnicodeDecodeError) as e:
        raise DataSetException(f"{path}: not an EMPAD .xml file: {e}") from None


def _raw_path(root: ET.Element, path: str) -> str:
    """The raw file the XML names, in the XML's folder."""
    raw = root.find("raw_file")
    if raw is None or not raw.attrib.get("filename"):
        raise DataSetException(f"{path}: not an EMPAD .xml file: no <raw_file filename=...> element")
    return os.path.join(os.path.dirname(path), os.path.basename(raw.attrib["filename"]))


def get_params_from_xml(path: str, scan_parameters_mode: str = "acquire") -> tuple[str, tuple[int, ...]]:
    """``(raw path, nav shape)`` of an EMPAD ``.xml``: a series' count, or the scan resolution of its
    ``<scan_parameters mode=scan_parameters_mode>`` ("acquire" or "search"). LiberTEM's
    ``empad.get_params_from_xml``; :func:`read_empad_xml` gives every candidate nav shape."""
    root = _xml_root(path, None)
    shape = _scan_shape(root, path, scan_parameters_mode)
    if shape is None:
        raise DataSetException(f"{path}: EMPAD .xml has no <scan_parameters mode={scan_parameters_mode!r}>")
    return _raw_path(root, path), shape


def read_empad_xml(path: str, store: ObjectStore | None = None) -> tuple[str, list[tuple[str, tuple[int, ...]]]]:
    """``(raw path, candidate nav shapes)``: ``(what, shape)`` in the order they are tried: the series
    count, or ``<pix_y>``/``<pix_x>``, the "acquire" scan and the "search" scan. ``path`` may be a
    URL of ``store`` (the raw file is then an object under the same prefix)."""
    root = _xml_root(path, store)
    raw_path = _raw_path(root, path)
    acquire = _scan_shape(root, path, "acquire")
    candidates: list[tuple[str, tuple[int, ...]]] = []
    if acquire is not None and len(acquire) == 1:  # a series
        return raw_path, [("series count", acquire)]
    pix = _pix_shape(root, path)
    if pix is not None:
        candidates.append(("<pix_y>/<pix_x>", pix))
    if acquire is not None:
        candidates.append(("acquire scan", acquire))
    search = _scan_shape(root, path, "search")
    if search is not None:
        candidates.append(("search scan", search))
    if not candidates:
        raise DataSetException(f"{path}: EMPAD .xml has no <pix_x>/<pix_y>, no <scan_parameters "
                               f"mode=\"acquire\"> nor a series count")
    return raw_path, candidates


class EMPADDataSet(FrameFileDataSet):
    """EMPAD scans: ``path`` is the ``.xml`` (nav shape read from it) or the ``.raw`` (give ``nav_shape``).

    ``sig_shape`` defaults to (128, 128) and may be any shape of 16384
    pixels. Frames are float32.
    """

    format_name = "empad"
    file_extensions = ("xml", "raw")
    params_schema = {**FrameFileDataSet.params_schema, **REMOTE_PARAMS}

    def _read_layout(self) -> FrameLayout:
        path = self._path
        low = path.lower()
        nav: tuple[int, ...] | None = self._nav_shape
        if low.endswith(".xml"):
            raw_path, candidates = read_empad_xml(path, self._store)
            size = self._check_path(raw_path)
            fits = [shape for _, shape in candidates if size == math.prod(shape) * _FRAME_STRIDE]
            if not fits:
                tried = ", ".join(f"{what} {shape}: {math.prod(shape) * _FRAME_STRIDE}" for what, shape in candidates)
                raise DataSetException(
                    f"{raw_path}: EMPAD raw file of {size} bytes fits no scan size of {path} (frames of "
                    f"{_FRAME_STRIDE} bytes; bytes needed by {tried}); truncated file or wrong .xml?"
                )
            nav = fits[0]
            count = math.prod(nav)
        elif low.endswith(".raw"):
            raw_path = path
            if nav is None:
                raise DataSetException(f"{path}: an EMPAD .raw file needs nav_shape (or give the .xml as path)")
            size = self._check_path(raw_path)
            if size % _FRAME_STRIDE:
                raise DataSetException(
                    f"{path}: file size {size} is not a multiple of the EMPAD frame size {_FRAME_STRIDE} "
                    f"(128 x 130 float32 with 2 metadata rows); not an EMPAD raw file, or truncated"
                )
            count = size // _FRAME_STRIDE
        else:
            raise DataSetException(f"{path}: the EMPAD path should be the .xml or the .raw file")
        return FrameLayout(files=[File(raw_path, 0, count, 0)], sig_shape=EMPAD_SIG_SHAPE,
                           dtype=np.dtype("<f4"), nav_shape=nav, frame_footer=EMPAD_FOOTER_BYTES,
                           info={"raw file": raw_path})

    @classmethod
    def _detect_params(cls, path: str, store: ObjectStore | None = None) -> dict[str, Any] | None:
        """``{"path", "nav_shape", "sig_shape"}`` for an EMPAD ``.xml`` whose raw file fits its scan; None
        for other files; DataSetException (the reason) for an EMPAD ``.xml`` whose raw file is missing or
        does not fit."""
        if not str(path).lower().endswith(".xml"):
            return None
        try:
            read_empad_xml(path, store)
        except DataSetException:
            return None  # not an EMPAD description
        layout = cls(path=path, storage_options=store.options if store is not None else None)._read_layout()
        return {"path": path, "nav_shape": layout.nav_shape, "sig_shape": EMPAD_SIG_SHAPE}
