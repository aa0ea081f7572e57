"""EMPAD, MRC, BLO, DM, SEQ, SER and TVIPS files written from their documented layouts, read back exactly.

Every format: exact integer sums, ROI, sync_offset, several partitions and
tilings on every IO backend against numpy on the written frames; the same
file through LiberTEM 0.16's own reader; hypothesis round trips on tiny
shapes; bad files (truncated, wrong nav shape, another format's file,
corrupt header) end in a DataSetException naming the path.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import raytile as rt
from raytile.common.errors import DataSetException
from raytile.io.formats import get_format
from raytile.io.testing.blo import write_blo
from raytile.io.testing.dm import write_dm
from raytile.io.testing.empad import write_empad
from raytile.io.testing.mrc import write_mrc
from raytile.io.testing.seq import write_seq, write_seq_bad_pixels
from raytile.io.testing.ser import write_ser
from raytile.io.testing.tvips import write_tvips
from raytile.udf import SumSigUDF, SumUDF
from test_io_formats import RecordTiles  # copies every tile with its slice

BACKENDS = ["mmap", "buffered", "direct"]


@dataclass
class Written:
    """A file written by a writer of raytile.io.testing: how to load it, and the frames it holds."""

    name: str
    params: dict
    frames: np.ndarray  # nav x sig, as the reader should return them
    path: str = ""


def _empad(tmp, nav, rng, dtype=None):
    frames = rng.integers(0, 500, nav + (128, 128)).astype(np.float32)  # float32 sums stay exact
    xml, _ = write_empad(tmp, frames)
    return Written("empad", {"path": xml}, frames, xml)


def _mrc(tmp, nav, rng, dtype="int16", sig=(9, 6)):
    frames = rng.integers(-300, 3000, nav + sig).astype(dtype)
    p = write_mrc(os.path.join(tmp, "a.mrc"), frames)
    return Written("mrc", {"path": p, "nav_shape": nav}, frames, p)


def _blo(tmp, nav, rng, dtype="uint16", sig=(8, 8)):
    frames = rng.integers(0, 250, nav + sig).astype(dtype)
    p = write_blo(os.path.join(tmp, "a.blo"), frames, magic=259 if np.dtype(dtype).itemsize > 1 else 258)
    return Written("blo", {"path": p}, frames, p)


def _dm4(tmp, nav, rng, dtype="uint16", sig=(7, 5), version=4):
    """A single 4D DM4 file (C-ordered: 'Data Order Swapped')."""
    frames = rng.integers(0, 3000, nav + sig).astype(dtype)
    p = write_dm(os.path.join(tmp, f"a.dm{version}"), frames, version=version, data_order_swapped=True)
    return Written("dm", {"path": p}, frames, p)


def _dm3(tmp, nav, rng, dtype="int16", sig=(6, 4)):
    """A 3D stack in a DM3 file, given a 2D nav_shape."""
    frames = rng.integers(-500, 3000, nav + sig).astype(dtype)
    p = write_dm(os.path.join(tmp, "a.dm3"), frames.reshape((-1,) + sig), version=3)
    return Written("dm", {"path": p, "nav_shape": nav}, frames, p)


def _dm_stack(tmp, nav, rng, dtype="float32", sig=(5, 6)):
    """A stack of DM4 files of one image each (with and without thumbnails: data offsets differ)."""
    frames = rng.integers(0, 3000, nav + sig).astype(dtype)
    paths = [write_dm(os.path.join(tmp, f"s{i:03d}.dm4"), fr, thumbnail=bool(i % 2))
             for i, fr in enumerate(frames.reshape((-1,) + sig))]
    return Written("dm", {"files": paths, "nav_shape": nav}, frames, paths[-1])


def _seq(tmp, nav, rng, dtype="uint16", sig=(8, 6), version=5):
    frames = rng.integers(0, 4000, nav + sig).astype(dtype)
    p = write_seq(os.path.join(tmp, "a.seq"), frames, version=version, footer_bytes=8 * int(rng.integers(1, 4)))
    return Written("seq", {"path": p, "nav_shape": nav}, frames, p)


def _ser(tmp, nav, rng, dtype="uint16", sig=(7, 6), version=0x0220, tags_at_end=False):
    frames = rng.integers(0, 4000, nav + sig).astype(dtype)
    p = write_ser(os.path.join(tmp, "a.ser"), frames, version=version, tags_at_end=tags_at_end)
    return Written("ser", {"path": p}, frames, p)


def _tvips(tmp, nav, rng, dtype="uint16", sig=(6, 7), frames_per_file=4, version=2):
    """A series of several files (no scan positions: the nav shape is given)."""
    frames = rng.integers(0, 4000, nav + sig).astype(dtype)
    paths = write_tvips(tmp, frames.reshape((-1,) + sig), frames_per_file=frames_per_file, version=version)
    return Written("tvips", {"path": paths[0], "nav_shape": nav}, frames, paths[-1])


MAKERS: dict[str, Callable] = {"empad": _empad, "mrc": _mrc, "blo": _blo, "dm4": _dm4, "dm3": _dm3,
                               "dm_stack": _dm_stack, "seq": _seq, "ser": _ser, "tvips": _tvips}
#: One maker per format name, for the tests that give one format another's file.
FORMAT_MAKERS = {"empad": _empad, "mrc": _mrc, "blo": _blo, "dm": _dm4, "seq": _seq, "ser": _ser,
                 "tvips": _tvips}
#: Formats whose nav_shape is required (LiberTEM's too).
NAV_REQUIRED = {"seq"}


def _check(ctx, ds, frames, roi=None, tilings=((None, None), (3, 100))):
    """Sum (exact for integers), SumSig and every tile against numpy, for several tilings.

    Frames of NaN in ``frames``: nav positions the data has no frame for (a ``sync_offset``), which no
    UDF may see; their SumSig is 0 (the buffer's start), as in LiberTEM."""
    n_sig = len(ds.shape.sig)
    flat = frames.reshape((-1,) + frames.shape[-n_sig:]).astype(np.float64)
    sel = flat if roi is None else flat[roi.reshape(-1)]
    for depth, total in tilings:
        RecordTiles.seen = []
        res = ctx.run_udf(dataset=ds, udf=[SumUDF(dtype="float64"), SumSigUDF(), RecordTiles(depth, total)], roi=roi)
        np.testing.assert_array_equal(res[0]["intensity"].data, np.nan_to_num(sel).sum(axis=0))
        got_sig = res[1]["intensity"].data.reshape(-1)
        want_sig = np.nan_to_num(flat).reshape(len(flat), -1).sum(axis=1)
        mask = np.ones(len(flat), bool) if roi is None else roi.reshape(-1)
        np.testing.assert_array_equal(got_sig[mask], want_sig[mask])
        if RecordTiles.seen:  # tiles seen in this process (inline executor; Ray's are in its workers)
            got = np.full_like(sel, np.nan)
            for sl, tile in RecordTiles.seen:
                got[sl.get()] = tile
            np.testing.assert_array_equal(got, sel)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", sorted(MAKERS))
def test_exact_frames_roi_partitions_backends(inline_ctx, tmp_path, rng, fmt, backend):
    w = MAKERS[fmt](str(tmp_path), (3, 5), rng)
    ds = inline_ctx.load(w.name, **w.params, num_partitions=3, io_backend=backend)
    assert ds.shape.to_tuple() == w.frames.shape and len(ds.get_partitions()) == 3
    assert ds.dtype == w.frames.dtype
    roi = rng.random((3, 5)) > 0.5
    roi[0, 0] = True
    _check(inline_ctx, ds, w.frames)
    _check(inline_ctx, ds, w.frames, roi=roi, tilings=((2, None),))


@pytest.mark.parametrize("fmt", sorted(MAKERS))
def test_sync_offset_and_reshape(inline_ctx, tmp_path, rng, fmt):
    w = MAKERS[fmt](str(tmp_path), (3, 4), rng)
    flat = w.frames.reshape((12,) + w.frames.shape[2:])
    sig = w.frames.shape[2:]
    base = {k: v for k, v in w.params.items() if k != "nav_shape"}
    for offset in (2, -3):
        ds = inline_ctx.load(w.name, **base, nav_shape=(2, 6), sync_offset=offset, num_partitions=2)
        want = np.full(flat.shape, np.nan)  # positions without a frame: not run (LiberTEM's behaviour)
        if offset > 0:
            want[:-offset] = flat[offset:]
        else:
            want[-offset:] = flat[:offset]
        assert ds.shape.to_tuple() == (2, 6) + sig
        _check(inline_ctx, ds, want.reshape((2, 6) + sig), tilings=((None, None),))
    # a sig_shape of as many pixels, a nav_shape shorter than the file (a warning)
    new_sig = (sig[0] * sig[1],)
    with pytest.warns(UserWarning, match="reads only the first"):
        ds = inline_ctx.load(w.name, **base, nav_shape=(5,), sig_shape=new_sig)
    _check(inline_ctx, ds, flat[:5].reshape((5,) + new_sig), tilings=((None, None),))


@pytest.mark.ray
def test_every_format_on_both_executors(ctx, tmp_path, rng):
    """The formats on the inline executor and on Ray (initialised on a worker, partitions read there)."""
    for fmt, make in sorted(MAKERS.items()):
        d = tmp_path / fmt
        d.mkdir()
        w = make(str(d), (2, 3), rng)
        ds = ctx.load(w.name, **w.params, num_partitions=2)
        roi = np.array([[True, False, True], [False, True, True]])
        _check(ctx, ds, w.frames, roi=roi, tilings=((None, None),))


@pytest.mark.parametrize("fmt", sorted(MAKERS))
def test_same_frames_as_libertem(inline_ctx, tmp_path, rng, fmt):
    """LiberTEM 0.16's reader of the format gives the same shape, dtype and frames on the same file."""
    lt_api = pytest.importorskip("libertem.api")
    from libertem.udf.sum import SumUDF as LTSumUDF
    from libertem.udf.sumsigudf import SumSigUDF as LTSumSigUDF

    # (LiberTEM 0.16 reads a TVIPS series without scan positions only from one file)
    w = MAKERS[fmt](str(tmp_path), (4, 4), rng, **({"frames_per_file": 100} if fmt == "tvips" else {}))
    params = {k: v for k, v in w.params.items() if k != "nav_shape" or w.name in NAV_REQUIRED}
    lt_ctx = lt_api.Context.make_with("inline")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lt_ds = lt_ctx.load(w.name, **params)
        lt_res = lt_ctx.run_udf(dataset=lt_ds, udf=[LTSumUDF(), LTSumSigUDF()])
    ds = inline_ctx.load(w.name, **params)
    res = inline_ctx.run_udf(dataset=ds, udf=[SumUDF(), SumSigUDF()])
    assert ds.shape.to_tuple() == tuple(lt_ds.shape)
    assert ds.dtype == np.dtype(lt_ds.dtype)
    np.testing.assert_array_equal(res[0]["intensity"].data, lt_res[0]["intensity"].data)
    np.testing.assert_array_equal(res[1]["intensity"].data, lt_res[1]["intensity"].data)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(["mrc", "blo", "dm3", "dm4", "seq", "ser", "tvips"]), n=st.integers(1, 7), h=st.integers(1, 5), w=st.integers(1, 5),
       dtype=st.sampled_from(["uint8", "int16", "uint16", "float32"]), seed=st.integers(0, 2**31))
