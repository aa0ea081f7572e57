"""Files written by real acquisition software, as their readers open them (issue 37).

The files come from two packages on PyPI, fetched when the tests run (never committed): the hyperspy
1.7.6 wheel (``hyperspy/tests/io/``: FEI TIA ``.ser``, Gatan DM3/DM4, NanoMegas ``.blo``, TVIPS, EMPAD
``.xml``) and the mrcfile 1.5.4 sdist (``tests/test_data``: EMDB ``.map`` volumes, EPU and FEI ``.mrc``).
They are cached in ``$RAYTILE_TEST_DATA`` (default ``~/.cache/raytile-test-data``); without PyPI the
tests are skipped, saying so.

Each file is opened by ``auto`` and by its format's name, and its sum frame, per-frame sums and one
picked frame equal those of an independent reader of the same file: ncempy (SER, DM), mrcfile (MRC),
LiberTEM 0.16 (BLO) or numpy on the documented layout (TVIPS; EMPAD, whose raw files hyperspy's own
tests write as ``arange`` floats). Inline for every file, on Ray for one file of each format.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import warnings
import zipfile

import numpy as np
import pytest

import raytile as rt
from raytile.common.errors import DataSetException

HYPERSPY = "hyperspy==1.7.6"
MRCFILE = "mrcfile==1.5.4"


def _cache_root() -> pathlib.Path:
    return pathlib.Path(os.environ.get("RAYTILE_TEST_DATA", pathlib.Path.home() / ".cache" / "raytile-test-data"))


def _download(requirement: str, dest: pathlib.Path, binary: bool) -> pathlib.Path:
    """The wheel (``binary``) or sdist of ``requirement``, with pip from PyPI into ``dest`` (once)."""
    dest.mkdir(parents=True, exist_ok=True)
    name = requirement.split("==")[0]
    found = [p for p in dest.iterdir() if p.name.lower().startswith(name) and p.suffix in (".whl", ".gz")]
    if found:
        return found[0]
    kind = ["--only-binary", ":all:"] if binary else ["--no-binary", ":all:"]
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", *kind, requirement,
                               "-d", str(dest)], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"cannot fetch {requirement} from PyPI: {e}")
    found = [p for p in dest.iterdir() if p.name.lower().startswith(name) and p.suffix in (".whl", ".gz")]
    if proc.returncode != 0 or not found:
        pytest.skip(f"cannot fetch {requirement} from PyPI (pip download: {proc.stderr.strip()[-300:]})")
    return found[0]


def _unpack(archive: pathlib.Path, inside: str, out: pathlib.Path) -> pathlib.Path:
    """The members of ``archive`` under the folder ``inside`` (a path part), unpacked into ``out`` once."""
    done = out / ".complete"
    if not done.exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        if archive.suffix == ".whl":
            with zipfile.ZipFile(archive) as z:
                for m in z.namelist():
                    if inside in m and not m.endswith((".py", "/")):
                        target = out / m.split(inside, 1)[1]
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(z.read(m))
        else:
            with tarfile.open(archive) as t:
                for m in t.getmembers():
                    if inside in m.name and m.isfile() and not m.name.endswith(".py"):
                        target = out / m.name.split(inside, 1)[1]
                        target.parent.mkdir(parents=True, exist_ok=True)
                        src = t.extractfile(m)
                        assert src is not None
                        target.write_bytes(src.read())
        done.touch()
    return out


@pytest.fixture(scope="session")
def hyperspy_io() -> pathlib.Path:
    """hyperspy 1.7.6's ``hyperspy/tests/io`` folder."""
    root = _cache_root()
    wheel = _download(HYPERSPY, root / "dist", binary=True)
    return _unpack(wheel, "hyperspy/tests/io/", root / "hyperspy-1.7.6-io")


@pytest.fixture(scope="session")
def mrcfile_data() -> pathlib.Path:
    """mrcfile 1.5.4's ``tests/test_data`` folder."""
    root = _cache_root()
    sdist = _download(MRCFILE, root / "dist", binary=False)
    return _unpack(sdist, "tests/test_data/", root / "mrcfile-1.5.4-test_data")


# -- independent readers ------------------------------------------------------------------------

