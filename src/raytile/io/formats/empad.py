"""The ``empad`` format: EMPAD detector scans, an ``.xml`` description and a ``.raw`` file of frames.

The ``.raw`` file holds little-endian float32 frames of 130 x 128 pixels:
the 128 x 128 detector image followed by two rows (1024 bytes) of
per-frame metadata, which are skipped as a frame footer. The ``.xml``
names the ``.raw`` file (``<raw_file filename=...>``, looked up next to the
``.xml``) and the scan: ``<scan_parameters mode="acquire">`` with
``scan_resolution_x``/``scan_resolution_y`` (nav shape ``(y, x)``), or
``<type>series</type>`` with ``<count>`` (nav shape ``(count,)``). As in
LiberTEM 0.16, when the raw file's size does not match the "acquire" scan,
the "search" scan's size is tried (some acquisition software writes the
search scan's frames).

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

__all__ = ["EMPADDataSet", "read_empad_xml", "EMPAD_SIG_SHAPE", "EMPAD_FOOTER_BYTES"]

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


def read_empad_xml(path: str, store: ObjectStore | None = None) -> tuple[str, tuple[int, ...], tuple[int, ...] | None]:
    """``(raw path, nav shape of the "acquire" scan or series, nav shape of the "search" scan or None)``;
    ``path`` may be a URL of ``store`` (the raw file is then an object under the same prefix)."""
    try:
        if store is not None:
            with open_path(path, store) as f:
                root = ET.fromstring(f.read())
        else:
            root = ET.parse(path).getroot()
    except (ET.ParseError, OSError, UnicodeDecodeError) as e:
        raise DataSetException(f"{path}: not an EMPAD .xml file: {e}") from None
    raw = root.find("raw_file")
    if raw is None or not raw.attrib.get("filename"):
        raise DataSetException(f"{path}: not an EMPAD .xml file: no <raw_file filename=...> element")
    raw_path = os.path.join(os.path.dirname(path), os.path.basename(raw.attrib["filename"]))
    acquire = _scan_shape(root, path, "acquire")
    if acquire is None:
        raise DataSetException(f"{path}: EMPAD .xml has no <scan_parameters mode=\"acquire\"> nor a series count")
    search = _scan_shape(root, path, "search") if len(acquire) == 2 else None
    return raw_path, acquire, search


class EMPADDataSet(FrameFileDataSet):
    """EMPAD scans: ``path`` is the ``.xml`` (nav shape read from it) or the ``.raw`` (give ``nav_shape``).

    ``sig_shape`` defaults to (128, 128) and may be any shape of 16384
    pixels. Frames are float32.
    """

    format_name = "empad"
    params_schema = {**FrameFileDataSet.params_schema, **REMOTE_PARAMS}

    def _read_layout(self) -> FrameLayout:
        path = self._path
        low = path.lower()
        nav: tuple[int, ...] | None = self._nav_shape
        if low.endswith(".xml"):
            raw_path, acquire, search = read_empad_xml(path, self._store)
            size = self._check_path(raw_path)
            nav = acquire
            if size != math.prod(acquire) * _FRAME_STRIDE and search is not None \
                    and size == math.prod(search) * _FRAME_STRIDE:
                nav = search
            elif size != math.prod(acquire) * _FRAME_STRIDE:
                alt = "" if search is None else f" (or {math.prod(search) * _FRAME_STRIDE} for the search scan {search})"
                raise DataSetException(
                    f"{raw_path}: EMPAD raw file of {size} bytes does not match the scan {acquire} of {path}: "
                    f"{math.prod(acquire)} frames of {_FRAME_STRIDE} bytes need {math.prod(acquire) * _FRAME_STRIDE}"
                    f"{alt}; truncated file or wrong .xml?"
                )
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
    def detect_params(cls, path: str) -> dict[str, Any] | None:
        """``{"path", "nav_shape", "sig_shape"}`` for an EMPAD ``.xml`` whose raw file fits its scan, else None."""
        probe = cls._probe(path, (".xml",))
        if probe is None:
            return None
        return {"path": path, "nav_shape": probe[1].nav_shape, "sig_shape": EMPAD_SIG_SHAPE}
