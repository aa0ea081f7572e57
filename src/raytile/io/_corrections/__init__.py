"""LiberTEM's ``libertem.io.corrections.*`` modules at their ported paths (see io/corrections.py)."""

__all__: list[str] = []
