"""Built-in stages, registered by kind when this package is imported.

| kind | module | what |
|---|---|---|
| copy, affine, clip, calibrate | elementwise | ``out = x``, ``x*scale+offset``, ``clip(x, lo, hi)``, ``(x-dark)*gain`` |
| binning | binning | sum or mean over ``factor`` x ``factor`` pixel blocks |
| centroids | centroids | Shack-Hartmann subaperture centroids -> slopes ``[x..., y...]`` |
| matvec | linalg | ``out = M @ x`` (reconstructor) |
| leaky_integrator, integrate | integrators | ``out = leak*out + gain*x``; sum of N inputs, emitted every N (multi-rate) |
| fft_magnitude | fft | ``abs(fft2(x))`` (optionally fft-shifted) |
| reduce | reduce | sum/mean/max/min/std over axes |
| constant, replay, sh_frames | sources | a fixed array; frames of a raytile data set; synthetic SH frames |
| sink | sink | keeps the last N values |
"""

from raytile.pipeline.kernels import (  # noqa: F401  (importing registers)
    binning, centroids, elementwise, fft, integrators, linalg, reduce, sink, sources)

__all__ = ["binning", "centroids", "elementwise", "fft", "integrators", "linalg", "reduce", "sink", "sources"]
