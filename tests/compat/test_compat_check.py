"""``raytile.compat``: the import rewrite and ``python -m raytile.compat.check``. No LiberTEM needed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import raytile as rt
from raytile.compat import Unmapped, find_unmapped, load_ported, rewrite_imports
from raytile.compat.check import main

UDF_SOURCE = textwrap.dedent('''\
    """A LiberTEM UDF; the word libertem in this docstring stays."""
    import numpy as np, libertem.common.math
    from libertem.udf import (
        UDF,
    )
    from libertem.common.buffers import reshaped_view  # from libertem.x import y
    from .relative import thing  # noqa
    import libertem.masks as lmasks

    NAME = "libertem"


    class FrameSum(UDF):
        def get_result_buffers(self):
            from libertem.common.math import prod
            return {"s": self.buffer(kind="nav", dtype="float64")}

        def process_frame(self, frame):
            self.results.s[:] = reshaped_view(frame, (-1,)).sum() + 0 * lmasks.circular(1, 1, 3, 3, 1).sum()
    ''')


def test_rewrite_imports_touches_import_statements_only():
    out = rewrite_imports(UDF_SOURCE)
    assert "import numpy as np, raytile.common.math; import raytile as libertem\n" in out  # keeps the name
    assert "from raytile.udf import (\n    UDF,\n)" in out
    assert "from raytile.common.buffers import reshaped_view  # from libertem.x import y" in out
    assert "from .relative import thing" in out
    assert "import raytile.masks as lmasks" in out
    assert "        from raytile.common.math import prod\n" in out  # inside a function
    assert 'NAME = "libertem"' in out and "the word libertem in this docstring" in out
    assert out.count("libertem") == 4  # docstring, comment, string, the kept name
    assert rewrite_imports(out) == out


@pytest.mark.parametrize("src, want", [
    ("import libertem\n", "import raytile as libertem\n"),
    ("import os, libertem\n", "import os, raytile as libertem\n"),
    ("import libertem.udf.masks\n", "import raytile.udf.masks; import raytile as libertem\n"),
    ("import libertem as lt\n", "import raytile as lt\n"),
    ("import os, libertem.udf as u, sys\n", "import os, raytile.udf as u, sys\n"),
    ("from libertem import masks\n", "from raytile import masks\n"),
    ("from libertem.udf.base import UDF as libertem\n", "from raytile.udf.base import UDF as libertem\n"),
    ("import libertem_holo\nfrom libertem_holo import x\n", "import libertem_holo\nfrom libertem_holo import x\n"),
    ("x = 1; import libertem.udf; y = 'libertem'\n",
     "x = 1; import raytile.udf; import raytile as libertem; y = 'libertem'\n"),
    ("s = 'é'; from libertem.udf import UDF\n", "s = 'é'; from raytile.udf import UDF\n"),
    # LiberTEM-live: ``libertem_live`` -> ``raytile.live``
    ("import libertem_live\n", "import raytile.live as libertem_live\n"),
    ("import libertem_live.api as lt_live\n", "import raytile.live.api as lt_live\n"),
    ("import libertem_live.api\n", "import raytile.live.api; import raytile.live as libertem_live\n"),
    ("from libertem_live.api import LiveContext\n", "from raytile.live.api import LiveContext\n"),
    ("from libertem_live import api\n", "from raytile.live import api\n"),
    ("import libertem_live, libertem\n", "import raytile.live as libertem_live, raytile as libertem\n"),
    ("import libertem_live.api, libertem.udf\n",
     "import raytile.live.api, raytile.udf; import raytile as libertem; import raytile.live as libertem_live\n"),
    ("import libertem_liveish\nfrom libertem_liveish import x\n",
     "import libertem_liveish\nfrom libertem_liveish import x\n"),
])
def test_rewrite_imports_cases(src, want):
    assert rewrite_imports(src) == want


def test_rewritten_import_keeps_the_bound_name_working():
    """``import libertem.udf.masks`` binds ``libertem``; after the rewrite the name still resolves."""
    ns: dict = {}
    exec(rewrite_imports("import libertem.udf.masks\nudf_cls = libertem.udf.masks.ApplyMasksUDF\n"
                         "import libertem.api\nctx_cls = libertem.api.Context\n"), ns)
    assert ns["udf_cls"] is rt.ApplyMasksUDF
    assert ns["ctx_cls"] is rt.Context


def test_rewritten_libertem_live_import_binds_raytile_live():
    """``import libertem_live.api`` binds ``libertem_live``; after the rewrite it is ``raytile.live``."""
    import raytile.live.api

    ns: dict = {}
    exec(rewrite_imports("import libertem_live.api\nctx_cls = libertem_live.api.LiveContext\n"
                         "from libertem_live.api import LiveContext\n"), ns)
    assert ns["ctx_cls"] is raytile.live.api.LiveContext
    assert ns["LiveContext"] is raytile.live.api.LiveContext
    assert ns["libertem_live"] is raytile.live


def test_find_unmapped_names_each_missing_name():
    src = textwrap.dedent('''\
        from raytile.udf import UDF, NoSuchUDF
        from raytile.udf import masks
        from raytile.no_such_module import x
        import raytile.also_missing
        import raytile.common.math as m
        m.prod(()); m.no_such_function()
        ''')
    got = find_unmapped(src)
    assert [(u.lineno, u.module, u.name) for u in got] == [
        (1, "raytile.udf", "NoSuchUDF"),
        (3, "raytile.no_such_module", None),
        (4, "raytile.also_missing", None),
        (6, "raytile.common.math", "no_such_function"),
    ]
    assert all(isinstance(u, Unmapped) for u in got)
    assert str(got[0]) == "line 1: raytile.udf.NoSuchUDF: no such name"
    assert find_unmapped(rewrite_imports(UDF_SOURCE)) == []


def test_load_ported_runs_on_both_executors(ctx):
    mod = load_ported(rewrite_imports(UDF_SOURCE).replace("from .relative import thing  # noqa\n", ""),
                      "ported_framesum")
    data = np.arange(4 * 3 * 5 * 6, dtype=np.float32).reshape(4, 3, 5, 6)
    ds = ctx.load("memory", data=data, num_partitions=3)
    res = ctx.run_udf(dataset=ds, udf=mod.FrameSum())
    np.testing.assert_allclose(res["s"].data, data.sum(axis=(2, 3)))


def test_cli_prints_writes_and_reports(tmp_path, capsys):
    ok = tmp_path / "ok.py"
    ok.write_text("from libertem.udf import UDF\nfrom libertem.common.math import prod\n")
    assert main([str(ok)]) == 0
    out, err = capsys.readouterr()
    assert out == "from raytile.udf import UDF\nfrom raytile.common.math import prod\n"
    assert "every imported name maps" in err

    bad = tmp_path / "bad.py"
    bad.write_text("from libertem.udf import UDF, NotThere\nfrom libertem.nowhere import y\n")
    dest = tmp_path / "ported.py"
    assert main([str(bad), "-o", str(dest)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert dest.read_text() == "from raytile.udf import UDF, NotThere\nfrom raytile.nowhere import y\n"
    assert "line 1: raytile.udf.NotThere: no such name" in err
    assert "line 2: raytile.nowhere: ModuleNotFoundError" in err
    assert "2 imported name(s) raytile cannot map" in err

    broken = tmp_path / "broken.py"
    broken.write_text("from libertem.udf import (\n")
    assert main([str(broken)]) == 2
    assert main([str(tmp_path / "missing.py")]) == 2


def test_cli_as_module(tmp_path):
    src = tmp_path / "udf.py"
    src.write_text("import libertem.udf as u\nu.UDF, u.NoSuchThing\n")
    proc = subprocess.run([sys.executable, "-m", "raytile.compat.check", str(src)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == "import raytile.udf as u\nu.UDF, u.NoSuchThing\n"
    assert "raytile.udf.NoSuchThing: no such name" in proc.stderr
    assert "RuntimeWarning" not in proc.stderr


def test_public_names():
    import raytile.compat as c
    import raytile.compat.check as chk

    assert set(c.__all__) == {"Unmapped", "find_unmapped", "load_ported", "rewrite_imports"}
    assert all(hasattr(c, n) for n in c.__all__) and all(hasattr(chk, n) for n in chk.__all__)
    assert rt is not None
