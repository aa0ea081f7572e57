"""Run LiberTEM 0.16.0's own test suite on raytile, as a LiberTEM user porting it would.

``python tools/libertem_suite.py [--mode inline|ray|both] [--ray-subset PATH ...] [--cache DIR]``

What it does, in order:

1. downloads LiberTEM's sdist (``pip download --no-deps --no-binary :all: libertem==0.16.0``)
   into a cache directory, once;
2. extracts its ``tests/`` into a fresh work directory and rewrites every
   ``libertem`` import of every ``.py`` file there with
   :func:`raytile.compat.rewrite_imports`, and nothing else;
3. writes a ``conftest.py`` beside it: LiberTEM's own root conftest (its data
   fixtures: hdf5, raw, npy, raw_csr files ...) with its imports rewritten the
   same way, each top-level statement that fails on raytile skipped rather than
   fatal, and LiberTEM's context fixtures ported: ``lt_ctx``, ``lt_ctx_fast``,
   ``inline_executor`` run inline (``--mode inline``) or on a private local
   Ray instance with 2 CPUs (``--mode ray``); the Dask, delayed and concurrent
   contexts always run on that Ray instance;
4. runs pytest on it (a subprocess per mode, LiberTEM's marker selection:
   not slow, not dist, not flaky, not compilation, not web_api), leaving out
   what ``tools/libertem_suite_exclusions.txt`` lists (each line with its reason);
5. prints passed / failed / errors / skipped per test module and the pass rate
   (passed out of passed + failed + errors).

Exit status: 0 if the pass rate of every mode run reaches ``--target``
(percent, default 95), else 1; 2 if the sdist cannot be had.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

VERSION = "0.16.0"
HERE = Path(__file__).resolve().parent
DEFAULT_EXCLUSIONS = HERE / "libertem_suite_exclusions.txt"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "raytile" / "libertem_suite"
MARKERS = "not slow and not dist and not flaky and not compilation and not web_api"


def fetch_sdist(cache: Path, package: str = "libertem", version: str = VERSION) -> Path:
    """``package``'s sdist (LiberTEM's by default) in ``cache``, downloaded with pip the first time."""
    cache.mkdir(parents=True, exist_ok=True)
    names = {f"{package}-{version}.tar.gz", f"{package.replace('-', '_')}-{version}.tar.gz"}

    def found() -> list[Path]:
        return sorted(p for p in cache.glob("*.tar.gz") if p.name in names)

    if found():
        return found()[0]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
           f"{package}=={version}", "-d", str(cache)]
    subprocess.run(cmd, check=True, timeout=600)
    if not found():
        raise FileNotFoundError(f"pip download left no {package}-{version}.tar.gz in {cache}")
    return found()[0]


def extract(sdist: Path, workdir: Path) -> Path:
    """``tests/`` and the root ``conftest.py`` of the sdist, unpacked into a fresh ``workdir``."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    prefix = sdist.name[:-len(".tar.gz")] + "/"  # the sdist's top folder: libertem-0.16.0/
    with tarfile.open(sdist) as tar:
        members = []
        for m in tar.getmembers():
            if not m.name.startswith(prefix) or not (m.isfile() or m.isdir()):
                continue
            rel = m.name[len(prefix):]
            if rel.startswith("tests/") or rel == "conftest.py":
                m.name = rel
                members.append(m)
        tar.extractall(workdir, members=members, filter="data")
    return workdir


def rewrite_tree(root: Path) -> int:
    """Rewrite the imports of every ``.py`` file under ``root`` with ``rewrite_imports``; how many changed."""
    from raytile.compat import rewrite_imports

    changed = 0
    for path in sorted(root.rglob("*.py")):
        src = path.read_text(encoding="utf-8")
        try:
            new = rewrite_imports(src)
        except SyntaxError:
            continue
        if new != src:
            path.write_text(new, encoding="utf-8")
            changed += 1
    return changed


