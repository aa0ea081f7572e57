"""The example notebooks in examples/ run with a real Jupyter kernel (nbclient), and give numpy's numbers.

Each notebook runs in a temporary folder (it writes its small data file and
a ``results.npz`` there); every cell must run without an error, the cells
that plot must have image outputs, and the saved results must equal numpy
computed here from the same data.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SRC = Path(__file__).resolve().parent.parent / "src"


def _execute(name: str, workdir: Path, monkeypatch) -> nbformat.NotebookNode:
    nb = nbformat.read(EXAMPLES / name, as_version=4)
    # the kernel (a subprocess) imports this tree's raytile
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p))
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(workdir)}})
    client.execute()
    return nb


def _images(cell) -> int:
    return sum("image/png" in out.get("data", {}) for out in cell.get("outputs", []))


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _result_text(cell) -> str:
    return "".join(o["data"]["text/plain"] for o in cell.outputs if o.output_type == "execute_result")


def test_analysis_session_notebook(tmp_path, monkeypatch):
    from raytile import masks

    nb = _execute("analysis_session.ipynb", tmp_path, monkeypatch)
    cells = _code_cells(nb)
    assert all(c.execution_count is not None for c in cells)
    assert not [o for c in cells for o in c.outputs if o.output_type == "error"]
    plotting = [c for c in cells if "imshow" in c.source]
    assert len(plotting) == 4 and all(_images(c) >= 1 for c in plotting)
    assert "(16, 16, 32, 32)" in _result_text(cells[1])
    assert "<table>" in cells[-2].outputs[-1]["data"]["text/html"]  # ctx.display

    data = np.load(tmp_path / "scan.npy")
    res = np.load(tmp_path / "results.npz")
    np.testing.assert_allclose(res["sum"], data.sum(axis=(0, 1)), rtol=1e-5)
    ring = masks.ring(16, 16, 32, 32, radius=12, radius_inner=6)
    np.testing.assert_allclose(res["ring"], (data * ring).sum(axis=(2, 3)), rtol=1e-5)
    disk = masks.circular(16, 16, 32, 32, radius=10)
    weight = (data * disk).sum(axis=(2, 3))
    yy, xx = np.mgrid[0:32, 0:32]
    np.testing.assert_allclose(res["com_y"], (data * disk * yy).sum(axis=(2, 3)) / weight - 16, rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(res["com_x"], (data * disk * xx).sum(axis=(2, 3)) / weight - 16, rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_array_equal(res["pick"], data[12, 3])
    roi = np.zeros((16, 16), dtype=bool)
    roi[4:12, 4:12] = True
    np.testing.assert_allclose(res["ring_roi"][roi], (data * ring).sum(axis=(2, 3))[roi], rtol=1e-5)
    assert np.all(np.isnan(res["ring_roi"][~roi]))
    np.testing.assert_array_equal(res["frame_max"], data.max(axis=(2, 3)))


def test_live_plots_and_patch_notebook(tmp_path, monkeypatch):
    from raytile.udf import masks

    nb = _execute("live_plots_and_patch.ipynb", tmp_path, monkeypatch)
    cells = _code_cells(nb)
    assert not [o for c in cells for o in c.outputs if o.output_type == "error"]
    titles = _result_text(cells[1])
    assert "'SumUDF: intensity'" in titles and "'SumSigUDF: intensity'" in titles
    assert _images(cells[1]) == 2  # one figure per 2D channel
    assert _images(cells[2]) == 1 and _images(cells[3]) == 1

    res = np.load(tmp_path / "results.npz")
    data, roi = res["data"], res["roi"]
    np.testing.assert_allclose(res["sum"], data[roi].sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(res["sumsig"][roi], data[roi].sum(axis=(1, 2)), rtol=1e-5)
    ring = masks.ring(12, 12, 0, 8.0, (24, 24))
    np.testing.assert_allclose(res["patched"], (data * ring).sum(axis=(2, 3)), rtol=1e-5)
