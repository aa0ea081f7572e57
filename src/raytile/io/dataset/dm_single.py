"""``libertem.io.dataset.dm_single`` at its ported path: LiberTEM's ``SingleDMDataSet`` (one ``.dm3``/``.dm4``
file, ``force_c_order``, ``dataset_index``) is raytile's ``DMDataSet`` given a ``path``
(:mod:`raytile.io.formats.dm`), which also reads stacks of files."""

from raytile.io.formats.dm import DMDataSet as SingleDMDataSet

__all__ = ["SingleDMDataSet"]
