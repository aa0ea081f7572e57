"""Every Python code block in README.md and docs/*.md runs as written (issue 35): a failing block fails
the test of its file, naming the block's line.

Blocks of a file run in order in one namespace (a later block uses what an earlier one made, as a reader
does), in a temporary folder where the files the blocks name exist (written here, small) and ``examples``
links to the repository's. A block that cannot run in CI says so in its fence, with the reason:
"```python no-run: needs a Ray cluster at head-host" (kept rare; the test lists them and fails a mark
without a reason). Names a block leaves to the reader (``show``: your display, ``detector``: your frame
source, ``dark_frame``: your detector's dark frame) are given stand-ins in :data:`READER_NAMES`.

Files whose blocks start Ray (``rt.Context()``, ``LiveContext()``) run on the session's Ray cluster, in
this process, so the Contexts they make join it; every Context made is closed at the end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import raytile as rt

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(python[^\n]*)\n(.*?)^```\s*$", re.S | re.M)
#: At most this share of the blocks may be marked no-run.
MAX_NO_RUN_SHARE = 0.2


@dataclass
class Block:
    path: Path
    line: int
    info: str
    code: str

    @property
    def no_run(self) -> str | None:
        """The reason given for not running this block, or None for a block that runs."""
        rest = self.info[len("python"):].strip()
        if not rest:
            return None
        if not rest.startswith("no-run"):
            raise AssertionError(f"{self.path.name}:{self.line}: unknown fence info {self.info!r}")
        return rest[len("no-run"):].lstrip(":").strip()


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    return [Block(path, text[:m.start()].count("\n") + 1, m.group(1).strip(), m.group(2))
            for m in FENCE.finditer(text)]


def test_no_run_marks_are_rare_and_say_why():
    found = [b for p in DOCS for b in blocks(p)]
    assert len(found) >= 20  # the parser finds the blocks
    skipped = [b for b in found if b.no_run is not None]
    for b in skipped:
        assert len(b.no_run) >= 10, f"{b.path.name}:{b.line}: a no-run mark needs its reason: {b.info!r}"
    assert len(skipped) <= MAX_NO_RUN_SHARE * len(found), [f"{b.path.name}:{b.line}" for b in skipped]


# -- what the blocks need ---------------------------------------------------------------------------

def _shown(*arrays: Any) -> None:
    for a in arrays:
        assert np.all(np.isfinite(np.asarray(a, dtype=np.float64)))


#: Names the docs leave to the reader, with stand-ins.
READER_NAMES: dict[str, Any] = {
    "show": _shown,  # your display of a picture (and its damage)
    "update_plot": _shown,
    "user_moved_the_ring": lambda: False,
    "dark_frame": np.full((256, 256), 2.0, np.float32),  # your detector's dark frame and gain map
    "gain_map": np.ones((256, 256), np.float32),
    "detector": [np.ones((32, 256, 256), np.uint16)] * 8,  # your frame source: batches of frames
}


def _sparse_raw(path: Path, nbytes: int) -> None:
    with open(path, "wb") as f:  # holes read as zeros: a big file that costs no disk
        f.truncate(nbytes)


class _MerlinSim:
    """A Merlin simulator on the documented default ports (data 6342, control 6341)."""

    def __init__(self, frames: np.ndarray, nav: tuple[int, int], acquisitions: int):
        from raytile.live.detectors.merlin import MerlinSimulator

        self.sim = MerlinSimulator(frames, mode="U16", nav_shape=nav, data_port=6342, api_port=6341,
                                   acquisitions=acquisitions, num_frames=nav[0] * nav[1])

    def __enter__(self):
        try:
            self.sim.__enter__()
        except OSError as e:
            pytest.fail(f"the docs' default Merlin ports 6341/6342 are taken on this machine: {e}")
        return self

    def __exit__(self, *exc):
        self.sim.__exit__(*exc)


def _merlin_frames() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 100, size=(16, 256, 256)).astype(np.uint32)


def _formats_files(tmp: Path) -> None:
    from raytile.io.testing.blo import write_blo
    from raytile.io.testing.dectris import write_dectris
    from raytile.io.testing.dm import write_dm
    from raytile.io.testing.empad import write_empad
    from raytile.io.testing.frms6 import write_frms6, write_gain_mat
    from raytile.io.testing.k2is import write_k2is
    from raytile.io.testing.mrc import write_mrc
    from raytile.io.testing.seq import write_seq
    from raytile.io.testing.ser import write_ser
    from raytile.io.testing.tvips import write_tvips

    rng = np.random.default_rng(1)
    frames = rng.integers(0, 200, size=(16, 16, 16)).astype(np.uint16)
    mask = np.zeros((16, 16), np.uint32)
    mask[3, 4] = 1
    write_dectris(str(tmp), frames.repeat(4, axis=0), name="scan", pixel_mask=mask)
    write_k2is(tmp, rng.integers(0, 4096, size=(4, 1860, 2048)).astype(np.uint16), name="Capture",
               scan_shape=(2, 2))
    write_frms6(tmp, rng.integers(0, 200, size=(4, 32, 16)).astype(np.uint16),
                rng.integers(0, 20, size=(2, 32, 16)).astype(np.uint16), name="scan", scan_shape=(2, 2))
    write_gain_mat(tmp / "gain.mat", np.ones((64, 8), np.float32))
    write_empad(tmp, rng.random((16, 128, 128)).astype(np.float32), nav_shape=(4, 4), name="scan")
    write_mrc(tmp / "stack.mrc", frames)
    write_blo(tmp / "scan.blo", frames.reshape(4, 4, 16, 16).astype(np.uint8))
    write_dm(tmp / "scan.dm4", frames.reshape(4, 4, 16, 16), data_order_swapped=True)
    (tmp / "series").mkdir()
    for i in range(4):
        write_dm(tmp / "series" / f"img{i}.dm3", frames[i], version=3)
    write_seq(tmp / "scan.seq", frames)
    write_ser(tmp / "scan_1.ser", frames.reshape(4, 4, 16, 16))
    write_tvips(tmp, frames, name="scan")


@dataclass
class DocSetup:
    """What one document's blocks need: ``ray`` (they start Contexts on Ray), files written into the
    folder they run in, names they take from the text around them, and a context (a detector) to run in."""

    ray: bool = False
    files: Callable[[Path], None] | None = None
    names: Callable[[], dict[str, Any]] | None = None
    around: Callable[[], Any] | None = None


def _readme_files(tmp: Path) -> None:
    _sparse_raw(tmp / "scan.raw", 32 * 32 * 256 * 256 * 2)


SETUPS: dict[str, DocSetup] = {
    "README.md": DocSetup(ray=True, files=_readme_files,
                          around=lambda: _MerlinSim(_merlin_frames(), (4, 4), acquisitions=2)),
    # the formats' sections use the tour's `ctx` and SumUDF (README.md)
    "formats.md": DocSetup(files=_formats_files, names=lambda: {"ctx": rt.Context(executor="inline"),
                                                                "SumUDF": rt.udf.SumUDF}),
    "live.md": DocSetup(ray=True, around=lambda: _MerlinSim(_merlin_frames(), (32, 32), acquisitions=2)),
    "streams.md": DocSetup(ray=True),
}


def _runnable_docs() -> list[Any]:
    out = []
    for p in DOCS:
        todo = [b for b in blocks(p) if b.no_run is None]
        if todo:
            ray = SETUPS.get(p.name, DocSetup()).ray
            out.append(pytest.param(p, marks=[pytest.mark.ray] if ray else [], id=p.name))
    return out


class _Contexts:
    """Records every Context the blocks make, to close them all at the end."""

    def __init__(self, monkeypatch):
        self.made: list[Any] = []
        init = rt.Context.__init__
        made = self.made

        def recording(ctx, *args, **kwargs):
            init(ctx, *args, **kwargs)
            made.append(ctx)

        monkeypatch.setattr(rt.Context, "__init__", recording)

    def close(self) -> None:
        for ctx in reversed(self.made):
            ctx.close()


@pytest.mark.parametrize("doc", _runnable_docs())
def test_code_blocks_run(doc: Path, tmp_path, monkeypatch, request):
    setup = SETUPS.get(doc.name, DocSetup())
    if setup.ray:
        request.getfixturevalue("ray_context")  # Ray is up in this process: the blocks' Contexts join it
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    if setup.files:
        setup.files(tmp_path)
    contexts = _Contexts(monkeypatch)
    namespace: dict[str, Any] = {"__name__": f"docs_{doc.stem}", **READER_NAMES}
    if setup.names:
        namespace.update(setup.names())
    around = setup.around() if setup.around else None
    try:
        if around is not None:
            around.__enter__()
        for b in blocks(doc):
            if b.no_run is not None:
                continue
            try:
                exec(compile(b.code, f"{doc.name}:{b.line}", "exec"), namespace)
            except BaseException as e:
                raise AssertionError(f"the code block at {doc.name}:{b.line} fails: {type(e).__name__}: {e}") from e
    finally:
        if around is not None:
            around.__exit__(None, None, None)
        contexts.close()
