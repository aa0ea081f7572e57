"""`AnalysisResult` and `AnalysisResultSet`: what :meth:`Context.run` returns for an Analysis.

They follow ``libertem.common.analysis``: a result set is addressed by
attribute (``res.intensity``), by key (``res["intensity"]``), by position
(``res[0]``), iterated, and has ``len()`` and ``keys()``. Each result has
``raw_data`` (the numbers, nav- or sig-shaped), ``visualized`` (an RGB(A)
image, computed on first access), ``key``, ``title`` and ``desc``.

>>> import numpy as np
>>> rs = AnalysisResultSet([AnalysisResult(np.ones((2, 2)), np.zeros((2, 2, 4)), "t", "d", "intensity")])
>>> rs.intensity.title, rs["intensity"] is rs[0], len(rs), rs.keys()
('t', True, 1, ['intensity'])
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence, Union

import numpy as np

__all__ = [
    "AnalysisResult", "AnalysisResultSet", "SumResultSet", "PickResultSet", "MasksResultSet",
    "SingleMaskResultSet", "COMResultSet", "RadialFourierResultSet",
]


class AnalysisResult:
    """One result of an Analysis: ``raw_data`` with its picture ``visualized``, ``key``, ``title``, ``desc``.

    ``visualized`` may be given as a callable; it is then called on first
    access (results of large analyses are pictured only when looked at).
    ``np.asarray(result)`` is ``raw_data``.
    """

    def __init__(self, raw_data: Any, visualized: Any, title: str, desc: str, key: str,
                 include_in_download: bool = True):
        self.raw_data = raw_data
        self._visualized = visualized
        self.title = title
        self.desc = desc
        self.key = key
        self.include_in_download = include_in_download

    @property
    def visualized(self) -> Any:
        """The result as an RGB(A) ``uint8`` image (``(Y, X, 3|4)``)."""
        if callable(self._visualized):
            self._visualized = self._visualized()
        return self._visualized

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.raw_data, dtype=dtype)

    def __repr__(self) -> str:
        return f"<AnalysisResult: {self.key}>"

    def __str__(self) -> str:
        return "".join(f"{k}: {getattr(self, k)}\n" for k in ("title", "desc", "key", "raw_data", "visualized"))


_Results = Union[Sequence[AnalysisResult], Callable[[], Sequence[AnalysisResult]]]


class AnalysisResultSet:
    """The results of one Analysis run, by attribute, key, position or iteration.

    ``results`` may be a callable returning the list (made on first use);
    ``raw_results`` holds the underlying numbers where an analysis has them
    in one array (the radial Fourier analysis).
    """

    def __init__(self, results: _Results, raw_results: Any = None):
        self._results = results
        self.raw_results = raw_results

    @property
    def results(self) -> list[AnalysisResult]:
        """The results as a list, in the analysis' order."""
        if callable(self._results):
            self._results = self._results()
        return list(self._results)

    def __getattr__(self, key: str) -> AnalysisResult:
        if key.startswith("_"):  # copy/pickle probe private names before __init__ ran
            raise AttributeError(key)
        for result in self.results:
            if result.key == key:
                return result
        raise AttributeError(f"result with key '{key}' not found, have: {', '.join(self.keys())}")

    def __getitem__(self, key: Union[str, int, slice]) -> Any:
        if isinstance(key, str):
            return self.__getattr__(key)
        return self.results[key]

    def __len__(self) -> int:
        return len(self.results)

    def __iter__(self) -> Iterator[AnalysisResult]:
        return iter(self.results)

    def keys(self) -> list[str]:
        """The results' keys, in order."""
        return [r.key for r in self.results]

    def __repr__(self) -> str:
        return repr(self.results)


class SumResultSet(AnalysisResultSet):
    """Results of the sum analysis: ``intensity`` (log-scaled picture), ``intensity_lin``."""


class PickResultSet(AnalysisResultSet):
    """Results of the pick analysis: ``intensity`` (the frame, log picture), ``intensity_lin``."""


class MasksResultSet(AnalysisResultSet):
    """Results of the mask analysis: ``mask_0`` .. ``mask_<n-1>`` (nav-shaped), complex parts if complex."""


class SingleMaskResultSet(AnalysisResultSet):
    """Results of disk, ring and point analyses: ``intensity`` (lin), ``intensity_log`` (nav-shaped)."""


class COMResultSet(AnalysisResultSet):
    """Results of the centre-of-mass analysis: ``field``, ``magnitude``, ``divergence``, ``curl``, ``x``,
    ``y`` (divergence and curl when every nav dim is larger than 1)."""


class RadialFourierResultSet(AnalysisResultSet):
    """Results of the radial Fourier analysis: per bin ``b`` ``dominant_b``, ``absolute_b_o``,
    ``phase_b_o``, ``complex_b_o`` for each order ``o``; ``raw_results`` ``(n_bins, orders, *nav)``."""
