"""`RadialFourierAnalysis`: Fourier coefficients over the angle of rings around a centre
(``create_radial_fourier_analysis``), on :class:`~raytile.udf.ApplyMasksUDF`.

For each of ``n_bins`` rings between ``ri`` and ``ro`` and each order
``o = 0 .. max_order`` one complex mask ``ring * exp(i * o * phi)`` is
applied to every frame (no FFT: a dot product per coefficient, sparse when
the rings are thin). Results per bin ``b`` and order ``o`` (LiberTEM's keys):
``dominant_b`` (the strongest order above 0, 0 if none reaches 20 % of the
bin's maximum), ``absolute_b_o``, ``phase_b_o``, ``complex_b_o``
(orders above 0 normalised by order 0); ``raw_results`` is the complex array
``(n_bins, max_order + 1, *nav)``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import sparse

from raytile import masks as _masks
from raytile.analysis.masks import BaseMasksAnalysis
from raytile.analysis.results import AnalysisResult, AnalysisResultSet, RadialFourierResultSet
from raytile.common.math import prod

__all__ = ["RadialFourierAnalysis", "radial_mask_factory"]


def radial_mask_factory(detector_y: int, detector_x: int, cx: float, cy: float, ri: float, ro: float, n_bins: int,
                        max_order: int, use_sparse: Any, dtype: Any = np.complex64) -> Callable[[], Any]:
    """A factory of the ``(n_bins * (max_order + 1), detector_y, detector_x)`` complex mask stack.

    Mask ``b * (max_order + 1) + o`` is ring ``b`` times ``exp(i * o * phi)``.
    """
    dtype = np.result_type(dtype, np.complex64)

    def stack() -> Any:
        rings = _masks.radial_bins(centerX=cx, centerY=cy, imageSizeX=detector_x, imageSizeY=detector_y, radius=ro,
                                   radius_inner=ri, n_bins=n_bins, use_sparse=bool(use_sparse), dtype=dtype)
        orders = np.arange(max_order + 1)
        _, phi = _masks.polar_map(centerX=cx, centerY=cy, imageSizeX=detector_x, imageSizeY=detector_y)
        modulator = np.exp(1j * phi[np.newaxis] * orders[:, np.newaxis, np.newaxis]).astype(dtype)
        if not use_sparse:
            return (rings[:, np.newaxis] * modulator).reshape((-1, detector_y, detector_x))
        coo = rings if isinstance(rings, sparse.COO) else sparse.COO(rings)
        b, y, x = coo.coords
        n_orders = len(orders)
        # every non-zero of every ring, once per order: (bin, order, y, x) -> ring value * modulator
        coords = np.stack([np.repeat(b, n_orders), np.tile(orders, len(b)), np.repeat(y, n_orders),
                           np.repeat(x, n_orders)])
        data = np.repeat(coo.data, n_orders) * modulator[coords[1], coords[2], coords[3]]
        out = sparse.COO(coords, data.astype(dtype), shape=(n_bins, n_orders, detector_y, detector_x))
        return out.reshape((-1, detector_y, detector_x))

    return stack


class RadialFourierAnalysis(BaseMasksAnalysis, id_="RADIAL_FOURIER"):
    """See the module docstring."""

    def get_parameters(self, parameters: dict) -> dict:
        sy, sx = self._sig_2d()
        cx = parameters.get("cx", sx / 2)
        cy = parameters.get("cy", sy / 2)
        ri = parameters.get("ri", 0)
        ro = parameters.get("ro", _masks.bounding_radius(cx, cy, sx, sy))
        n_bins = parameters.get("n_bins", 1)
        max_order = parameters.get("max_order", 24)
        mask_count = n_bins * (max_order + 1)
        bin_width = (ro - ri) / n_bins
        bin_area = np.pi * ro ** 2 - np.pi * (ro - bin_width) ** 2
        stack_bytes = mask_count * sy * sx * 8
        # dense when the stack fits a cache comfortably or the rings are wide; else scipy.sparse (LiberTEM's rule)
        default: Any = False if stack_bytes < 2 ** 18 or (bin_area / (sx * sy) > 0.05 and n_bins < 10) \
            else "scipy.sparse"
        return {"cx": cx, "cy": cy, "ri": ri, "ro": ro, "n_bins": n_bins, "max_order": max_order,
                "use_sparse": parameters.get("use_sparse", default), "mask_count": mask_count,
                "mask_dtype": np.complex64}

    def get_mask_factories(self) -> Any:
        sy, sx = self._sig_2d()
        p = self.parameters
        return radial_mask_factory(detector_y=sy, detector_x=sx, cx=p["cx"], cy=p["cy"], ri=p["ri"], ro=p["ro"],
                                   n_bins=p["n_bins"], max_order=p["max_order"], use_sparse=p["use_sparse"])

    def get_udf_results(self, udf_results: dict, roi: Any, damage: Any) -> AnalysisResultSet:
        shape = self.nav_shape
        orders = self.parameters["max_order"] + 1
        n_bins = self.parameters["n_bins"]
        raw = udf_results["intensity"].data.reshape((prod(shape), -1)).T.reshape((n_bins, orders, *shape))
        return RadialFourierResultSet(lambda: _results(raw, damage, n_bins, orders), raw_results=raw)


def _results(raw: np.ndarray, damage: Any, n_bins: int, orders: int) -> list[AnalysisResult]:
    """The analysis' results, made when first asked for (there are many)."""
    from raytile.viz.images import visualize_simple

    absolute = np.absolute(raw)
    normal = np.maximum(1, absolute[:, 0])
    valid = np.asarray(damage) & np.all(np.isfinite(absolute), axis=(0, 1))
    normalized = absolute[:, 1:] / normal[:, np.newaxis]
    have = bool(np.any(valid)) and orders > 1
    lo = float(np.min(normalized[..., valid])) if have else 0.0
    hi = float(np.max(normalized[..., valid])) if have else 1.0
    angle = np.angle(raw)
    threshold = absolute[:, 1:].reshape((n_bins, -1)).max(axis=1, initial=0) * 0.2
    below = np.all(absolute[:, 1:] < threshold[:, np.newaxis, np.newaxis, np.newaxis], axis=1)
    dominant = np.argmax(absolute[:, 1:], axis=1) + 1 if orders > 1 else np.zeros((n_bins, *raw.shape[2:]), int)
    dominant[below] = 0

    def pic(data: np.ndarray, **kw: Any) -> Callable[[], np.ndarray]:
        return lambda: visualize_simple(data, **kw)

    out: list[AnalysisResult] = []
    for b in range(n_bins):
        out.append(AnalysisResult(dominant[b], pic(dominant[b], colormap="tab20", vmin=0, vmax=20),
                                  key=f"dominant_{b}", title=f"dominant order of bin {b}",
                                  desc="Dominant Fourier component"))
        out.append(AnalysisResult(absolute[b, 0], pic(absolute[b, 0], damage=valid), key=f"absolute_{b}_0",
                                  title=f"absolute of bin {b} order 0", desc="Absolute value of Fourier component"))
        for o in range(1, orders):
            out.append(AnalysisResult(absolute[b, o], pic(absolute[b, o] / normal[b], vmin=lo, vmax=hi, damage=valid),
                                      key=f"absolute_{b}_{o}", title=f"absolute of bin {b} order {o}",
                                      desc="Absolute value of Fourier component"))
    for b in range(n_bins):
        for o in range(orders):
            out.append(AnalysisResult(angle[b, o], pic(angle[b, o], colormap="twilight", damage=valid),
                                      key=f"phase_{b}_{o}", title=f"phase of bin {b} order {o}",
                                      desc="Phase of Fourier component"))
    for b in range(n_bins):
        for o in range(orders):
            data = raw[b, o] if o == 0 else raw[b, o] / normal[b]
            vmax = (float(np.max(np.abs(data[..., valid]))) if np.any(valid) else 1.0) if o == 0 else hi
            out.append(AnalysisResult(data, _wheel(data, vmax), key=f"complex_{b}_{o}", title=f"bin {b} order {o}",
                                      desc="Fourier component"))
    return out


def _wheel(data: np.ndarray, vmax: float) -> Callable[[], np.ndarray]:
    from raytile.viz.images import rgb_from_2dvector

    return lambda: rgb_from_2dvector(x=data.real, y=data.imag, vmax=vmax)
