"""Run LiberTEM-live 0.3.0's own test suite on raytile, as a LiberTEM-live user porting it would.

``python tools/libertem_live_suite.py [--mode inline|ray|both] [--cache DIR] [--failures]``

The sibling of ``tools/libertem_suite.py`` (LiberTEM's suite), sharing its
steps: download the sdist with pip (``libertem-live==0.3.0``), unpack its
``tests/`` and root ``conftest.py``, rewrite every ``libertem`` and
``libertem_live`` import with :func:`raytile.compat.rewrite_imports`, run
pytest once per mode and print passed / failed / errors / skipped per module.
What differs from LiberTEM's suite:

- **The simulators stay LiberTEM-live's.** ``from libertem_live.detectors.<d>.sim import ...``
  (``CameraSim``, ``DectrisSim``, ``TriggerClient`` ...) is the test's stand-in
  for the detector hardware, not code a user ports: those imports are pointed
  at the installed ``libertem_live`` (a test dependency) under the module name
  ``ltl_simulators.<d>``, so raytile's receivers talk to LiberTEM-live's
  senders over 127.0.0.1. Every other import goes through ``rewrite_imports``.
- **Context fixtures.** ``ltl_ctx``, ``ltl_ctx_fast`` and ``ctx_pipelined``
  (LiberTEM-live's inline and pipelined contexts) are a
  :class:`raytile.live.LiveContext` run inline (``--mode inline``) or on a
  private local Ray instance with 2 CPUs (``--mode ray``); LiberTEM-live's
  session-wide doctest fixtures (which start a pipelined executor and its
  simulators for every test) are not used: the suite runs no doctests.
- Test data LiberTEM-live does not ship (``default.mib``, the DECTRIS zmq
  dump, the Timepix3 ``.scr``) is absent; the tests that need it skip, as they
  do on LiberTEM-live without it.

Exclusions (``tools/libertem_live_suite_exclusions.txt``, each with its
reason) and the exit status are as in ``tools/libertem_suite.py``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import libertem_suite as core  # noqa: E402  (the sibling harness: download, rewrite, run, count)

PACKAGE = "libertem-live"
VERSION = "0.3.0"
SUITE = f"LiberTEM-live {VERSION}"
DEFAULT_EXCLUSIONS = core.HERE / "libertem_live_suite_exclusions.txt"
DEFAULT_CACHE = core.DEFAULT_CACHE.parent / "libertem_live_suite"
MARKERS = "not slow and not dist and not flaky and not compilation"
SIM_IMPORT = re.compile(r"\bfrom\s+libertem_live\.detectors\.(\w+)\.sim\s+import\b")


def keep_simulators(root: Path) -> int:
    """Point ``from libertem_live.detectors.<d>.sim import`` at ``ltl_simulators.<d>`` in every ``.py``
    file under ``root`` (before :func:`core.rewrite_tree`, which leaves that name alone); how many changed."""
    changed = 0
    for path in sorted(root.rglob("*.py")):
        src = path.read_text(encoding="utf-8")
        new = SIM_IMPORT.sub(r"from ltl_simulators.\1 import", src)
        if new != src:
            path.write_text(new, encoding="utf-8")
            changed += 1
    return changed


CONFTEST_HEAD = '''\
# Written by raytile's tools/libertem_live_suite.py: LiberTEM-live 0.3.0's root conftest.py,
# imports rewritten with raytile.compat.rewrite_imports (its simulators kept: ltl_simulators.<d>
# is libertem_live.detectors.<d>.sim), top-level statements guarded, and its context fixtures
# ported to raytile at the end.
import importlib as _importlib
import sys as _sys
import types as _types

_SKIPPED_AT_IMPORT = []
_sys.modules.setdefault("ltl_simulators", _types.ModuleType("ltl_simulators"))
for _det in ("merlin", "dectris", "asi_tpx3"):
    try:
        _sim = _importlib.import_module("libertem_live.detectors.%s.sim" % _det)
    except Exception as _e:  # e.g. a simulator's optional dependency is missing
        _SKIPPED_AT_IMPORT.append(("ltl_simulators." + _det, repr(_e)))
        continue
    _sys.modules["ltl_simulators." + _det] = _sim
    setattr(_sys.modules["ltl_simulators"], _det, _sim)
'''

LIVE_TAIL = '''

# ---- ported LiberTEM-live context fixtures (raytile) ----------------------------------
from raytile.live import LiveContext as _LiveContext


def _live_context():
    """LiberTEM-live's contexts: inline, or a LiveContext on the private 2-CPU Ray instance."""
    if _MODE == "ray":
        return _Shared(_LiveContext(executor=_ray_ctx().executor))
    return _LiveContext(executor="inline")


