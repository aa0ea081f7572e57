"""LiberTEM's colour wheel: a 2D vector field as RGB (:func:`rgb_from_2dvector`) and its map ``libertem_cyclic``.

A CoM shift, a radial Fourier coefficient or any complex value is pictured
as LiberTEM pictures it, so that a ported notebook shows the same colours:
the direction picks a hue from colorcet's isoluminant cyclic map
(``cet_cyclic_isoluminant``, Peter Kovesi's ``circle_mgbm_67_c31``: a circle
of constant lightness 67), looked up as LiberTEM looks it up (256 steps of
``[-pi, pi]``, matplotlib's byte colours); in CIELUV (D65, sRGB) the
lightness is scaled by 0.8 and the colourfulness (``u``, ``v``) by
``2.2 * length / vmax``. A zero vector is therefore mid-grey ``(127, 127,
127)``, a vector of ``vmax / 2.2`` or longer the map's colour at full
strength (clipped to the sRGB gamut). The CIELUV conversions are written
here (the CIE formulas with the constants scikit-image uses), so equal to
LiberTEM's, which calls scikit-image, byte for byte; only the colour map's
table comes from colorcet (a dependency: pure Python, no dependencies of
its own), imported when the first vector field is coloured.

>>> rgb_from_2dvector(0, 0).tolist()
[127, 127, 127]
>>> rgb_from_2dvector(y=np.zeros((2, 2)), x=np.ones((2, 2))).shape
(2, 2, 3)
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

__all__ = ["rgb_from_2dvector", "make_colormap", "cyclic_colormap", "wheel_table", "rgb_to_luv", "luv_to_rgb",
           "CYCLIC_MAP"]

#: The colour map the direction is looked up in (registered with matplotlib by colorcet).
CYCLIC_MAP = "cet_cyclic_isoluminant"

#: LiberTEM's tweaks in CIELUV: lightness factor and colourfulness per unit of ``length / vmax``.
_LIGHTNESS = 0.8
_CHROMA = 2.2

# sRGB (IEC 61966-2-1) linear RGB -> CIE XYZ, the D65 2-degree white point, CIE's L* constants.
_XYZ_FROM_RGB = np.array([[0.412453, 0.357580, 0.180423],
                          [0.212671, 0.715160, 0.072169],
                          [0.019334, 0.119193, 0.950227]])
_RGB_FROM_XYZ = np.linalg.inv(_XYZ_FROM_RGB)
# transposed and contiguous: ``pixels @ matrix`` of a non-contiguous matrix misses BLAS (3x slower)
_XYZ_FROM_RGB_T = np.ascontiguousarray(_XYZ_FROM_RGB.T)
_RGB_FROM_XYZ_T = np.ascontiguousarray(_RGB_FROM_XYZ.T)
_WHITE = np.array([0.95047, 1.0, 1.08883])
_U0 = 4 * _WHITE[0] / (_WHITE[0] + 15 * _WHITE[1] + 3 * _WHITE[2])
_V0 = 9 * _WHITE[1] / (_WHITE[0] + 15 * _WHITE[1] + 3 * _WHITE[2])
_Y_LINEAR_BELOW = 0.008856  # Y/Yn below this: L* linear in Y
_L_LINEAR_BELOW = 7.999625  # the same point on the L* axis
_KAPPA = 903.3
_EPS = np.finfo(np.float64).eps  # keeps u', v' finite for black


def rgb_to_luv(rgb: Any) -> np.ndarray:
    """sRGB (floats in ``[0, 1]``, last axis R, G, B) as CIELUV ``(L*, u*, v*)`` under D65."""
    c = np.array(rgb, dtype=np.float64)
    shape = c.shape
    c = c.reshape(-1, 3)
    curved = c > 0.04045
    c[curved] = np.power((c[curved] + 0.055) / 1.055, 2.4)
    c[~curved] /= 12.92
    xyz = c @ _XYZ_FROM_RGB_T
    x, y, z = xyz[..., 0], xyz[..., 1], xyz[..., 2]
    lightness = y / _WHITE[1]
    cube = lightness > _Y_LINEAR_BELOW
    lightness[cube] = 116.0 * np.cbrt(lightness[cube]) - 16.0
    lightness[~cube] = _KAPPA * lightness[~cube]
    denominator = x + 15.0 * y + 3.0 * z + _EPS
    u = 13.0 * lightness * (4.0 * x / denominator - _U0)
    v = 13.0 * lightness * (9.0 * y / denominator - _V0)
    return np.stack([lightness, u, v], axis=-1).reshape(shape)


def luv_to_rgb(luv: Any) -> np.ndarray:
    """CIELUV ``(L*, u*, v*)`` under D65 as sRGB floats, clipped to ``[0, 1]`` (the inverse of :func:`rgb_to_luv`)."""
    luv = np.asarray(luv, dtype=np.float64)
    shape = luv.shape
    luv = luv.reshape(-1, 3)
    lightness, u, v = luv[..., 0], luv[..., 1], luv[..., 2]
    y = lightness.copy()
    cube = y > _L_LINEAR_BELOW
    y[cube] = np.power((y[cube] + 16.0) / 116.0, 3.0)
    y[~cube] = y[~cube] / _KAPPA
    y *= _WHITE[1]
    a = _U0 + u / (13.0 * lightness + _EPS)
    b = _V0 + v / (13.0 * lightness + _EPS)
    c = 3 * y * (5 * b - 3)
    z = ((a - 4) * c - 15 * a * b * y) / (12 * b)
    x = -(c / b + 3.0 * z)
    rgb = np.stack([x, y, z], axis=-1) @ _RGB_FROM_XYZ_T
    curved = rgb > 0.0031308
    rgb[curved] = 1.055 * np.power(rgb[curved], 1 / 2.4) - 0.055
    rgb[~curved] *= 12.92
    return np.clip(rgb, 0, 1, out=rgb).reshape(shape)


@functools.lru_cache(maxsize=1)
def _cyclic_map() -> Any:
    import colorcet  # noqa: F401  (registers its maps with matplotlib)
    from matplotlib import colormaps

    return colormaps[CYCLIC_MAP]


def rgb_from_2dvector(y: Any, x: Any, vmax: float | None = None) -> np.ndarray:
    """The vector field ``(y, x)`` as RGB ``uint8`` ``(*shape, 3)``, LiberTEM's colours (see the module docstring).

    ``vmax``: the length that counts as 1 (default: the longest finite
    vector; 1 if that is 0 or there is none). The direction's angle is
    ``arctan2(-y, -x)``, as LiberTEM's, so +x is red, +y green, -y purple,
    -x cyan. A vector with a NaN component comes out black.
    """
    from matplotlib.colors import Normalize

    y = np.asarray(y)
    x = np.asarray(x)
    length = np.sqrt(np.abs(y) ** 2 + np.abs(x) ** 2)
    if vmax is None:
        finite = length[np.isfinite(length)]
        vmax = float(finite.max()) if finite.size else 1.0
    if vmax == 0:
        vmax = 1.0
    scaled = np.minimum(length / vmax, 1)
    angle = np.arctan2(-y, -x)  # -0.0 stays -0.0: the same table entry as LiberTEM's
    shape = np.shape(angle)
    norm = Normalize(vmin=-np.pi, vmax=np.pi)
    hue = np.asarray(_cyclic_map()(norm(angle.reshape(-1)).reshape(shape), bytes=True))[..., :3]
    luv = rgb_to_luv(hue.astype(np.float64) * (1.0 / 255))
    luv[..., 0] *= _LIGHTNESS
    strength = scaled * _CHROMA
    luv[..., 1] *= strength
    luv[..., 2] *= strength
    with np.errstate(invalid="ignore"):
        rgb = luv_to_rgb(luv)
    return (np.nan_to_num(rgb, copy=False, nan=0.0) * 255).astype(np.uint8)


def make_colormap() -> Any:
    """``libertem_cyclic``: the colours of unit vectors at each whole degree, as a matplotlib colour map.

    Its value at ``(angle + pi) / (2 pi)`` (``angle = arctan2(y, x)``) is the
    colour :func:`rgb_from_2dvector` gives a full-length vector ``(y, x)``.
    """
    from matplotlib.colors import LinearSegmentedColormap

    radians = np.arange(360) / 180 * np.pi
    colours = rgb_from_2dvector(y=-np.sin(radians), x=-np.cos(radians)) / 255
    return LinearSegmentedColormap.from_list("libertem_cyclic", colours)


@functools.lru_cache(maxsize=1)
def cyclic_colormap() -> Any:
    """The ``libertem_cyclic`` colour map (:func:`make_colormap`), made once."""
    return make_colormap()


def wheel_table() -> dict[str, Any]:
    """What a browser needs to colour vectors as :func:`rgb_from_2dvector` does (``GET /v1/colourwheel``).

    ``luv``: the map's 256 colours in CIELUV, lightness already scaled; a
    direction ``t = (arctan2(-y, -x) + pi) / (2 pi)`` picks entry
    ``min(floor(256 t), 255)``, whose ``u``, ``v`` are multiplied by
    ``chroma * min(length / vmax, 1)``; the rest are the constants of
    :func:`luv_to_rgb` (bytes are ``floor(255 * rgb)``).
    """
    entries = np.asarray(_cyclic_map()(np.arange(256), bytes=True))[:, :3]
    luv = rgb_to_luv(entries.astype(np.float64) * (1.0 / 255))
    luv[:, 0] *= _LIGHTNESS
    return {"luv": luv.tolist(), "chroma": _CHROMA, "rgb_from_xyz": _RGB_FROM_XYZ.tolist(),
            "white": _WHITE.tolist(), "u0": float(_U0), "v0": float(_V0), "kappa": _KAPPA,
            "l_linear_below": _L_LINEAR_BELOW, "eps": float(_EPS)}