def ser_frames(path) -> np.ndarray:
    ser = pytest.importorskip("ncempy.io.ser")
    with ser.fileSER(str(path)) as f:
        return np.stack([f.getDataset(i)[0] for i in range(f.head["ValidNumberElements"])])


def dm_frames(path) -> np.ndarray:
    dm = pytest.importorskip("ncempy.io.dm")
    with dm.fileDM(str(path)) as f:
        data = f.getDataset(0)["data"]
    return data.reshape((-1,) + data.shape[-2:])


def mrc_frames(path) -> np.ndarray:
    mrcfile = pytest.importorskip("mrcfile")
    with mrcfile.open(str(path), permissive=True) as m:
        data = np.array(m.data)
    return data.reshape((-1,) + data.shape[-2:])


def libertem_frames(fmt: str, path) -> np.ndarray:
    """Every frame, picked by LiberTEM 0.16's own reader of ``fmt``."""
    lt_api = pytest.importorskip("libertem.api")
    from libertem.udf.raw import PickUDF

    with lt_api.Context.make_with("inline") as lt:
        ds = lt.load(fmt, path=str(path))
        roi = np.ones(tuple(ds.shape.nav), dtype=bool)
        data = lt.run_udf(dataset=ds, udf=PickUDF(), roi=roi)["intensity"].raw_data
    return np.asarray(data).reshape((-1,) + tuple(ds.shape.sig))


def tvips_frames(first) -> np.ndarray:
    """TVIPS v2 by its documented layout: a 256-byte series header of int32 words in the first file
    (2 xdim, 3 ydim, 4 bits per pixel, 12 frame header bytes), then frames, each after its header, in
    the files ``*_000.tvips``, ``*_001.tvips``, ... read as one stream."""
    first = pathlib.Path(first)
    stem = first.name[:-len("000.tvips")]
    files = sorted(first.parent.glob(stem + "[0-9][0-9][0-9].tvips"))
    words = np.fromfile(first, dtype="<i4", count=64)
    xdim, ydim, bpp, frame_header = int(words[2]), int(words[3]), int(words[4]), int(words[12])
    assert int(words[1]) == 2 and bpp == 16, words[:13]
    stream = b"".join(f.read_bytes() for f in files)[256:]
    record = frame_header + xdim * ydim * 2
    assert len(stream) % record == 0
    n = len(stream) // record
    raw = np.frombuffer(stream, dtype=np.uint8).reshape(n, record)[:, frame_header:]
    return raw.copy().view("<u2").reshape(n, ydim, xdim)


def check_same_frames(ctx, ds, frames: np.ndarray) -> None:
    """raytile's sum frame, per-frame sums and one picked frame of ``ds`` equal those of ``frames``."""
    n = ds.shape.nav.size
    assert n == len(frames) and ds.shape.sig.to_tuple() == frames.shape[1:], (ds.shape, frames.shape)
    total, per_frame = ctx.run_udf(dataset=ds, udf=[rt.udf.SumUDF(dtype="float64"), rt.udf.SumSigUDF()])
    np.testing.assert_allclose(total["intensity"].data, frames.sum(axis=0, dtype=np.float64), rtol=1e-6)
    np.testing.assert_allclose(per_frame["intensity"].data.reshape(-1),
                               frames.reshape(n, -1).sum(axis=1, dtype=np.float64), rtol=1e-5)
    k = n // 2
    roi = np.zeros(ds.shape.nav.to_tuple(), dtype=bool)
    roi.flat[k] = True
    picked = np.asarray(ctx.run_udf(dataset=ds, udf=rt.udf.PickUDF(), roi=roi)["intensity"].raw_data)[0]
    assert picked.dtype == frames.dtype and np.array_equal(picked, frames[k])