def test_round_trip_tiny(inline_ctx, tmp_path_factory, fmt, n, h, w, dtype, seed):
    rng = np.random.default_rng(seed)
    tmp = str(tmp_path_factory.mktemp(fmt))
    if fmt == "blo":
        dtype = "uint16" if np.dtype(dtype).itemsize > 1 else "uint8"
        written = _blo(tmp, (1, n), rng, dtype=dtype, sig=(h, h))
    elif fmt == "mrc":
        dtype = "int8" if dtype == "uint8" else dtype
        written = _mrc(tmp, (n,), rng, dtype=dtype, sig=(h, w))
    elif fmt == "seq":
        dtype = {"int16": "uint16", "float32": "uint32"}.get(dtype, dtype)
        written = _seq(tmp, (n,), rng, dtype=dtype, sig=(h, w), version=4 + seed % 2)
    elif fmt == "ser":
        written = _ser(tmp, (1, n), rng, dtype=dtype, sig=(h, w), version=(0x0210, 0x0220)[seed % 2],
                       tags_at_end=bool(seed % 3))
    elif fmt == "tvips":
        dtype = "uint8" if np.dtype(dtype).itemsize == 1 else "uint16"
        written = _tvips(tmp, (n,), rng, dtype=dtype, sig=(h, w), frames_per_file=1 + seed % 4, version=1 + seed % 2)
    elif fmt == "dm3":
        written = _dm3(tmp, (n,), rng, dtype=dtype, sig=(h, w))
    else:
        written = _dm4(tmp, (1, n), rng, dtype=dtype, sig=(h, w), version=4 if seed % 2 else 3)
    ds = inline_ctx.load(written.name, **written.params, num_partitions=min(n, 3))
    assert ds.shape.to_tuple() == written.frames.shape
    _check(inline_ctx, ds, written.frames, tilings=((None, None), (1, 7)))


