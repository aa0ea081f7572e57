"""LiberTEM's ``libertem.executor`` paths: executors a Context can be given.

``from libertem.executor.inline import InlineJobExecutor`` ports to
:mod:`raytile.executor.inline`; raytile's Ray executor is made by the Context
(``Context()``, ``Context.make_local``), not by hand.
"""

__all__: list[str] = []
