"""The import graph of src/raytile runs down the floors (DESIGN.md): common < udf, io < runtime < actors,
pipeline, serve, live < cli. Every import counts: at module level, inside functions (lazy), under
``TYPE_CHECKING``, and ``importlib.import_module("raytile...")`` with a literal name. Read with ast, so
nothing is imported. A new top-level package or module must be given a floor here."""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "raytile"

#: Floors, lowest first; a package may import its own floor's packages and those below, except the
#: siblings listed in SIBLINGS. Facades at LiberTEM's paths sit where their imports put them:
#: ``raytile.masks`` (pure numpy over common) on the lowest floor, ``raytile.corrections`` (re-exports
#: io's CorrectionSet) and ``raytile.compat`` (rewrites users' imports) with the applications.
FLOORS: list[set[str]] = [
    {"common", "masks", "viz", "figures", "utils", "exceptions"},  # viz, figures: images from arrays; utils: LiberTEM's helpers; exceptions: libertem.exceptions
    {"udf", "io"},
    {"analysis", "warnings"},  # LiberTEM's Analysis API over UDFs and data sets; the Context mixes it in
    {"runtime", "executor"},  # executor: LiberTEM's executor paths (InlineJobExecutor)
    {"actors", "pipeline", "serve", "live", "corrections", "compat"},
    {"cli", "api", "contrib", "__init__", "__main__"},  # api: LiberTEM's libertem.api path (Context); contrib: its tools
]
#: Packages on one floor that must not import each other.
SIBLINGS: list[set[str]] = [{"udf", "io"}]


def _floor_of(top: str) -> int:
    for i, names in enumerate(FLOORS):
        if top in names:
            return i
    raise AssertionError(f"raytile.{top} has no floor: add it to FLOORS in tests/test_layering.py")


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, imported raytile module) for every import in the file, lazy ones and literal
    ``importlib.import_module`` calls included; ``from raytile import x`` names module ``raytile.x``."""
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = SRC.parent / (module.replace(".", "/") + "/" + alias.name)
                named = f"{module}.{alias.name}"
                found.append((node.lineno, named if sub.with_suffix(".py").exists() or sub.is_dir() else module))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return [(line, m) for line, m in found if m == "raytile" or m.startswith("raytile.")]


def upward_imports() -> list[str]:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        me = _module_name(path)
        mine = _top(me) if me != "raytile" else "__init__"
        for line, target in _imports(path):
            theirs = _top(target)
            if theirs == mine:
                continue
            where = f"{path.relative_to(SRC.parent)}:{line}: {me} ({mine}) imports {target} ({theirs})"
            if _floor_of(theirs) > _floor_of(mine):
                bad.append(where + ": upward")
            elif any({mine, theirs} <= s for s in SIBLINGS):
                bad.append(where + ": between siblings")
    return bad


def test_imports_run_down_the_floors():
    bad = upward_imports()
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_the_check_sees_lazy_and_dynamic_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "raytile"
    (pkg / "common").mkdir(parents=True)
    (pkg / "runtime").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "common" / "__init__.py").write_text("")
    (pkg / "runtime" / "__init__.py").write_text("")
    (pkg / "runtime" / "x.py").write_text("")
    (pkg / "common" / "lazy.py").write_text("def f():\n    from raytile.runtime import x\n")
    (pkg / "common" / "dyn.py").write_text("import importlib\nimportlib.import_module('raytile.runtime.x')\n")
    (pkg / "common" / "ok.py").write_text("from . import lazy\n")
    monkeypatch.setattr(__import__(__name__), "SRC", pkg)
    bad = upward_imports()
    assert len(bad) == 2 and all("common" in b and "raytile.runtime.x" in b and "upward" in b for b in bad), bad
    assert {b.split(":")[0] for b in bad} == {"raytile/common/lazy.py", "raytile/common/dyn.py"}