# -- bad files ---------------------------------------------------------------------------------------------


def _truncate(path, nbytes):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - nbytes)


@pytest.mark.parametrize("fmt", sorted(MAKERS))
def test_truncated_file(inline_ctx, tmp_path, rng, fmt):
    w = MAKERS[fmt](str(tmp_path), (2, 3), rng)
    data_path = w.path[:-4] + ".raw" if fmt == "empad" else w.path
    _truncate(data_path, 300 if w.name == "dm" else 7)  # DM: into the tag tree after the data
    with pytest.raises(DataSetException, match=r"(too short|does not match|truncated)") as e:
        inline_ctx.load(w.name, **w.params)
    assert os.path.basename(data_path) in str(e.value)


@pytest.mark.parametrize("fmt", sorted(MAKERS))
def test_wrong_nav_or_sig_shape(inline_ctx, tmp_path, rng, fmt):
    w = MAKERS[fmt](str(tmp_path), (2, 3), rng)
    base = {k: v for k, v in w.params.items() if k != "nav_shape"}
    with pytest.raises(DataSetException, match=r"nav_shape \(4, 3\) needs 12") as e:
        inline_ctx.load(w.name, **base, nav_shape=(4, 3))
    assert str(tmp_path) in str(e.value)
    with pytest.raises(DataSetException, match="sig_shape"):
        inline_ctx.load(w.name, **base, nav_shape=(2, 3), sig_shape=(5, 5))
    with pytest.raises(DataSetException, match="sync_offset 6 reads no frame"):
        inline_ctx.load(w.name, **base, nav_shape=(2, 3), sync_offset=6)


