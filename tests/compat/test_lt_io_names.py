"""Names of ``libertem.io.dataset`` and its format modules at their ported paths (issue 36), each against
LiberTEM 0.16's own result on the same input.

They are what stopped LiberTEM's own test modules at import (test_base, test_detect, the detector
formats' modules); imported here as the ported code imports them.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")

import libertem.io.dataset as lt_dataset  # noqa: E402
from libertem.common import Shape as LtShape, Slice as LtSlice  # noqa: E402
from libertem.executor.inline import InlineJobExecutor as LtInline  # noqa: E402
from libertem.io.dataset.base import Partition as LtPartition, _roi_to_nd_indices as lt_roi_to_nd  # noqa: E402

from raytile.common import Shape, Slice  # noqa: E402
from raytile.common.errors import DataSetException  # noqa: E402
from raytile.io.dataset import detect, get_extensions  # noqa: E402
from raytile.io.dataset.base import Partition, _roi_to_nd_indices  # noqa: E402


def test_get_extensions_holds_libertems():
    """Every extension LiberTEM's formats read is one of raytile's (raytile reads a few more: mrcs, map)."""
    lt = lt_dataset.get_extensions()
    ours = get_extensions()
    assert lt <= ours
    assert ours - lt <= {"mrcs", "map"}


def test_detect_as_libertem(tmp_path):
    """``detect(path, executor)`` gives the format LiberTEM's gives, the path among the parameters; a file no
    format places gives ``{}`` in both."""
    path = str(tmp_path / "scan.npy")
    np.save(path, np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5))
    lt = lt_dataset.detect(path, executor=LtInline())
    ours = detect(path, executor=None)
    assert ours["type"] == lt["type"] == "npy"
    assert ours["parameters"]["path"] == lt["parameters"]["path"] == path
    assert set(ours) == set(lt)
    other = tmp_path / "notes.txt"
    other.write_text("no detector wrote this")
    assert detect(str(other)) == lt_dataset.detect(str(other), executor=LtInline()) == {}
    missing = str(tmp_path / "gone.npy")
    assert detect(missing) == lt_dataset.detect(missing, executor=LtInline()) == {}


@pytest.mark.parametrize("seed", range(5))
def test_roi_to_nd_indices_as_libertem(seed):
    rng = np.random.default_rng(seed)
    nav = (7, 9)
    roi = rng.random(nav) < 0.4
    start = int(rng.integers(0, 5))
    rows = int(rng.integers(1, nav[0] - start + 1))
    ours = list(_roi_to_nd_indices(roi, Slice(origin=(start, 0, 0, 0), shape=Shape((rows, nav[1], 4, 4), sig_dims=2))))
    lt = list(lt_roi_to_nd(roi, LtSlice(origin=(start, 0, 0, 0), shape=LtShape((rows, nav[1], 4, 4), sig_dims=2))))
    assert ours == lt
    assert ours == [tuple(i) for i in np.argwhere(roi) if start <= i[0] < start + rows]


@pytest.mark.parametrize("frames,parts,sync", [(100, 7, 0), (333, 40, -5), (17, 17, 3), (16, 1, 0), (12, 0, 2)])
def test_make_slices_as_libertem(frames, parts, sync):
    ours = list(Partition.make_slices(Shape((frames, 8, 8), sig_dims=2), parts, sync_offset=sync))
    lt = list(LtPartition.make_slices(LtShape((frames, 8, 8), sig_dims=2), parts, sync_offset=sync))
    assert [(tuple(s.origin), tuple(s.shape), a, b) for s, a, b in ours] == \
        [(tuple(s.origin), tuple(s.shape), a, b) for s, a, b in lt]


def test_make_slices_warns_as_libertem_when_partitions_outnumber_frames():
    with pytest.warns(RuntimeWarning):
        lt = list(LtPartition.make_slices(LtShape((3, 8, 8), sig_dims=2), 5))
    with pytest.warns(RuntimeWarning):
        ours = list(Partition.make_slices(Shape((3, 8, 8), sig_dims=2), 5))
    assert [(a, b) for _, a, b in ours] == [(a, b) for _, a, b in lt] == [(0, 1), (1, 2), (2, 3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(Partition.make_slices(Shape((3, 8, 8), sig_dims=2), 3))


_BAD_PIXELS = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Configuration><BadPixels>
  <BadPixelMap Rows="4096" Columns="4096">
    <Defect Rows="2311-2312"/><Defect Row="1600"/><Defect Columns="1610-1612"/><Defect Column="2300"/>
    <Defect Row="1700" Column="1750"/>
  </BadPixelMap>
  <BadPixelMap Binning="2" Rows="2048" Columns="2048">
    <Defect Rows="1155-1156"/><Defect Row="800"/><Defect Columns="768-770"/><Defect Column="1000"/>
    <Defect Row="1200" Column="1100"/>
  </BadPixelMap>
</BadPixels></Configuration>"""


