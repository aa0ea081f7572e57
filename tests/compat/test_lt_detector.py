"""``libertem.io.corrections.detector.correct_dot_masks`` and ``CorrectError`` at their ported path, against
LiberTEM's own result on the same masks (tests/corrections/test_detector.py uses both)."""

from __future__ import annotations

import numpy as np
import pytest

lt_detector = pytest.importorskip("libertem.io.corrections.detector",
                                  reason="LiberTEM is not installed (pip install -e '.[test]')")

from raytile.io.corrections import detector  # noqa: E402

SIG = (9, 11)


def _inputs():
    rng = np.random.default_rng(13)
    masks = rng.random((3,) + SIG) - 0.5
    gain = rng.random(SIG) + 1
    excluded = np.array([[0, 4, 4, 8, 5], [0, 5, 6, 10, 2]])  # (ndim, n): a corner, two neighbours, an edge
    return masks, gain, excluded


@pytest.mark.parametrize("with_excluded", [False, True])
@pytest.mark.parametrize("kind", ["numpy", "sparse.COO"])
def test_correct_dot_masks_as_libertem(kind, with_excluded):
    import sparse

    masks, gain, excluded = _inputs()
    excl = excluded if with_excluded else None
    given = sparse.COO.from_numpy(np.where(np.abs(masks) > 0.3, masks, 0)) if kind == "sparse.COO" else masks
    ref = lt_detector.correct_dot_masks(given, gain, excl)
    got = detector.correct_dot_masks(given, gain, excl)
    assert type(got) is type(ref) and got.shape == ref.shape
    dense = (lambda a: a.todense()) if kind == "sparse.COO" else np.asarray
    np.testing.assert_allclose(dense(got), dense(ref), rtol=1e-12, atol=1e-12)
    # what the masks are for: applied to raw frames they give the masks applied to corrected frames
    frames = np.random.default_rng(3).random((4,) + SIG)
    corrected = detector.correct(frames, gain_map=gain, excluded_pixels=excl)
    np.testing.assert_allclose(frames.reshape(4, -1) @ dense(got).reshape(3, -1).T,
                               corrected.reshape(4, -1) @ dense(given).reshape(3, -1).T, rtol=1e-6)


@pytest.mark.parametrize("buffer, inplace", [
    (np.zeros((16, 16), dtype=np.float32, order="F"), False),
    (np.zeros((2, 16, 16), dtype=np.float32)[:, :8, :8], True),
])
def test_correct_refuses_a_buffer_that_is_not_c_contiguous_as_libertem(buffer, inplace):
    from raytile.common.errors import CorrectError

    with pytest.raises(lt_detector.CorrectError):
        lt_detector.correct(buffer=buffer, sig_shape=buffer.shape[-2:], inplace=inplace)
    with pytest.raises(CorrectError, match="C-contiguous"):
        detector.correct(buffer=buffer, sig_shape=buffer.shape[-2:], inplace=inplace)
    assert detector.CorrectError is CorrectError


def test_the_older_path_corrects_as_libertems():
    """``libertem.corrections.detector`` (LiberTEM's older path of the same functions) maps to raytile and
    corrects as LiberTEM's on the same frames."""
    from libertem.corrections import detector as lt_old_path

    from raytile.compat import rewrite_imports
    from raytile.corrections import detector as old_path

    assert "raytile.corrections.detector" in rewrite_imports("from libertem.corrections.detector import correct")
    masks, gain, excluded = _inputs()
    frames = np.random.default_rng(5).random((4,) + SIG) * 100
    dark = np.random.default_rng(6).random(SIG)
    ref = lt_old_path.correct(frames, dark_image=dark, gain_map=gain, excluded_pixels=excluded)
    got = old_path.correct(frames, dark_image=dark, gain_map=gain, excluded_pixels=excluded)
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    assert (old_path.correct, old_path.RepairValueError) == (detector.correct, detector.RepairValueError)
