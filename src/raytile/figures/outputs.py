"""Where a command's results go: an ``.npz`` and its PNGs beside it, never over an earlier output.

``raytile run --out r.npz`` writes ``r.npz``, ``r-sum.png``, ``r-sumsig.png``,
... If any of those files exists already, the whole set goes to the first
free numbered name instead (``r-1.npz``, ``r-1-sum.png``; then ``r-2``, ...)
and the command says where: an earlier result is never overwritten
silently, and a result never sits beside PNGs of another run.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> (d / "r.npz").write_bytes(b"")
0
>>> npz, pngs = free_outputs(d / "r.npz", ["sum"])
>>> npz.name, pngs["sum"].name
('r-1.npz', 'r-1-sum.png')
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
from matplotlib.figure import Figure

from raytile.figures.images import save_figure

__all__ = ["free_outputs", "npz_path", "write_results"]


def _names(out: Path, stem: str, figures: Iterable[str]) -> tuple[Path, dict[str, Path]]:
    return out.with_name(stem + ".npz"), {n: out.with_name(f"{stem}-{n}.png") for n in figures}


def _stem(out: Path) -> str:
    return out.name[:-4] if out.name.endswith(".npz") else out.name


def npz_path(out: str | Path) -> Path:
    """The ``.npz`` that ``out`` names when it is free (``out``, with ``.npz`` added if it lacks it)."""
    out = Path(out)
    return out.with_name(_stem(out) + ".npz")


def free_outputs(out: str | Path, figures: Iterable[str]) -> tuple[Path, dict[str, Path]]:
    """The ``.npz`` path and the PNG path of each figure name for ``out``, none of them an existing file:
    ``out`` itself when its set is free, else the first free ``<stem>-<n>``."""
    out = Path(out)
    stem = _stem(out)
    names = list(figures)
    for candidate in itertools.chain([stem], (f"{stem}-{n}" for n in itertools.count(1))):
        npz, pngs = _names(out, candidate, names)
        if not npz.exists() and not any(p.exists() for p in pngs.values()):
            return npz, pngs
    raise AssertionError("unreachable")  # itertools.count never ends


def write_results(out: str | Path, arrays: Mapping[str, np.ndarray], figures: Mapping[str, Figure]) -> list[Path]:
    """Save ``arrays`` as an ``.npz`` and ``figures`` as PNGs beside it (names from :func:`free_outputs`:
    nothing existing is overwritten); the paths written, the ``.npz`` first. The folder is made if needed."""
    npz, pngs = free_outputs(out, figures)
    npz.parent.mkdir(parents=True, exist_ok=True)
    with open(npz, "xb") as f:  # "x": a file that appeared since free_outputs looked is not overwritten either
        np.savez(f, **arrays)  # type: ignore[arg-type]
    for name, fig in figures.items():
        save_figure(fig, pngs[name])
    return [npz, *pngs.values()]
