"""``libertem.contrib`` at its ported path: tools built on the public API (converting data sets)."""

__all__: list[str] = []