@pytest.mark.parametrize("fmt", sorted(FORMAT_MAKERS))
def test_file_of_another_format(inline_ctx, tmp_path, rng, fmt):
    """Each reader refuses the other formats' files (and a text file) with the path in the message."""
    others = []
    for other, make in sorted(FORMAT_MAKERS.items()):
        if other != fmt:
            d = tmp_path / other
            d.mkdir()
            others.append(make(str(d), (2, 3), rng).path)
    junk = tmp_path / ("junk" + {"empad": ".xml", "mrc": ".mrc", "blo": ".blo", "dm": ".dm4", "seq": ".seq", "ser": ".ser", "tvips": ".tvips"}[fmt])
    junk.write_bytes(b"hello, this is not a detector file\n" * 3)
    for p in others + [str(junk)]:
        with pytest.raises(DataSetException) as e:
            inline_ctx.load(fmt, path=p, nav_shape=(2, 3))
        assert os.path.basename(p) in str(e.value), str(e.value)


def test_corrupt_headers(inline_ctx, tmp_path, rng):
    w = _mrc(str(tmp_path), (2, 3), rng)
    with open(w.path, "r+b") as f:
        f.seek(12)
        f.write(np.int32(4).tobytes())  # MODE 4: complex
    with pytest.raises(DataSetException, match="MRC mode 4"):
        inline_ctx.load("mrc", path=w.path)
    with open(w.path, "r+b") as f:
        f.seek(0)
        f.write(np.int32(-5).tobytes())  # NX < 0
    with pytest.raises(DataSetException, match="NX=-5"):
        inline_ctx.load("mrc", path=w.path)
    b = _blo(str(tmp_path), (2, 3), rng)
    with open(b.path, "r+b") as f:
        f.seek(6)
        f.write(b"\x00\x01")
    with pytest.raises(DataSetException, match="magic number 0x100"):
        inline_ctx.load("blo", path=b.path)
    e = _empad(str(tmp_path), (2, 3), rng)
    with open(e.path, "w") as f:
        f.write("<root><raw_file filename='scan.raw'/><scan_parameters mode='acquire'>"
                "<scan_resolution_x>three</scan_resolution_x></scan_parameters></root>")
    with pytest.raises(DataSetException, match="scan_resolution_x"):
        inline_ctx.load("empad", path=e.path)
    with open(e.path, "w") as f:
        f.write("<root><raw_file")
    with pytest.raises(DataSetException, match="not an EMPAD .xml"):
        inline_ctx.load("empad", path=e.path)


def test_detect_params(tmp_path, rng):
    """Each format recognises its own files (extension and header) and states what the file holds."""
    written = {key: make(str(tmp_path / key), (4, 4), rng) for key, make in sorted(MAKERS.items())
               if (tmp_path / key).mkdir() is None}
    for key, w in written.items():
        cls = get_format(w.name)
        found = cls.detect_params(w.path)
        assert found, key
        params = found["parameters"]
        assert params["path"] == w.path, key
        nav = {"dm3": (16,), "dm_stack": (1,), "tvips": (16,)}.get(key, (4, 4))
        assert tuple(params["nav_shape"]) == nav and tuple(params["sig_shape"]) == w.frames.shape[2:], key
        for other, ow in written.items():
            if ow.name != w.name:
                assert cls.detect_params(ow.path) is False, (key, other)


def test_empad_series_search_scan_and_raw_path(inline_ctx, tmp_path, rng):
    frames = rng.integers(0, 100, (6, 128, 128)).astype(np.float32)
    xml, raw = write_empad(str(tmp_path), frames, series=True)
    ds = inline_ctx.load("empad", path=xml)
    assert ds.shape.to_tuple() == (6, 128, 128)
    _check(inline_ctx, ds, frames, tilings=((None, None),))
    # the raw file holds the "search" scan's frames (LiberTEM #1617): nav from the search parameters
    xml, raw = write_empad(str(tmp_path), frames, nav_shape=(4, 4), search_shape=(2, 3), name="s")
    ds = inline_ctx.load("empad", path=xml)
    assert ds.shape.to_tuple() == (2, 3, 128, 128)
    ds = inline_ctx.load("empad", path=raw, nav_shape=(3, 2))
    _check(inline_ctx, ds, frames.reshape(3, 2, 128, 128), tilings=((None, None),))
    with pytest.raises(DataSetException, match="needs nav_shape"):
        inline_ctx.load("empad", path=raw)


