"""Write a DECTRIS-style series: a ``*_master.h5`` and its linked ``*_data_NNNNNN.h5`` files.

The layout follows what DECTRIS detectors (EIGER, ARINA, QUADRO) write
through their FileWriter, as the SIMPLON manual and NeXus describe it: the
master file's ``/entry/data/data_000001``, ``data_000002``, ... are HDF5
external links to ``<name>_data_000001.h5:/entry/data/data``, each an
``(images, height, width)`` data set chunked one frame a chunk, with
``image_nr_low``/``image_nr_high`` (1-based) attributes; the detector's
metadata lives in ``/entry/instrument/detector/detectorSpecific``
(``nimages``, ``ntrigger``, ``x/y_pixels_in_detector``, ``pixel_mask``,
``compression``). Chunks are compressed by HDF5 itself through
``hdf5plugin``'s filters (bitshuffle-LZ4, LZ4), independent of raytile's
decoder.

>>> import numpy as np, tempfile
>>> data = np.arange(5 * 4 * 6, dtype=np.uint16).reshape(5, 4, 6)
>>> master = write_dectris(tempfile.mkdtemp(), data, frames_per_file=2)
>>> master.endswith("series_1_master.h5")
True
"""

from __future__ import annotations

import os
from typing import Callable

import numpy as np

__all__ = ["write_dectris", "COMPRESSIONS"]

#: Values of ``compression``: bitshuffle + LZ4 (what DECTRIS writes), LZ4 alone, none.
COMPRESSIONS = ("bslz4", "lz4", None)


def _filter_kwargs(compression: str | None) -> dict:
    import hdf5plugin

    if compression == "bslz4":
        return dict(hdf5plugin.Bitshuffle(nelems=0, cname="lz4"))
    if compression == "lz4":
        return dict(hdf5plugin.LZ4(nbytes=0))
    if compression is None:
        return {}
    raise ValueError(f"compression must be one of {COMPRESSIONS}, got {compression!r}")


def write_dectris(
    directory: str,
    data: np.ndarray | Callable[[int, int], np.ndarray],
    frames_per_file: int = 1000,
    name: str = "series_1",
    compression: str | None = "bslz4",
    pixel_mask: np.ndarray | None = None,
    nimages: int | None = None,
    ntrigger: int | None = None,
    num_frames: int | None = None,
    frame_shape: tuple[int, int] | None = None,
    dtype: str | np.dtype | None = None,
) -> str:
    """Write ``data`` as a DECTRIS series in ``directory``; returns the master file's path.

    ``data`` is an ``(images, height, width)`` array, or a function
    ``data(start, stop)`` returning images ``start .. stop - 1`` (for files
    larger than memory; then give ``num_frames``, ``frame_shape`` and
    ``dtype``). ``nimages``/``ntrigger`` default to all images and 1.
    """
    import h5py

    if callable(data):
        if num_frames is None or frame_shape is None or dtype is None:
            raise ValueError("with a function for data, give num_frames, frame_shape and dtype")
        get = data
        n, shape, dt = int(num_frames), tuple(frame_shape), np.dtype(dtype)
    else:
        arr = np.asarray(data)
        n, shape, dt = arr.shape[0], tuple(arr.shape[1:]), arr.dtype
        get = lambda a, b: arr[a:b]  # noqa: E731
    os.makedirs(directory, exist_ok=True)
    master = os.path.join(directory, f"{name}_master.h5")
    filters = _filter_kwargs(compression)
    links = []
    for k, start in enumerate(range(0, n, frames_per_file), start=1):
        stop = min(n, start + frames_per_file)
        fname = f"{name}_data_{k:06d}.h5"
        with h5py.File(os.path.join(directory, fname), "w") as f:
            ds = f.create_dataset("/entry/data/data", shape=(stop - start,) + shape, dtype=dt,
                                  chunks=(1,) + shape, **filters)
            step = max(1, (64 << 20) // max(1, int(np.prod(shape)) * dt.itemsize))
            for a in range(start, stop, step):
                b = min(stop, a + step)
                ds[a - start:b - start] = get(a, b)
            ds.attrs["image_nr_low"] = np.int32(start + 1)
            ds.attrs["image_nr_high"] = np.int32(stop)
        links.append((f"data_{k:06d}", fname))
    with h5py.File(master, "w") as f:
        entry = f.create_group("entry")
        entry.attrs["NX_class"] = "NXentry"
        grp = entry.create_group("data")
        grp.attrs["NX_class"] = "NXdata"
        for link, fname in links:
            grp[link] = h5py.ExternalLink(fname, "/entry/data/data")
        det = f.create_group("/entry/instrument/detector")
        det.attrs["NX_class"] = "NXdetector"
        det["bit_depth_image"] = np.uint32(dt.itemsize * 8)
        det["x_pixel_size"] = np.float32(75e-6)
        det["y_pixel_size"] = np.float32(75e-6)
        spec = det.create_group("detectorSpecific")
        spec["nimages"] = np.uint32(nimages if nimages is not None else n)
        spec["ntrigger"] = np.uint32(ntrigger if ntrigger is not None else 1)
        spec["x_pixels_in_detector"] = np.uint32(shape[1])
        spec["y_pixels_in_detector"] = np.uint32(shape[0])
        spec["compression"] = np.bytes_(compression or "none")
        if pixel_mask is not None:
            spec.create_dataset("pixel_mask", data=np.asarray(pixel_mask, dtype=np.uint32))
    return master
