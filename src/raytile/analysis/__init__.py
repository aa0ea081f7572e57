"""LiberTEM's Analysis API: ready-made analyses (sum, pick, masks, disk, ring, point, centre of mass,
radial Fourier; standard deviation, sum over the signal, FFTs of a frame or of the sum, crystallinity
(ApplyFFTMask), FEM, clustering) that run raytile's UDFs and return annotated results with pictures.

>>> import raytile as rt
>>> ctx = rt.Context(executor="inline")
>>> res = ctx.run(ctx.create_ring_analysis(dataset=ds, ri=20, ro=60))
>>> res.intensity.raw_data, res.intensity.visualized, res.keys()

Never imports ray: the runs go through ``Context.run_udf``.
"""

from raytile.analysis.api import AnalysisMethods, run_analysis
from raytile.analysis.apply_fft_mask import ApplyFFTMask
from raytile.analysis.base import Analysis, AnalysisParameterError, BaseAnalysis, IncompatibleDataSet
from raytile.analysis.clust import ClusterAnalysis
from raytile.analysis.com import COMAnalysis
from raytile.analysis.fem import FEMAnalysis
from raytile.analysis.masks import (
    BaseMasksAnalysis, DiskMaskAnalysis, MasksAnalysis, PointMaskAnalysis, RingMaskAnalysis, SingleMaskAnalysis,
)
from raytile.analysis.pick import PickFrameAnalysis
from raytile.analysis.radialfourier import RadialFourierAnalysis
from raytile.analysis.rawfft import PickFFTFrameAnalysis
from raytile.analysis.results import (
    AnalysisResult, AnalysisResultSet, COMResultSet, MasksResultSet, PickResultSet, RadialFourierResultSet,
    SingleMaskResultSet, SumResultSet,
)
from raytile.analysis.sd import SDAnalysis
from raytile.analysis.sum import SumAnalysis
from raytile.analysis.sumfft import SumfftAnalysis
from raytile.analysis.sumsig import SumSigAnalysis

__all__ = [
    "AnalysisMethods", "run_analysis", "Analysis", "BaseAnalysis", "AnalysisParameterError", "IncompatibleDataSet",
    "COMAnalysis", "BaseMasksAnalysis", "MasksAnalysis", "SingleMaskAnalysis", "DiskMaskAnalysis",
    "RingMaskAnalysis", "PointMaskAnalysis", "PickFrameAnalysis", "RadialFourierAnalysis", "SumAnalysis",
    "AnalysisResult", "AnalysisResultSet", "SumResultSet", "PickResultSet", "MasksResultSet",
    "SingleMaskResultSet", "COMResultSet", "RadialFourierResultSet", "FEMAnalysis", "PickFFTFrameAnalysis",
    "SumfftAnalysis", "ApplyFFTMask", "SDAnalysis", "SumSigAnalysis", "ClusterAnalysis",
]