def test_mrc_big_endian_extended_header_no_stamp(inline_ctx, tmp_path, rng):
    frames = rng.normal(0, 100, (7, 5, 3)).astype(np.float32)
    for i, (order, stamp) in enumerate([(">", True), (">", False), ("<", False)]):
        p = write_mrc(str(tmp_path / f"b{i}.mrc"), frames, byteorder=order, extended_header=b"\x01" * 96,
                      machine_stamp=stamp)
        ds = inline_ctx.load("mrc", path=p, num_partitions=2)
        assert ds.shape.to_tuple() == (7, 5, 3) and ds.dtype == np.float32
        res = inline_ctx.run_udf(dataset=ds, udf=SumSigUDF())
        np.testing.assert_allclose(res["intensity"].data, frames.sum(axis=(1, 2)), rtol=1e-5)


def test_blo_big_endian(inline_ctx, tmp_path, rng):
    """``endianess=">"`` reads header and pixels big-endian (LiberTEM 0.16 reads such pixels unswapped)."""
    frames = rng.integers(0, 60000, (2, 3, 6, 6)).astype(np.uint16)
    p = write_blo(str(tmp_path / "b.blo"), frames, byteorder=">")
    ds = inline_ctx.load("blo", path=p, endianess=">", num_partitions=2, io_backend="buffered")
    _check(inline_ctx, ds, frames, tilings=((None, None), (2, 10)))
    with pytest.raises(DataSetException, match="magic number"):
        inline_ctx.load("blo", path=p)
    assert math.prod(ds.shape.nav) == 6


def test_dm_order_index_thumbnail_and_stack_checks(inline_ctx, tmp_path, rng):
    frames = rng.integers(0, 1000, (2, 3, 4, 5)).astype(np.uint16)
    p = write_dm(str(tmp_path / "f.dm4"), frames)  # 4D without 'Data Order Swapped': not known C-ordered
    with pytest.raises(DataSetException, match="force_c_order=True"):
        inline_ctx.load("dm", path=p)
    ds = inline_ctx.load("dm", path=p, force_c_order=True)
    _check(inline_ctx, ds, frames, tilings=((None, None),))
    ds = inline_ctx.load("dm", path=p, force_c_order=True, dataset_index=1)
    assert ds.shape.to_tuple() == frames.shape
    with pytest.raises(DataSetException, match="DataType 23"):  # image 0 is the RGBA thumbnail
        inline_ctx.load("dm", path=p, dataset_index=0)
    with pytest.raises(DataSetException, match="dataset_index 5 not found"):
        inline_ctx.load("dm", path=p, dataset_index=5)
    with pytest.raises(rt.common.errors.ConfigValidationError, match="either 'path'"):
        inline_ctx.load("dm", path=p, files=[p])
    # stacks: frames must agree; same_offset reads the first file's header only
    a = write_dm(str(tmp_path / "a.dm3"), frames[0, 0], version=3)
    b = write_dm(str(tmp_path / "b.dm3"), frames[0, :2].astype(np.float32), version=3)
    with pytest.raises(DataSetException, match="differ from the first file"):
        inline_ctx.load("dm", files=[a, b])
    paths = [write_dm(str(tmp_path / f"e{i}.dm3"), fr, version=3) for i, fr in enumerate(frames.reshape(6, 4, 5))]
    ds = inline_ctx.load("dm", files=paths, same_offset=True, nav_shape=(2, 3), num_partitions=2)
    _check(inline_ctx, ds, frames, tilings=((None, None),))
    ds = inline_ctx.load("dm", files=str(tmp_path / "e*.dm3"), nav_shape=(2, 3))
    _check(inline_ctx, ds, frames, tilings=((None, None),))
    ds = inline_ctx.load("dm", path=paths, nav_shape=(2, 3))  # a list of files is a stack (LiberTEM: DMDataSet([...]))
    _check(inline_ctx, ds, frames, tilings=((None, None),))


def test_dm_corrupt_tag_trees_fail_cleanly(inline_ctx, tmp_path, rng):
    """Bytes of the tag structure overwritten at random: a DataSetException or a correct read, never a hang."""
    frames = rng.integers(0, 1000, (6, 4, 5)).astype(np.uint16)
    for version in (3, 4):
        good = Path(write_dm(str(tmp_path / f"g.dm{version}"), frames, version=version)).read_bytes()
        p = tmp_path / f"bad.dm{version}"
        for trial in range(60):
            data = bytearray(good)
            at = int(rng.integers(0, len(data)))
            data[at:at + 4] = rng.integers(0, 256, 4).astype(np.uint8).tobytes()[:len(data[at:at + 4])]
            p.write_bytes(bytes(data))
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ds = inline_ctx.load("dm", path=str(p))
                    inline_ctx.run_udf(dataset=ds, udf=SumUDF())
            except DataSetException as e:
                assert str(p) in str(e)
        p.write_bytes(good[:4] + b"\x00\x00\x00\x07" + good[8:])
        if version == 4:  # a root tag count far beyond the file
            bad = bytearray(good)
            bad[18:26] = (2**40).to_bytes(8, "big")
            p.write_bytes(bytes(bad))
            with pytest.raises(DataSetException, match="does not fit"):
                inline_ctx.load("dm", path=str(p))
    p.write_bytes(b"\x00\x00\x00\x05" + good[4:])
    with pytest.raises(DataSetException, match="version word 5"):
        inline_ctx.load("dm", path=str(p))


