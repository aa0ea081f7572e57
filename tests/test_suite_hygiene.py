"""Every test checks something: an assert, pytest.raises/warns, np.testing, or a helper that does.

Read with ast over tests/ (nothing is imported). A helper counts when it is a function of the same
module (or of tests/_*.py / another test module it imports from) whose body checks, found to a fixpoint,
or when its name says it checks (``assert*``, ``check*``, ``_check*``, ``wait_until``).
"""

from __future__ import annotations

import ast
import pathlib

TESTS = pathlib.Path(__file__).resolve().parent
CHECKING_NAMES = ("assert", "check", "_check", "_assert", "wait_until")


def _called_names(node: ast.AST) -> set[str]:
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            names.add(f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else "")
    return names


def _checks_itself(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Assert):
            return True
        if isinstance(n, ast.Raise):  # a helper that raises AssertionError itself
            return True
    return any(name.startswith(CHECKING_NAMES) or name in ("raises", "warns", "fail")
               for name in _called_names(node))


def _checking_helpers(trees: list[ast.Module]) -> set[str]:
    functions = {f.name: f for tree in trees for f in ast.walk(tree)
                 if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and not f.name.startswith("test")}
    checking = {name for name, f in functions.items() if _checks_itself(f)}
    while True:
        more = {name for name, f in functions.items() if name not in checking and _called_names(f) & checking}
        if not more:
            return checking
        checking |= more


def unchecked_tests() -> list[str]:
    paths = sorted(TESTS.rglob("*.py"))
    trees = {p: ast.parse(p.read_text(), str(p)) for p in paths}
    helpers = _checking_helpers(list(trees.values()))
    bad = []
    for path, tree in trees.items():
        if not path.name.startswith("test_"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                if not (_checks_itself(node) or _called_names(node) & helpers):
                    bad.append(f"{path.relative_to(TESTS)}:{node.lineno} {node.name}")
    return bad


def test_every_test_checks_something():
    bad = unchecked_tests()
    assert not bad, "tests that check nothing:\n" + "\n".join(bad)


def test_the_hygiene_check_finds_a_test_without_a_check(tmp_path, monkeypatch):
    (tmp_path / "test_x.py").write_text(
        "def helper(v):\n    assert v\n\n"
        "def test_ok():\n    helper(1)\n\n"
        "def test_raises():\n    import pytest\n    with pytest.raises(ValueError):\n        int('x')\n\n"
        "def test_nothing():\n    int('1')\n")
    monkeypatch.setattr(__import__(__name__), "TESTS", tmp_path)
    assert unchecked_tests() == ["test_x.py:12 test_nothing"]