def _guard_toplevel(source: str) -> str:
    """LiberTEM's conftest with each top-level statement other than a def/class made non-fatal.

    A name raytile lacks then fails only the fixtures that use it, not the whole run.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    for node in tree.body:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        text = "".join(lines[start - 1:node.end_lineno])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("pytest_benchmark_"):
            continue  # a hook of pytest-benchmark, which the suite does not need (pytest refuses unknown hooks)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(text)
        else:
            out.append("try:\n" + textwrap.indent(text, "    ")
                       + "except Exception as _e:  # raytile lacks something this line needs\n"
                       + "    _SKIPPED_AT_IMPORT.append((%d, repr(_e)))\n" % node.lineno)
    return "".join(out)


CONFTEST_HEAD = '''\
# Written by raytile's tools/libertem_suite.py: LiberTEM 0.16.0's root conftest.py,
# imports rewritten with raytile.compat.rewrite_imports, top-level statements guarded,
# and its context fixtures ported to raytile at the end.
_SKIPPED_AT_IMPORT = []
main_process_gpu = None
'''

CONFTEST_TAIL = '''

# ---- ported context fixtures (raytile) -------------------------------------------------
import os as _os
import sys as _sys
import pytest as _pytest
import raytile as _rt

_MODE = _os.environ.get("RAYTILE_LT_SUITE_MODE", "inline")
_RAY = []


def _worker_pythonpath():
    here = _os.path.dirname(_os.path.abspath(__file__))
    dirs = [here] + sorted({_os.path.dirname(p) for p in _glob_tests(here)})
    dirs += [p for p in _os.environ.get("PYTHONPATH", "").split(_os.pathsep) if p]
    return _os.pathsep.join(dirs)


def _glob_tests(here):
    import glob
    return glob.glob(_os.path.join(here, "tests", "**", "*.py"), recursive=True)


def _ray_ctx():
    """The private local Ray instance (2 CPUs) every Ray-backed fixture shares."""
    if not _RAY:
        _RAY.append(_rt.Context.make_local(
            cpus=2, gpus=0, runtime_env={"env_vars": {"PYTHONPATH": _worker_pythonpath()}}))
    return _RAY[0]


def pytest_sessionfinish(session, exitstatus):
    if _RAY:
        _RAY.pop().close()
        import ray
        ray.shutdown()


class _Shared:
    """The shared Ray Context, as a fixture hands it out: a test's ``close()`` leaves it open."""

    def __init__(self, ctx):
        self.__dict__["_ctx"] = ctx

    def __getattr__(self, name):
        return getattr(self.__dict__["_ctx"], name)

    def __setattr__(self, name, value):
        ctx, saved = self.__dict__["_ctx"], self.__dict__.setdefault("_saved", {})
        saved.setdefault(name, getattr(ctx, name, _Shared))  # what monkeypatch's undo (a delattr) restores
        setattr(ctx, name, value)

    def __delattr__(self, name):
        ctx, old = self.__dict__["_ctx"], self.__dict__.get("_saved", {}).pop(name, _Shared)
        if old is _Shared:
            delattr(ctx, name)
        else:
            setattr(ctx, name, old)

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def _context():
    if _MODE == "ray":
        return _Shared(_ray_ctx())
    return _rt.Context(executor="inline")


@_pytest.fixture
def inline_executor():
    return _rt.Context(executor="inline").executor


@_pytest.fixture
def inline_executor_fast():
    return _rt.Context(executor="inline").executor


@_pytest.fixture
def lt_ctx():
    return _context()


@_pytest.fixture
def lt_ctx_fast():
    return _context()


@_pytest.fixture
def delayed_executor():
    return _ray_ctx().executor


@_pytest.fixture
def delayed_ctx():
    return _Shared(_ray_ctx())


@_pytest.fixture
def dask_executor():
    return _ray_ctx().executor


@_pytest.fixture
def concurrent_executor():
    return _ray_ctx().executor


@_pytest.fixture
def concurrent_ctx():
    return _Shared(_ray_ctx())


@_pytest.fixture
def local_cluster_ctx():
    return _Shared(_ray_ctx())


@_pytest.fixture
def dist_ctx():
    return _Shared(_ray_ctx())


@_pytest.fixture
def shared_dist_ctx():
    return _Shared(_ray_ctx())


# LiberTEM's doctest-namespace fixtures are autouse; the suite runs no doctests,
# and they would make every test depend on the hdf5 and raw fixtures.
@_pytest.fixture
def auto_ctx():
    pass