def test_seq_corrections_found_next_to_the_file(inline_ctx, tmp_path, rng):
    frames = rng.integers(0, 4000, (2, 3, 8, 8)).astype(np.uint16)
    dark = rng.integers(0, 50, (8, 8)).astype(np.float32)
    gain = rng.choice([0.5, 1.0, 2.0], (8, 8)).astype(np.float32)
    p = write_seq(str(tmp_path / "c.seq"), frames, dark=dark, gain=gain)
    ds = inline_ctx.load("seq", path=p, nav_shape=(2, 3), num_partitions=2)
    res = inline_ctx.run_udf(dataset=ds, udf=SumUDF(dtype="float64"))
    want = ((frames.reshape(6, 8, 8).astype(np.float64) - dark) * gain).sum(axis=0)
    np.testing.assert_allclose(res["intensity"].data, want, rtol=1e-6)
    res = inline_ctx.run_udf(dataset=ds, udf=SumUDF(dtype="float64"), corrections=rt.CorrectionSet())
    np.testing.assert_array_equal(res["intensity"].data, frames.reshape(6, 8, 8).sum(axis=0))
    # bad pixels: a 12 x 12 sensor map, the frames are its window at (2, 3)
    write_seq_bad_pixels(p, (12, 12), (8, 8), offset=(2, 3), rows=["3", "5-6"], columns=["9"],
                         pixels=[(7, 4), (11, 11)])
    ds = inline_ctx.load("seq", path=p, nav_shape=(2, 3))
    mask = np.zeros((8, 8), bool)
    mask[[1, 3, 4]] = True  # sensor rows 3, 5, 6
    mask[:, 6] = True  # sensor column 9
    mask[5, 1] = True  # sensor pixel (7, 4); (11, 11) lies outside the window
    np.testing.assert_array_equal(ds.corrections.get_excluded_pixels().todense(), mask)
    # LiberTEM 0.16 finds and applies the same dark, gain and bad pixels
    lt_api = pytest.importorskip("libertem.api")
    from libertem.udf.sum import SumUDF as LTSumUDF

    lt_ds = lt_api.Context.make_with("inline").load("seq", path=p, nav_shape=(2, 3))
    lt_res = lt_api.Context.make_with("inline").run_udf(dataset=lt_ds, udf=LTSumUDF())
    np.testing.assert_array_equal(lt_ds.get_correction_data().get_excluded_pixels().todense(), mask)
    res = inline_ctx.run_udf(dataset=ds, udf=SumUDF())
    np.testing.assert_allclose(res["intensity"].data, lt_res["intensity"].data, rtol=1e-5)
    assert ds.get_correction_data().get_dark_frame() is not None
    # a corrections= parameter replaces what the files give
    own = rt.CorrectionSet(dark=np.ones((8, 8), np.float32))
    ds = inline_ctx.load("seq", path=p, nav_shape=(2, 3), corrections=own)
    res = inline_ctx.run_udf(dataset=ds, udf=SumUDF(dtype="float64"))
    np.testing.assert_array_equal(res["intensity"].data, frames.reshape(6, 8, 8).sum(axis=0) - 6)


def test_seq_bad_headers(inline_ctx, tmp_path, rng):
    frames = rng.integers(0, 200, (6, 5, 3)).astype(np.uint8)
    odd = write_seq(str(tmp_path / "odd.seq"), frames, version=4, footer_bytes=13)  # odd frame stride
    ds = inline_ctx.load("seq", path=odd, nav_shape=(2, 3), io_backend="buffered")
    assert ds.fileset.files[0].file_header == 1024
    _check(inline_ctx, ds, frames.reshape(2, 3, 5, 3), tilings=((None, None), (2, 4)))
    w = _seq(str(tmp_path), (2, 3), rng, version=4)
    with pytest.raises(rt.common.errors.ConfigValidationError, match="nav_shape"):
        inline_ctx.load("seq", path=w.path)
    good = Path(w.path).read_bytes()
    for at, value, match in [(620, 1, "compressed"), (568, 101, "not monochrome"), (556, 12, "12 bits"),
                             (580, 3, "smaller than a frame")]:
        bad = bytearray(good)
        bad[at:at + 4] = value.to_bytes(4, "little")
        Path(w.path).write_bytes(bytes(bad))
        with pytest.raises(DataSetException, match=match) as e:
            inline_ctx.load("seq", path=w.path, nav_shape=(2, 3))
        assert w.path in str(e.value)