@_pytest.fixture
def ltl_ctx():
    return _live_context()


@_pytest.fixture
def ltl_ctx_fast():
    return _live_context()


@_pytest.fixture(scope="session")
def ctx_pipelined():
    return _live_context()


@_pytest.fixture(scope="session")
def ctx_pipelined_gpu():
    from raytile.utils.devices import detect
    d = detect()
    if not d["cudas"] or not d["has_cupy"]:
        _pytest.skip("No CUDA device or no CuPy, skipping CuPy test")
    return _live_context()


# LiberTEM-live's doctest-namespace fixtures are autouse and session-wide (a pipelined executor and
# three simulators for every test); the suite runs no doctests.
@_pytest.fixture
def add_np():
    pass


@_pytest.fixture
def add_helpers():
    pass


@_pytest.fixture
def add_sims():
    pass
'''

PYTEST_INI = f'''\
[pytest]
addopts = -m "{MARKERS}" -p no:cacheprovider
norecursedirs = .git
markers =
    slow: LiberTEM-live: slow
    dist: LiberTEM-live: distributed
    data: LiberTEM-live: needs test data
    functional: LiberTEM-live: functional
    with_numba: LiberTEM-live: numba
    flaky: LiberTEM-live: flaky
    compilation: LiberTEM-live: numba compilation benchmarks
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
timeout = 120
filterwarnings =
    error:coords should be an ndarray:DeprecationWarning
'''


def write_conftest(workdir: Path) -> None:
    """The ported root conftest (LiberTEM-live's, then the core harness's Ray helpers, then the live
    context fixtures) and a pytest.ini with LiberTEM-live's marker selection."""
    from raytile.compat import rewrite_imports

    original = (workdir / "conftest.py").read_text(encoding="utf-8")
    ported = core._guard_toplevel(rewrite_imports(SIM_IMPORT.sub(r"from ltl_simulators.\1 import", original)))
    text = CONFTEST_HEAD + ported + core.CONFTEST_TAIL + LIVE_TAIL
    (workdir / "conftest.py").write_text(text, encoding="utf-8")
    (workdir / "pytest.ini").write_text(PYTEST_INI, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tools/libertem_live_suite.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("inline", "ray", "both"), default="both")
    p.add_argument("--paths", nargs="*", default=["tests"], help="test paths inside LiberTEM-live's tree")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where the sdist is kept")
    p.add_argument("--workdir", type=Path, default=None, help="where the tests are unpacked (default: CACHE/work)")
    p.add_argument("--exclusions", type=Path, default=DEFAULT_EXCLUSIONS)
    p.add_argument("--timeout", type=float, default=900, help="seconds a mode's pytest run may take")
    p.add_argument("--target", type=float, default=95.0, help="pass rate (percent) for exit status 0")
    p.add_argument("--failures", action="store_true", help="list each failing test under its module")
    p.add_argument("pytest_args", nargs="*", help="after --: passed on to pytest")
    args = p.parse_args(argv)

    try:
        sdist = core.fetch_sdist(args.cache, PACKAGE, VERSION)
    except (subprocess.SubprocessError, OSError) as e:
        print(f"cannot get {PACKAGE}=={VERSION}'s sdist: {e}", file=sys.stderr)
        return 2
    workdir = args.workdir or args.cache / "work"
    core.extract(sdist, workdir)
    keep_simulators(workdir / "tests")
    core.rewrite_tree(workdir / "tests")
    write_conftest(workdir)
    exclusions = core.read_exclusions(args.exclusions)
    print(f"{SUITE} tests in {workdir}; {len(exclusions)} exclusions from {args.exclusions}")

    modes = ("inline", "ray") if args.mode == "both" else (args.mode,)
    ok = True
    for mode in modes:
        per = core.run_mode(workdir, mode, args.paths, exclusions, args.pytest_args, args.timeout)
        rate = core.print_table(mode, per, args.failures, suite=SUITE)
        ok = ok and rate >= args.target
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
