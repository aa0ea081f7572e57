"""Real acquisition files from rosettasciio's repository, opened by raytile and by independent readers
(issue 37): Merlin ``.mib``/``.hdr`` (single chips and quads, counter depths 1/6/12/24, RAW files beside
their acquisitions, ROIs), a DECTRIS ARINA master file and Direct Electron ``.mrc`` files.

The files are not packaged (CI cannot reach GitHub): this script is run in a session on a copy of the
repository (a checkout, or the bare git directory the session's ``fetch`` brings):

    python benchmarks/check_rosettasciio_files.py --repo /work/.mirror/hyperspy+rosettasciio/repo [--ray]

Each file is opened by ``auto`` and by its format's name, and its sum frame, per-frame sums and one
picked frame are compared with LiberTEM 0.16's MIB reader (Merlin), h5py + hdf5plugin on the ARINA data
file, and mrcfile (MRC). A Merlin ``.hdr`` with its ``RAW`` neighbour: ``"mib"`` must refuse, naming
``disable_glob=True``, and open with it; ``auto`` must take the header's own file. Prints one line per
check and a summary; exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import warnings
import zipfile

import numpy as np

import raytile as rt
from raytile.common.errors import DataSetException

DATA = "rsciio/tests/data"
FAILED: list[str] = []


def extract(repo: str, out: str) -> None:
    """``quantumdetector/*.zip`` (unzipped), ``arina/*``, ``mrc/*.mrc`` of rosettasciio's test data into ``out``."""
    bare = not os.path.isdir(os.path.join(repo, DATA))
    if bare:
        names = subprocess.run(["git", "--git-dir", repo, "ls-tree", "-r", "--name-only", "HEAD", DATA],
                               capture_output=True, text=True, check=True).stdout.splitlines()
    else:
        names = [os.path.relpath(p, repo) for p in glob.glob(os.path.join(repo, DATA, "**", "*"), recursive=True)]
    for name in names:
        sub = name[len(DATA) + 1:]
        if not (sub.startswith(("quantumdetector/", "arina/")) or (sub.startswith("mrc/") and sub.endswith(".mrc"))):
            continue
        target = os.path.join(out, sub)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if bare:
            proc = subprocess.run(["git", "--git-dir", repo, "cat-file", "-p", f"HEAD:{name}"], capture_output=True)
            if proc.returncode != 0:
                print(f"skip {sub}: not in this snapshot")
                continue
            with open(target, "wb") as f:
                f.write(proc.stdout)
        else:
            with open(os.path.join(repo, name), "rb") as src, open(target, "wb") as f:
                f.write(src.read())
        if target.endswith(".zip"):
            with zipfile.ZipFile(target) as z:
                z.extractall(os.path.dirname(target))


def report(ok: bool, what: str) -> None:
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        FAILED.append(what)


def compare(ctx, ds, frames: np.ndarray, what: str) -> None:
    n = ds.shape.nav.size
    frames = frames.reshape((n,) + tuple(ds.shape.sig))
    total, per_frame = ctx.run_udf(dataset=ds, udf=[rt.udf.SumUDF(dtype="float64"), rt.udf.SumSigUDF()])
    roi = np.zeros(ds.shape.nav.to_tuple(), dtype=bool)
    roi.flat[n // 2] = True
    picked = np.asarray(ctx.run_udf(dataset=ds, udf=rt.udf.PickUDF(), roi=roi)["intensity"].raw_data)[0]
    ok = (np.allclose(total["intensity"].data, frames.sum(axis=0, dtype=np.float64), rtol=1e-6)
          and np.allclose(per_frame["intensity"].data.reshape(-1), frames.reshape(n, -1).sum(axis=1), rtol=1e-5)
          and np.array_equal(picked, frames[n // 2]))
    report(ok, f"{what}: {tuple(ds.shape)} {ds.dtype}")


def libertem_frames(lt, **kw) -> np.ndarray:
    from libertem.io.dataset.base import BufferedBackend
    from libertem.udf.raw import PickUDF

    ds = lt.load("mib", io_backend=BufferedBackend(), **kw)  # LiberTEM 0.16's mmap backend asserts on 1-bit RAW
    roi = np.ones(tuple(ds.shape.nav), dtype=bool)
    return np.asarray(lt.run_udf(dataset=ds, udf=PickUDF(), roi=roi)["intensity"].raw_data)


def check_merlin(ctx, lt, folder: str) -> None:
    for hdr in sorted(glob.glob(os.path.join(folder, "*.hdr"))):
        try:
            check_merlin_file(ctx, lt, hdr)
        except Exception as e:  # noqa: BLE001  (one failing file is reported, the others still run)
            report(False, f"merlin {os.path.basename(hdr)}: {type(e).__name__}: {str(e)[:300]}")


def check_merlin_file(ctx, lt, hdr: str) -> None:
    name = os.path.basename(hdr)
    mib = hdr[:-4] + ".mib"
    neighbours = [p for p in glob.glob(hdr[:-4] + "*.mib") if p != mib]
    ds = ctx.load("auto", path=hdr)
    nav = ds.shape.nav.to_tuple()
    reference = libertem_frames(lt, path=mib, nav_shape=nav, disable_glob=True)
    compare(ctx, ds, reference, f"merlin {name} auto")
    if neighbours:
        try:
            ctx.load("mib", path=hdr)
            report(False, f"merlin {name} mib: opened with {neighbours} beside it, expected an error")
        except DataSetException as e:
            report("disable_glob=True" in str(e), f"merlin {name} mib: refused naming disable_glob=True")
        ds = ctx.load("mib", path=hdr, disable_glob=True)
    else:
        ds = ctx.load("mib", path=hdr)
    compare(ctx, ds, reference, f"merlin {name} mib")


def check_arina(ctx, folder: str) -> None:
    import h5py
    import hdf5plugin  # noqa: F401  (bitshuffle-LZ4 chunks)

    master = os.path.join(folder, "test_00_master.h5")
    with h5py.File(os.path.join(folder, "test_00_data_000001.h5"), "r") as f:
        frames = np.asarray(f["entry/data/data"])
    for fmt in ("auto", "dectris"):
        ds = ctx.load(fmt, path=master, nav_shape=(len(frames),))
        compare(ctx, ds, frames, f"arina test_00_master.h5 {fmt}")


def check_mrc(ctx, folder: str) -> None:
    import mrcfile

    for path in sorted(glob.glob(os.path.join(folder, "*.mrc"))):
        with mrcfile.open(path, permissive=True) as m:
            frames = np.array(m.data)
        frames = frames.reshape((-1,) + frames.shape[-2:])
        for fmt in ("auto", "mrc"):
            try:
                ds = ctx.load(fmt, path=path)
            except DataSetException as e:
                report(False, f"mrc {os.path.basename(path)} {fmt}: {e}")
                continue
            compare(ctx, ds, frames, f"mrc {os.path.basename(path)} {fmt}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repo", required=True, help="rosettasciio: a checkout or a bare git directory")
    p.add_argument("--ray", action="store_true", help="also run every check on a local Ray")
    args = p.parse_args()
    import libertem.api as lt_api

    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as out:
        extract(args.repo, out)
        executors = ["inline"] + (["ray"] if args.ray else [])
        with lt_api.Context.make_with("inline") as lt:
            for executor in executors:
                ctx = rt.Context(executor=executor)
                print(f"-- {executor}", flush=True)
                try:
                    check_merlin(ctx, lt, os.path.join(out, "quantumdetector"))
                    check_arina(ctx, os.path.join(out, "arina"))
                    check_mrc(ctx, os.path.join(out, "mrc"))
                finally:
                    ctx.close()
    print(f"{len(FAILED)} check(s) failed" + (": " + "; ".join(FAILED) if FAILED else ""))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