def check_auto_and_named(ctx, fmt: str, path, frames: np.ndarray, nav: tuple[int, ...]) -> None:
    """``auto`` detects ``fmt`` and both open the file with nav shape ``nav`` and the reader's frames."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in ("auto", fmt):
            ds = ctx.load(name, path=str(path))
            assert type(ds).format_name == fmt and ds.shape.nav.to_tuple() == nav, (name, ds.shape)
            check_same_frames(ctx, ds, frames)


# -- FEI TIA .ser -------------------------------------------------------------------------------

SER_FILES = [  # (file, nav shape): images, a 5x5 scan, a preview stopped at 5 of 200, 1D spectra
    ("FEI_new/128x128x5-diffraction_preview_1.ser", (5,)),
    ("FEI_new/16x16-diffraction_imagel_5x5x256x256_EDS_2.ser", (5, 5)),
    ("FEI_old/03_Scanning Preview_1.ser", (5,)),
    ("FEI_old/64x64x5_TEM_preview_1.ser", (5,)),
    ("FEI_old/16x16-spectrum_image-5x5x1024_1.ser", (5, 5)),
    ("FEI_old/16x16-2_point-spectra-2x1024_1.ser", (2,)),
    ("FEI_old/X - Au NP EELS_2.ser", (1,)),
    ("FEI_new/16x16-line_profile_horizontal_5x128x128_EDS_1.ser", (5,)),
]


@pytest.mark.parametrize("name,nav", SER_FILES)
def test_ser(inline_ctx, hyperspy_io, name, nav):
    check_auto_and_named(inline_ctx, "ser", hyperspy_io / name, ser_frames(hyperspy_io / name), nav)


def test_ser_stopped_early_opens_its_valid_frames(inline_ctx, hyperspy_io):
    """TIA's header says 5 valid elements of a 200-frame series: the 5 are the data set; a nav shape
    asking for all 200 is refused naming the count."""
    from raytile.io.formats.ser import read_ser_header

    path = hyperspy_io / "FEI_old/03_Scanning Preview_1.ser"
    header = read_ser_header(str(path))
    assert (header["valid"], header["total"], header["dims_nav_shape"]) == (5, 200, (200,))
    with pytest.raises(DataSetException, match="5 frames"):
        inline_ctx.load("ser", path=str(path), nav_shape=(200,))


# -- Gatan DM3 / DM4 ----------------------------------------------------------------------------

DM_FILES = [("dm3_2D_data/test_STEM_image.dm3", (1,)), ("dm3_2D_data/test_diffraction_pattern.dm3", (1,)),
            ("dm3_3D_data/test-1.dm3", (2,)), ("dm4_3D_data/test-2.dm4", (2,)), ("dm4_3D_data/test-11.dm4", (2,)),
            ("dm4_2D_data/test-12.dm4", (1,)), ("dm_stackbuilder_plugin/test_stackbuilder_imagestack.dm3", (3,))]


@pytest.mark.parametrize("name,nav", DM_FILES)
def test_dm(inline_ctx, hyperspy_io, name, nav):
    check_auto_and_named(inline_ctx, "dm", hyperspy_io / name, dm_frames(hyperspy_io / name), nav)


# -- NanoMegas .blo, TVIPS ----------------------------------------------------------------------

@pytest.mark.parametrize("name,nav", [("blockfile_data/test1.blo", (3, 2)), ("blockfile_data/test2.blo", (2, 3))])
def test_blo(inline_ctx, hyperspy_io, name, nav):
    check_auto_and_named(inline_ctx, "blo", hyperspy_io / name, libertem_frames("blo", hyperspy_io / name), nav)


@pytest.mark.parametrize("name", ["tvips_files/test_tvips_2233_000.tvips", "tvips_files/test_tvips_2345_000.tvips",
                                  "tvips_files/test_tvips_2345_split_000.tvips"])
def test_tvips(inline_ctx, hyperspy_io, name):
    frames = tvips_frames(hyperspy_io / name)
    check_auto_and_named(inline_ctx, "tvips", hyperspy_io / name, frames, (len(frames),))


# -- EMPAD (software 0.51 and 1.2.0 .xml) -------------------------------------------------------

def empad_copy(hyperspy_io, tmp_path, xml: str, raw: str, frames: int | None) -> tuple[pathlib.Path, np.ndarray]:
    """The ``.xml`` copied into ``tmp_path`` beside the raw file it names, written as hyperspy's own tests
    write it (``arange`` float32 frames of 130 x 128); returns the .xml and the 128 x 128 frames."""
    shutil.copy(hyperspy_io / "empad_data" / xml, tmp_path / xml)
    data = np.arange(frames * 130 * 128, dtype=np.float32).reshape(frames, 130, 128)
    data.tofile(tmp_path / raw)
    return tmp_path / xml, data[:, :128, :]


def test_empad_051_scan_size_from_pix_xy_and_the_raw_file_it_names(inline_ctx, hyperspy_io, tmp_path):
    """map4x4.xml (EMPAD 0.51): <pix_x>/<pix_y> 4 x 4 is the scan (its acquire/search scans say 128 and
    64), read from scan_x4_y4.raw, which the .xml names."""
    xml, frames = empad_copy(hyperspy_io, tmp_path, "map4x4.xml", "scan_x4_y4.raw", 16)
    check_auto_and_named(inline_ctx, "empad", xml, frames, (4, 4))


def test_empad_series(inline_ctx, hyperspy_io, tmp_path):
    xml, frames = empad_copy(hyperspy_io, tmp_path, "stack_images.xml", "series_x10.raw", 10)
    check_auto_and_named(inline_ctx, "empad", xml, frames, (10,))


def test_empad_120_detected_from_its_size_and_refused_with_the_reason_without_raw(hyperspy_io, tmp_path):
    """map128x128_version1.2.0.xml: auto places it by the size of its (sparse, here) 128 x 128 raw file;
    with the raw file missing, auto's error names it."""
    from raytile.io.formats.auto import detect_format

    shutil.copy(hyperspy_io / "empad_data/map128x128_version1.2.0.xml", tmp_path / "scan.xml")
    with pytest.raises(DataSetException, match="scan_x128_y128.raw"):
        detect_format(str(tmp_path / "scan.xml"))
    with open(tmp_path / "scan_x128_y128.raw", "wb") as f:
        f.truncate(128 * 128 * 130 * 128 * 4)
    assert detect_format(str(tmp_path / "scan.xml")) == (
        "empad", {"path": str(tmp_path / "scan.xml"), "nav_shape": (128, 128), "sig_shape": (128, 128)})


