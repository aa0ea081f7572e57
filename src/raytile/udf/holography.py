"""``libertem.udf.holography`` at its ported path: gone from LiberTEM (0.15) and so from raytile.

Importing it raises ImportError with LiberTEM's words: the holography code moved to LiberTEM-holo.
"""

raise ImportError(
    "The holography implementation is removed. Development has moved to "
    "https://github.com/LiberTEM/LiberTEM-holo (as in LiberTEM >= 0.15). Users who depend on the previous "
    "code can use LiberTEM <= 0.14.1 and migrate to the holography sub-project when appropriate. "
    "More information: https://github.com/LiberTEM/LiberTEM/pull/1689"
)