@_pytest.fixture
def auto_ds():
    pass


@_pytest.fixture
def auto_libs():
    pass


@_pytest.fixture
def auto_libertem():
    pass


@_pytest.fixture
def auto_files():
    pass
'''

PYTEST_INI = f'''\
[pytest]
addopts = -m "{MARKERS}" -p no:cacheprovider
markers =
    slow: LiberTEM: slow
    web_api: LiberTEM: web API
    dist: LiberTEM: distributed
    with_numba: LiberTEM: numba
    flaky: LiberTEM: flaky
    compilation: LiberTEM: numba compilation benchmarks
    benchmark: LiberTEM: benchmarks
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
timeout = 120
filterwarnings =
    error:coords should be an ndarray:DeprecationWarning
    error:overflow encountered in scalar negative:RuntimeWarning
'''


def write_conftest(workdir: Path) -> None:
    """The ported root conftest and a pytest.ini (LiberTEM's marker selection, no plugins it alone needs)."""
    from raytile.compat import rewrite_imports

    original = (workdir / "conftest.py").read_text(encoding="utf-8")
    ported = _guard_toplevel(rewrite_imports(original))
    (workdir / "conftest.py").write_text(CONFTEST_HEAD + ported + CONFTEST_TAIL, encoding="utf-8")
    (workdir / "pytest.ini").write_text(PYTEST_INI, encoding="utf-8")


@dataclass(frozen=True)
class Exclusion:
    """One test or module left out, and why."""

    nodeid: str
    reason: str


def read_exclusions(path: Path) -> list[Exclusion]:
    """``nodeid  # reason`` lines; blank lines and lines starting with ``#`` are skipped. A reason is required."""
    out: list[Exclusion] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        nodeid, sep, reason = line.partition("#")
        if not sep or not reason.strip():
            raise ValueError(f"{path}:{n}: exclusion {nodeid.strip()!r} has no reason ('nodeid  # reason')")
        out.append(Exclusion(nodeid.strip(), reason.strip()))
    return out


@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def ran(self) -> int:
        return self.passed + self.failed + self.errors


def _module_of(classname: str, name: str, file: str | None) -> str:
    if file:
        return file
    if not classname:  # a collection error: junit names the module in ``name``
        return name.replace(".", "/") + ("" if name.endswith(".py") else ".py")
    parts = classname.split(".")
    # ``tests.udf.test_sum.TestX`` -> tests/udf/test_sum.py
    for i in range(len(parts), 0, -1):
        if parts[i - 1].startswith("test_") or parts[i - 1] in ("conftest",):
            return "/".join(parts[:i]) + ".py"
    return "/".join(parts) + ".py"


def read_junit(path: Path) -> dict[str, Counts]:
    """Per test module: the counts in a pytest junit XML file."""
    per: dict[str, Counts] = defaultdict(Counts)
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        mod = _module_of(case.get("classname", ""), case.get("name", ""), case.get("file"))
        c = per[mod]
        tags = {child.tag for child in case}
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        if "error" in tags:
            c.errors += 1
            c.failures.append(test)
        elif "failure" in tags:
            c.failed += 1
            c.failures.append(test)
        elif "skipped" in tags:
            c.skipped += 1
        else:
            c.passed += 1
    return dict(per)


def run_mode(workdir: Path, mode: str, paths: list[str], exclusions: list[Exclusion],
             pytest_args: list[str], timeout: float) -> dict[str, Counts]:
    """Run pytest in ``workdir`` with the context fixtures in ``mode``; counts per module."""
    junit = workdir / f"junit-{mode}.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-rN", "--tb=no", f"--junitxml={junit}",
           "-o", "junit_family=xunit1", "-p", "no:randomly", "--continue-on-collection-errors"]
    for ex in exclusions:
        if "::" in ex.nodeid or not ex.nodeid.endswith(".py") and not ex.nodeid.endswith("/"):
            cmd.append(f"--deselect={ex.nodeid}")
        else:
            cmd.append(f"--ignore={ex.nodeid}")
    cmd += pytest_args + paths
    env = dict(os.environ, RAYTILE_LT_SUITE_MODE=mode, RAY_DISABLE_USAGE_STATS="1",
               RAY_USAGE_STATS_ENABLED="0", NUMBA_NUM_THREADS="2")
    log = workdir / f"pytest-{mode}.log"
    if junit.exists():
        junit.unlink()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        _wait(proc, junit, timeout, mode)
    if not junit.exists():
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        print(f"[{mode}] pytest reported no results; the end of {log}:", *tail, sep="\n", file=sys.stderr)
        return {}
    return read_junit(junit)


def _wait(proc: subprocess.Popen, junit: Path, timeout: float, mode: str, linger: float = 60.0) -> None:
    """Wait for pytest; stop its process group past ``timeout``, or ``linger`` s after it wrote its
    report and did not exit (measured: a session that used Ray can hang in interpreter shutdown)."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        now = time.monotonic()
        done_at = junit.stat().st_mtime if junit.exists() else None
        if now > deadline or (done_at is not None and time.time() - done_at > linger):
            if now > deadline:
                print(f"[{mode}] pytest ran past {timeout:.0f} s and was stopped", file=sys.stderr)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(10)
                    break
                except subprocess.TimeoutExpired:
                    continue
            return
        time.sleep(1.0)


def print_table(mode: str, per: dict[str, Counts], show_failures: bool, suite: str = f"LiberTEM {VERSION}") -> float:
    """Print one mode's per-module table; the pass rate in percent."""
    total = Counts()
    width = max([len(m) for m in per] + [20])
    print(f"\n== {suite} suite on raytile, {mode} ==")
    print(f"{'module':<{width}} {'pass':>5} {'fail':>5} {'error':>5} {'skip':>5}")
    for mod in sorted(per):
        c = per[mod]
        print(f"{mod:<{width}} {c.passed:>5} {c.failed:>5} {c.errors:>5} {c.skipped:>5}")
        total.passed += c.passed
        total.failed += c.failed
        total.errors += c.errors
        total.skipped += c.skipped
        if show_failures:
            for f in c.failures:
                print(f"    FAILED {f}")
    rate = 100.0 * total.passed / total.ran if total.ran else 0.0
    print(f"{'total':<{width}} {total.passed:>5} {total.failed:>5} {total.errors:>5} {total.skipped:>5}"
          f"   pass rate {rate:.1f} % of {total.ran}")
    return rate


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tools/libertem_suite.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("inline", "ray", "both"), default="both")
    p.add_argument("--paths", nargs="*", default=["tests"],
                   help="test paths inside LiberTEM's tree for the inline run (default: tests)")
    p.add_argument("--ray-subset", nargs="*", default=None,
                   help="test paths for the Ray run (default: the same as --paths)")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where the sdist is kept")
    p.add_argument("--workdir", type=Path, default=None, help="where the tests are unpacked (default: CACHE/work)")
    p.add_argument("--exclusions", type=Path, default=DEFAULT_EXCLUSIONS)
    p.add_argument("--timeout", type=float, default=1800, help="seconds a mode's pytest run may take")
    p.add_argument("--target", type=float, default=95.0, help="pass rate (percent) for exit status 0")
    p.add_argument("--failures", action="store_true", help="list each failing test under its module")
    p.add_argument("pytest_args", nargs="*", help="after --: passed on to pytest")
    args = p.parse_args(argv)

    try:
        sdist = fetch_sdist(args.cache)
    except (subprocess.SubprocessError, OSError) as e:
        print(f"cannot get libertem=={VERSION}'s sdist: {e}", file=sys.stderr)
        return 2
    workdir = args.workdir or args.cache / "work"
    extract(sdist, workdir)
    rewrite_tree(workdir / "tests")
    write_conftest(workdir)
    exclusions = read_exclusions(args.exclusions)
    print(f"LiberTEM {VERSION} tests in {workdir}; {len(exclusions)} exclusions from {args.exclusions}")

    modes = ("inline", "ray") if args.mode == "both" else (args.mode,)
    ok = True
    for mode in modes:
        paths = args.paths if mode == "inline" or args.ray_subset is None else args.ray_subset
        per = run_mode(workdir, mode, paths, exclusions, args.pytest_args, args.timeout)
        rate = print_table(mode, per, args.failures)
        ok = ok and rate >= args.target
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