# -- MRC: EMDB .map volumes, EPU and FEI images -------------------------------------------------

@pytest.mark.parametrize("name,nav", [("EMD-3197.map", (20,)), ("EMD-3001.map", (25,)),
                                      ("epu2.9_example.mrc", (1,)), ("fei-extended.mrc", (1,))])
def test_mrc(inline_ctx, mrcfile_data, name, nav):
    """EMDB volumes are detected (.map with the MRC2014 mark) with their sections as the nav axis; a
    single image has nav (1,) by auto and by "mrc" alike."""
    check_auto_and_named(inline_ctx, "mrc", mrcfile_data / name, mrc_frames(mrcfile_data / name), nav)


def test_jeol_map_is_not_taken_for_mrc(hyperspy_io):
    from raytile.io.formats.mrc import MRCDataSet

    path = hyperspy_io / "JEOL_files/Sample/00_View000/View000_0000001.map"
    assert MRCDataSet.detect_params(str(path)) is False


# -- on Ray: one file of each format ------------------------------------------------------------

@pytest.mark.ray
def test_one_file_of_each_format_on_ray(ray_context, hyperspy_io, mrcfile_data, tmp_path):
    cases = [("ser", hyperspy_io / "FEI_old/03_Scanning Preview_1.ser", ser_frames, (5,)),
             ("dm", hyperspy_io / "dm_stackbuilder_plugin/test_stackbuilder_imagestack.dm3", dm_frames, (3,)),
             ("blo", hyperspy_io / "blockfile_data/test1.blo", lambda p: libertem_frames("blo", p), (3, 2)),
             ("tvips", hyperspy_io / "tvips_files/test_tvips_2345_split_000.tvips", tvips_frames, (6,)),
             ("mrc", mrcfile_data / "EMD-3197.map", mrc_frames, (20,))]
    for fmt, path, reader, nav in cases:
        check_auto_and_named(ray_context, fmt, path, reader(path), nav)
    xml, frames = empad_copy(hyperspy_io, tmp_path, "map4x4.xml", "scan_x4_y4.raw", 16)
    check_auto_and_named(ray_context, "empad", xml, frames, (4, 4))