def test_ser_uneven_offsets_spare_slots_and_corrupt(inline_ctx, tmp_path, rng):
    frames = rng.integers(0, 4000, (2, 5, 6, 4)).astype(np.int32)
    p = write_ser(str(tmp_path / "u.ser"), frames, version=0x0210, spare_elements=3, pad_after=(2, 3, 7))
    for backend in BACKENDS:
        ds = inline_ctx.load("ser", path=p, num_partitions=3, io_backend=backend)
        assert int(dict((d["name"], d["value"]) for d in ds.get_diagnostics())["runs of equal stride"]) == 4
        _check(inline_ctx, ds, frames, tilings=((None, None), (3, 10)))
    good = Path(p).read_bytes()
    for at, value, match in [(0, 0x4d4d, "not a TIA SER"), (4, 0x0300, "series version"),
                             (6, 0x4121, "DataTypeID")]:
        bad = bytearray(good)
        bad[at:at + 2] = value.to_bytes(2, "little")
        Path(p).write_bytes(bytes(bad))
        with pytest.raises(DataSetException, match=match) as e:
            inline_ctx.load("ser", path=p)
        assert p in str(e.value)
    bad = bytearray(good)
    bad[22:26] = (len(good) - 4).to_bytes(4, "little")  # the offset array beyond the end
    Path(p).write_bytes(bytes(bad))
    with pytest.raises(DataSetException, match="too short for its SER data offset array"):
        inline_ctx.load("ser", path=p)


def test_tvips_scan_detection_and_series_files(inline_ctx, tmp_path, rng):
    frames = rng.integers(0, 4000, (26, 5, 4)).astype(np.uint16)
    lead = 3  # frames before the scan; a 4 x 5 scan follows, then 3 more frames
    paths = write_tvips(str(tmp_path), frames, frames_per_file=10, scan_width=5, lead_in=lead)
    ds = inline_ctx.load("tvips", path=paths[2], num_partitions=2)
    assert ds.shape.to_tuple() == (4, 5, 5, 4) and ds.meta.sync_offset == lead
    _check(inline_ctx, ds, frames[lead:lead + 20].reshape(4, 5, 5, 4), tilings=((None, None), (3, 7)))
    assert get_format("tvips").detect_params(paths[1])["parameters"] == {"path": paths[1], "nav_shape": (4, 5),
                                                           "sig_shape": (5, 4), "sync_offset": lead}
    lt_api = pytest.importorskip("libertem.api")
    from libertem.udf.sum import SumUDF as LTSumUDF

    lt_ctx = lt_api.Context.make_with("inline")
    lt_ds = lt_ctx.load("tvips", path=paths[0])
    assert tuple(lt_ds.shape) == ds.shape.to_tuple() and lt_ds._sync_offset == lead
    np.testing.assert_array_equal(lt_ctx.run_udf(dataset=lt_ds, udf=LTSumUDF())["intensity"].data,
                                  inline_ctx.run_udf(dataset=ds, udf=SumUDF())["intensity"].data)
    ds = inline_ctx.load("tvips", path=paths[0], sync_offset=0, nav_shape=(26,))  # given values win
    _check(inline_ctx, ds, frames, tilings=((None, None),))
    os.remove(paths[1])
    with pytest.raises(DataSetException, match=r"files missing: suffixes \[1\]"):
        inline_ctx.load("tvips", path=paths[0])
    os.remove(paths[0])
    with pytest.raises(DataSetException, match="first file .*scan_000.tvips .*is missing"):
        inline_ctx.load("tvips", path=paths[2])


def test_tvips_nav_shape_beyond_the_files_raises(inline_ctx, tmp_path, rng):
    """Issue #37: with a detected scan (sync_offset found, not given) a nav_shape needing more frames than
    the files hold loaded, as no other format does; a given sync_offset still pads with blank frames."""
    frames = rng.integers(0, 4000, (26, 5, 4)).astype(np.uint16)
    paths = write_tvips(str(tmp_path), frames, frames_per_file=10, scan_width=5, lead_in=3)
    for nav in ((6, 5), (26,), (100, 100)):
        with pytest.raises(DataSetException, match=r"scan_000.tvips .*hold 26 frames.*at most 23 positions"):
            inline_ctx.load("tvips", path=paths[0], nav_shape=nav)
    ds = inline_ctx.load("tvips", path=paths[0], nav_shape=(23,))  # exactly what the files hold after the lead-in
    _check(inline_ctx, ds, frames[3:], tilings=((None, None),))
    with pytest.raises(DataSetException, match=r"holds? 26 frames.*nav_shape \(27,\) needs 27"):
        inline_ctx.load("tvips", path=paths[0], nav_shape=(27,), sync_offset=0)
    padded = inline_ctx.load("tvips", path=paths[0], nav_shape=(25,), sync_offset=3)  # asked for: positions without
    _check(inline_ctx, padded, np.concatenate([frames[3:], np.full((2, 5, 4), np.nan)]),  # a frame, not run
           tilings=((None, None),))


