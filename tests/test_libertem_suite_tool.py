"""tools/libertem_suite.py's own parts: exclusions need reasons, the ported conftest survives names
raytile lacks, and the per-module counts are what pytest reported (a real pytest run on a tiny tree)."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

TOOL = pathlib.Path(__file__).resolve().parent.parent / "tools" / "libertem_suite.py"


@pytest.fixture(scope="module")
def suite():
    spec = importlib.util.spec_from_file_location("libertem_suite", TOOL)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["libertem_suite"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop("libertem_suite", None)


def test_exclusions_need_a_reason(suite, tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("# comment\n\ntests/server/  # the web GUI\ntests/a.py::test_x  # private name\n")
    assert [(e.nodeid, e.reason) for e in suite.read_exclusions(good)] == [
        ("tests/server/", "the web GUI"), ("tests/a.py::test_x", "private name")]
    bad = tmp_path / "bad.txt"
    bad.write_text("tests/a.py::test_y\n")
    with pytest.raises(ValueError, match="no reason"):
        suite.read_exclusions(bad)


def test_the_shipped_exclusions_all_have_reasons(suite):
    assert all(e.reason for e in suite.read_exclusions(suite.DEFAULT_EXCLUSIONS))


def test_guarded_conftest_survives_a_missing_name(suite):
    src = ("import os\nfrom raytile.no_such_module import Thing\nX = Thing()\n"
           "@decorator_that_is_fine\ndef f():\n    return os.sep\n")
    out = suite._guard_toplevel(src)
    ns = {"_SKIPPED_AT_IMPORT": [], "decorator_that_is_fine": lambda fn: fn}
    exec(out, ns)  # noqa: S102 - the generated conftest text
    assert ns["f"]() == os.sep
    assert [line for line, _ in ns["_SKIPPED_AT_IMPORT"]] == [2, 3]


def test_counts_per_module_from_a_real_run(suite, tmp_path):
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    (tmp_path / "tests" / "sub" / "test_a.py").write_text(
        "import pytest\n\ndef test_ok():\n    pass\n\ndef test_bad():\n    assert 0\n\n"
        "@pytest.mark.skip\ndef test_skip():\n    pass\n")
    (tmp_path / "tests" / "test_b.py").write_text("import no_such_module_i36a\n")
    junit = tmp_path / "j.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                    "-o", "junit_family=xunit1", "--continue-on-collection-errors", "tests"],
                   cwd=tmp_path, capture_output=True, timeout=120)
    per = suite.read_junit(junit)
    a, b = per["tests/sub/test_a.py"], per["tests/test_b.py"]
    assert (a.passed, a.failed, a.errors, a.skipped) == (1, 1, 0, 1)
    assert (b.passed, b.failed, b.errors, b.skipped) == (0, 0, 1, 0)


def test_shared_ray_context_survives_monkeypatch_undo(suite):
    """``monkeypatch.setattr(lt_ctx, "plot_class", ...)`` on the Ray fixtures' shared Context: the undo
    (pytest deletes what it set on the wrapper) restores the Context's own value."""
    ns: dict = {"__file__": str(TOOL)}
    exec(suite.CONFTEST_TAIL, ns)  # noqa: S102 - the generated conftest text

    class Ctx:
        _plot_class = None

        @property
        def plot_class(self):
            return self._plot_class or "default"

        @plot_class.setter
        def plot_class(self, value):
            self._plot_class = value

    ctx = Ctx()
    ctx.other = 1
    shared = ns["_Shared"](ctx)
    mp = pytest.MonkeyPatch()
    mp.setattr(shared, "plot_class", "gms")
    mp.setattr(shared, "other", 2)
    assert (ctx.plot_class, shared.plot_class, ctx.other) == ("gms", "gms", 2)
    mp.undo()
    assert (ctx.plot_class, ctx.other) == ("default", 1)
