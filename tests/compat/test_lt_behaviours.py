"""Behaviours LiberTEM 0.16 has and raytile must share (issue 36, item 3), each against LiberTEM's own result.

Every case runs the same call on the same data with LiberTEM's inline
Context and with raytile (inline, and on Ray where a worker is involved), and
compares the results, the warning or the exception type.
"""

from __future__ import annotations

import numpy as np
import pytest

lt_api = pytest.importorskip("libertem.api", reason="LiberTEM is not installed (pip install -e '.[test]')")

import raytile as rt  # noqa: E402


@pytest.fixture(scope="module")
def lt_ctx():
    return lt_api.Context.make_with("inline")


# --- wrong results ---------------------------------------------------------------------------------------------


def test_com_analysis_of_complex_data_keeps_the_imaginary_part(lt_ctx, inline_ctx):
    data = np.zeros((2, 3, 4, 4), dtype=np.complex64)
    data[..., 1, 2] = 1
    data[..., 2, 1] = 1j
    data[1, 2, 3, 3] = 2 - 1j
    ref = lt_ctx.run(lt_ctx.create_com_analysis(dataset=lt_ctx.load("memory", data=data), cx=0, cy=0))
    got = inline_ctx.run(inline_ctx.create_com_analysis(dataset=inline_ctx.load("memory", data=data), cx=0, cy=0))
    assert list(got.keys()) == list(ref.keys())
    for key in ref.keys():
        np.testing.assert_allclose(got[key].raw_data, ref[key].raw_data, rtol=1e-6)
    assert got.x_imag.raw_data[0, 0] == pytest.approx(-0.5)  # scipy.ndimage.center_of_mass: 1.5-0.5j