@pytest.mark.parametrize("binning,size,offset", [(1, 1024, 1536), (2, 4096, 0), (2, 1024, 1536), (1, 4096, 0)])
def test_seq_bad_pixel_map_as_libertem(binning, size, offset):
    """The SEQ bad pixel map of the sensor window, as LiberTEM's ``_load_xml_from_string`` makes it."""
    from libertem.io.dataset.seq import _load_xml_from_string as lt_load

    from raytile.io.dataset.seq import _load_xml_from_string

    meta = {"UnbinnedFrameSizeX": size, "UnbinnedFrameSizeY": size, "OffsetX": offset, "OffsetY": offset,
            "HardwareBinning": binning}
    ours = _load_xml_from_string(xml=_BAD_PIXELS, metadata=meta).todense()
    theirs = lt_load(xml=_BAD_PIXELS, metadata=meta).todense()
    assert ours.shape == (size // binning, size // binning)
    assert np.array_equal(ours, theirs)
    assert ours.any()


_NAUGHTY = "!\"\\§$&[%)(]=?`´';,.# ~ * | < ** > x"


def _touch(d, *names):
    for n in names:
        (d / n).touch()
    return [str(d / n) for n in names]


def test_get_filenames_as_libertem(tmp_path):
    """The detector formats' ``get_filenames`` find the same files as LiberTEM's, names with glob characters
    included, and ``disable_glob`` gives the path alone."""
    from libertem.io.dataset import frms6 as lt_frms6, k2is as lt_k2is, mib as lt_mib, tvips as lt_tvips

    from raytile.io.dataset import frms6, k2is, mib, tvips

    d = tmp_path / _NAUGHTY
    d.mkdir()
    _touch(d, _NAUGHTY + ".hdr", "other1.mib", _NAUGHTY + "_.gtg", "other_1.bin", "other_000.frms6")
    mibs = _touch(d, _NAUGHTY + "1.mib", _NAUGHTY + "2.mib")
    bins = _touch(d, _NAUGHTY + "_1.bin", _NAUGHTY + "_2.bin")
    frms = _touch(d, _NAUGHTY + "_000.frms6", _NAUGHTY + "_001.frms6")
    tvs = _touch(d, _NAUGHTY + "_001.tvips", _NAUGHTY + "_000.tvips", _NAUGHTY + "_002.tvips")
    for ours, theirs, paths, expected in (
        (mib.get_filenames, lt_mib.get_filenames, (d / (_NAUGHTY + ".hdr"), mibs[0]), mibs),
        (k2is.get_filenames, lt_k2is.get_filenames, (d / (_NAUGHTY + "_.gtg"), bins[1]), bins),
        (frms6.get_filenames, lt_frms6.get_filenames, (str(d / (_NAUGHTY + ".hdr")), frms[1]), frms),
    ):
        for p in paths:
            assert sorted(ours(p)) == sorted(theirs(p)) == sorted(expected)
        assert ours(mibs[0], disable_glob=True) == theirs(mibs[0], disable_glob=True) == [mibs[0]]
    assert tvips.get_filenames(tvs[0]) == lt_tvips.get_filenames(tvs[0]) == sorted(tvs)
    with pytest.raises(lt_dataset.DataSetException):
        lt_mib.get_filenames(str(d / "x.raw"))
    with pytest.raises(DataSetException, match="x.raw"):
        mib.get_filenames(str(d / "x.raw"))


@pytest.mark.parametrize("kind", ["scan", "series", "search"])
def test_empad_get_params_from_xml_as_libertem(tmp_path, kind):
    from libertem.io.dataset.empad import get_params_from_xml as lt_params

    from raytile.io.dataset.empad import get_params_from_xml

    typ = "series" if kind == "series" else "scan"
    xml = (f'<root><raw_file filename="C:/acq/scan_x4_y5.raw"/><type>{typ}</type><count>37</count>'
           '<scan_parameters mode="acquire"><scan_resolution_x>4</scan_resolution_x>'
           '<scan_resolution_y>5</scan_resolution_y></scan_parameters>'
           '<scan_parameters mode="search"><scan_resolution_x>6</scan_resolution_x>'
           '<scan_resolution_y>7</scan_resolution_y></scan_parameters></root>')
    path = tmp_path / "acq.xml"
    path.write_text(xml)
    mode = "search" if kind == "search" else "acquire"
    ours = get_params_from_xml(str(path), scan_parameters_mode=mode)
    assert ours == lt_params(str(path), scan_parameters_mode=mode)
    assert ours[0] == str(tmp_path / "scan_x4_y5.raw")


def test_frms6_map_y_as_libertem():
    from libertem.io.dataset.frms6 import _map_y as lt_map_y

    from raytile.io.dataset.frms6 import _map_y

    for binning in (1, 2, 4):
        for y in range(264 // binning):
            assert _map_y(y=y, xs=264, binning=binning, num_rows=264) == \
                lt_map_y(y=y, xs=264, binning=binning, num_rows=264)


def test_k2is_decode_uint12_le_as_libertem():
    from libertem.io.dataset.k2is import decode_uint12_le as lt_decode

    from raytile.io.dataset.k2is import decode_uint12_le

    packed = np.random.default_rng(3).integers(0, 256, 3 * 500, dtype=np.uint8)
    ours, theirs = np.zeros(1000, np.uint16), np.zeros(1000, np.uint16)
    decode_uint12_le(inp=packed, out=ours)
    lt_decode(inp=packed, out=theirs)
    assert np.array_equal(ours, theirs)
    values = ours.astype(np.uint32)
    assert np.array_equal(packed[0::3], (values[0::2] & 0xFF).astype(np.uint8))  # low byte of the first pixel
    longer = np.zeros(1200, np.uint16)  # LiberTEM decodes as many pixels as the input holds
    decode_uint12_le(inp=packed, out=longer)
    assert np.array_equal(longer[:1000], ours) and not longer[1000:].any()
