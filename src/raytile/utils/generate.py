"""Synthetic test data, at ``libertem.utils.generate``'s path and with its functions' results.

Ported scripts and test suites make their example frames with these: a
diffraction pattern of disks on a lattice (:func:`cbed_frame`), an off-axis
hologram (:func:`hologram_frame`), a linear gradient data set
(:func:`gradient_data`) and excluded pixels a gradient can be repaired over
(:func:`exclude_pixels`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from raytile import masks
from raytile.utils import frame_peaks, make_cartesian, make_polar

__all__ = ["cbed_frame", "hologram_frame", "gradient_data", "exclude_pixels"]


def cbed_frame(fy: int = 128, fx: int = 128, zero: Any = None, a: Any = None, b: Any = None,
               indices: Any = None, radius: float = 4, all_equal: bool = False,
               margin: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One ``(1, fy, fx)`` float32 frame of antialiased disks of ``radius`` at the lattice points
    ``zero + i * a + j * b`` inside the frame (``margin`` from the border, default ``radius``).

    Defaults: ``zero`` the centre, ``a = (fy // 8, 0)``, ``b`` is ``a`` turned by -90 degrees, indices
    -10..10 in both directions. Disks nearer ``zero`` are brighter, unless ``all_equal``.
    Returns ``(frame, indices, peaks)`` of the disks drawn.
    """
    zero_ = np.array((fy // 2, fx // 2) if zero is None else zero)
    a_ = np.array((fy // 8, 0) if a is None else a)
    b_ = np.array(make_cartesian(make_polar(a_) - (0, np.pi / 2)) if b is None else b)
    idx = np.mgrid[-10:11, -10:11] if indices is None else indices
    found, peaks = frame_peaks(fy=fy, fx=fx, zero=zero_, a=a_, b=b_, r=radius if margin is None else margin,
                               indices=idx)
    frame = np.zeros((1, fy, fx), dtype=np.float32)
    distance = np.linalg.norm(peaks - zero_, axis=-1)
    top = max(distance.max() + 1, len(peaks) + 1)
    for n, (py, px) in enumerate(peaks):
        weight = 1 if all_equal else max(1, top - distance[n] + n)
        frame += masks.circular(centerX=px, centerY=py, imageSizeX=fx, imageSizeY=fy, radius=radius,
                                antialiased=True) * weight
    return frame, found, peaks


def hologram_frame(amp: np.ndarray, phi: np.ndarray, counts: float = 1000., sampling: float = 5.,
                   visibility: float = 1., f_angle: float = 30., gaussian_noise: float | None = None,
                   poisson_noise: float | None = None) -> np.ndarray:
    """An off-axis hologram of the object wave ``amp * exp(i phi)`` (2D arrays of one shape).

    Fringes every ``sampling`` pixels at ``f_angle`` degrees to the x axis, of ``visibility``, with
    ``counts`` electrons in vacuum: ``counts / 2 * (1 + amp**2 + 2 amp visibility cos(k.r - phi))``
    (Lichte and Lehmann, Rep. Prog. Phys. 71 (2008) 016102). ``poisson_noise`` scales shot noise,
    ``gaussian_noise`` is the sigma of a Gaussian blur (focus spread, detector PSF).
    """
    if amp.shape != phi.shape:
        raise ValueError(f"hologram_frame: amp {amp.shape} and phi {phi.shape} must be 2D arrays of one shape")
    sy, sx = phi.shape
    x, y = np.meshgrid(np.arange(sx), np.arange(sy))
    angle = math.radians(f_angle)
    carrier = 2. * np.pi / sampling * (y * np.cos(angle) + x * np.sin(angle))
    holo = counts / 2 * (1. + amp ** 2 + 2. * amp * visibility * np.cos(carrier - phi))
    if poisson_noise:
        if not isinstance(poisson_noise, (float, int)):
            raise ValueError(f"hologram_frame: poisson_noise must be a float, an int or None, got {poisson_noise!r}")
        scale = poisson_noise * counts
        holo = scale * np.random.poisson(holo / scale)
    if gaussian_noise:
        if not isinstance(gaussian_noise, (float, int)):
            raise ValueError(f"hologram_frame: gaussian_noise must be a float, an int or None, "
                             f"got {gaussian_noise!r}")
        from scipy.ndimage import gaussian_filter

        holo = gaussian_filter(holo, gaussian_noise)
    return holo


def gradient_data(nav_dims: tuple[int, ...], sig_dims: tuple[int, ...]) -> np.ndarray:
    """float32 data of shape ``nav_dims + sig_dims`` rising linearly from 5 to 30 in C order."""
    shape = tuple(nav_dims) + tuple(sig_dims)
    return np.linspace(5, 30, num=math.prod(shape), dtype=np.float32).reshape(shape)


def exclude_pixels(sig_dims: tuple[int, ...], num_excluded: int, rng: Any = None) -> np.ndarray | None:
    """``num_excluded`` random pixels of a signal of shape ``sig_dims`` as ``(ndim, n)`` indices (None for 0),
    none on the border and no two neighbours, so a linear gradient is repaired exactly from the neighbours."""
    if num_excluded == 0:
        return None
    rng = np.random.default_rng() if rng is None else rng
    free = np.zeros(sig_dims, dtype=bool)
    free[tuple(slice(1, s - 1) for s in sig_dims)] = True
    picked: list[tuple[int, ...]] = []
    while len(picked) < num_excluded:
        pixel = tuple(int(rng.integers(low=1, high=s - 1)) for s in sig_dims)
        if free[pixel]:
            picked.append(pixel)
            free[tuple(slice(p - 1, p + 2) for p in pixel)] = False
    return np.array(picked).T
