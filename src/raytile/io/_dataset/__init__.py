"""LiberTEM's ``libertem.io.dataset.*`` modules at their ported paths.

``raytile.io.dataset`` is a module (io/dataset.py) whose package path is this
directory, so ``from raytile.io.dataset.memory import MemoryDataSet`` (what
``from libertem.io.dataset.memory import MemoryDataSet`` becomes) finds
io/_dataset/memory.py. The modules here hold LiberTEM's names and
parameters; the formats themselves live in :mod:`raytile.io.formats`.
"""

__all__: list[str] = []