@pytest.mark.parametrize("fmt", sorted(set(MAKERS) - {"dm_stack"}))
def test_auto_detects_each_format(inline_ctx, tmp_path, rng, fmt):
    """``ctx.load("auto", path=...)`` (where the branch providing it is merged) opens the same frames."""
    from raytile.io.formats import known_formats

    if "auto" not in known_formats():
        pytest.skip("the auto format is not registered in this tree")
    w = MAKERS[fmt](str(tmp_path), (4, 4), rng)
    ds = inline_ctx.load("auto", path=w.path)
    assert isinstance(ds, get_format(w.name))
    res = inline_ctx.run_udf(dataset=ds, udf=SumUDF(dtype="float64"))
    np.testing.assert_array_equal(res["intensity"].data,
                                  w.frames.reshape((16,) + w.frames.shape[2:]).astype(np.float64).sum(axis=0))


@pytest.mark.parametrize("fmt", ["mrc", "blo", "seq", "ser", "tvips", "dm3"])
def test_random_header_corruption_fails_cleanly(inline_ctx, tmp_path, rng, fmt):
    """Header bytes overwritten at random: a DataSetException naming the file, or a read of the right size."""
    w = MAKERS[fmt](str(tmp_path), (2, 3), rng)
    target = w.params["path"]
    good = Path(target).read_bytes()
    span = min(len(good), 1024)
    for _ in range(40):
        bad = bytearray(good)
        at = int(rng.integers(0, span - 4))
        bad[at:at + 4] = rng.integers(0, 256, 4).astype(np.uint8).tobytes()
        Path(target).write_bytes(bytes(bad))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ds = inline_ctx.load(w.name, **w.params)
                res = inline_ctx.run_udf(dataset=ds, udf=SumSigUDF())
            assert res["intensity"].data.size == 6
        except DataSetException as e:
            assert target in str(e) or str(tmp_path) in str(e), str(e)


def test_dm_tag_tree_unknown_types_and_flat_numbers(inline_ctx, tmp_path, rng):
    from raytile.io.formats.dm_tags import flat_numbers, read_dm_tags

    frames = rng.integers(0, 1000, (3, 4, 5)).astype(np.uint16)
    odd = (("Future", [99, 7], b"\x01" * 13),)  # a type this reader does not know
    p4 = write_dm(str(tmp_path / "u.dm4"), frames, version=4, extra_tags=odd)
    ds = inline_ctx.load("dm", path=p4)  # DM4 states each tag's size: the unknown tag is passed over
    _check(inline_ctx, ds, frames, tilings=((None, None),))
    p3 = write_dm(str(tmp_path / "u.dm3"), frames, version=3, extra_tags=odd)
    with pytest.raises(DataSetException, match="unknown tag type 99"):
        inline_ctx.load("dm", path=p3)
    flat = flat_numbers(read_dm_tags(p4).root)
    assert flat[".HasWindowPosition"] is True and flat[".DocumentObjectList.1.AnnotationType"] == 20
    assert flat[".ImageList.1.ImageData.DataType"] == 23 and flat[".ImageList.2.ImageData.DataType"] == 10
    assert flat[".ImageList.2.ImageData.Dimensions.3"] == 3 and flat[".ImageList.2.ImageData.PixelDepth"] == 2
    assert ".Future" not in flat


@pytest.mark.parametrize("backend", BACKENDS)
def test_file_written_again_under_the_same_path_is_read_afresh(inline_ctx, tmp_path, rng, backend):
    """A process that read a file reads the new content after the file is written again (mmap maps per version)."""
    first = rng.integers(0, 100, (4, 5, 6)).astype(np.uint16)
    p = write_mrc(str(tmp_path / "same.mrc"), first)
    ds = inline_ctx.load("mrc", path=p, io_backend=backend)
    np.testing.assert_array_equal(inline_ctx.run_udf(dataset=ds, udf=SumUDF())["intensity"].data, first.sum(axis=0))
    second = rng.integers(0, 100, (9, 5, 6)).astype(np.uint16)
    os.remove(p)  # a new file (new inode), as tools that write a temporary file and rename it make
    write_mrc(p, second)
    ds = inline_ctx.load("mrc", path=p, io_backend=backend)
    np.testing.assert_array_equal(inline_ctx.run_udf(dataset=ds, udf=SumUDF())["intensity"].data, second.sum(axis=0))


def test_files_without_frames(inline_ctx, tmp_path, rng):
    paths = write_tvips(str(tmp_path), np.zeros((0, 4, 4), np.uint16))
    seq = write_seq(str(tmp_path / "empty.seq"), np.zeros((0, 4, 4), np.uint16))
    raw = tmp_path / "empty.raw"
    raw.write_bytes(b"")
    for fmt, kwargs in [("tvips", {"path": paths[0]}), ("seq", {"path": seq, "nav_shape": (1,)}),
                        ("empad", {"path": str(raw), "nav_shape": (1,)})]:
        with pytest.raises(DataSetException, match="holds no frames") as e:
            inline_ctx.load(fmt, **kwargs)
        assert kwargs["path"] in str(e.value)
