"""Rewrite a LiberTEM UDF's imports to raytile and check that every imported name exists.

The porting rule is: replace ``libertem`` by ``raytile`` (and ``libertem_live``
by ``raytile.live``) in every import line, nothing else. :func:`rewrite_imports` does exactly that (on import statements
only, found with :mod:`ast`, so strings, comments and code stay as they are);
:func:`find_unmapped` imports each rewritten module and looks up each imported
name, so a user learns before running what raytile lacks.
"""

from __future__ import annotations

import ast
import importlib
import re
import types
from dataclasses import dataclass

__all__ = ["Unmapped", "rewrite_imports", "find_unmapped", "load_ported"]

_TARGET_PKG = "raytile"
#: Package names rewritten in import statements, and what they become.
_SOURCES = {"libertem": "raytile", "libertem_live": "raytile.live"}
_SOURCE_RE = "(libertem_live|libertem)\\b"


@dataclass(frozen=True)
class Unmapped:
    """One imported name raytile cannot provide: where it is imported, and why it fails."""

    lineno: int
    module: str
    name: str | None  # None: the module itself cannot be imported
    reason: str

    def __str__(self) -> str:
        what = self.module if self.name is None else f"{self.module}.{self.name}"
        return f"line {self.lineno}: {what}: {self.reason}"


def _source_of(name: str | None) -> str | None:
    """The source package (a key of ``_SOURCES``) that module ``name`` belongs to, if any."""
    if name is None:
        return None
    for src in _SOURCES:
        if name == src or name.startswith(src + "."):
            return src
    return None


def _is_source_module(name: str | None) -> bool:
    return _source_of(name) is not None


def _is_target_module(name: str | None) -> bool:
    return name is not None and (name == _TARGET_PKG or name.startswith(_TARGET_PKG + "."))


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def rewrite_imports(source: str) -> str:
    """``source`` with ``libertem`` replaced by ``raytile`` in its import statements only.

    ``libertem_live`` becomes ``raytile.live`` the same way.

    Covers ``import libertem.x [as y]``, ``from libertem.x import ...`` (also over
    several lines and inside functions) and ``import numpy, libertem.x``.
    Relative imports and every other occurrence of the word are left alone.
    Raises :class:`SyntaxError` if ``source`` does not parse.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    spans: list[tuple[int, int, int, int, frozenset[str]]] = []
    for node in _import_nodes(tree):
        # ``import libertem.x`` binds the name ``libertem``: keep it bound (to raytile)
        binds: frozenset[str] = frozenset()
        if isinstance(node, ast.ImportFrom):
            hit = node.level == 0 and _is_source_module(node.module)
        else:
            hit = any(_is_source_module(alias.name) for alias in node.names)
            binds = frozenset(src for alias in node.names if alias.asname is None
                              and (src := _source_of(alias.name)) is not None)
        if hit and node.end_lineno is not None and node.end_col_offset is not None:
            spans.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, binds))
    # Last statement first, so earlier offsets stay valid. ast offsets are UTF-8 byte offsets.
    for lineno, col, end_lineno, end_col, binds in sorted(spans, reverse=True):
        first, last = lineno - 1, end_lineno - 1
        head = lines[first].encode("utf-8")[:col].decode("utf-8")
        tail = lines[last].encode("utf-8")[end_col:].decode("utf-8")
        body_lines = lines[first:last + 1]
        body = "".join(body_lines)
        start = len(head)
        stop = len(body) - len(tail)
        stmt = _rewrite_statement(body[start:stop], binds)
        lines[first:last + 1] = [head + stmt + tail]
    return "".join(lines)


def _rewrite_statement(stmt: str, binds: frozenset[str] = frozenset()) -> str:
    """One import statement's text with the package names replaced in module names only.

    ``binds``: the source packages whose name the statement binds itself (``import libertem``
    or ``import libertem.udf``, no ``as``). The name stays bound, to its target, so that code
    reading ``libertem.udf.masks.ApplyMasksUDF`` keeps working: ``import libertem``
    becomes ``import raytile as libertem``, and ``import libertem.udf`` becomes
    ``import raytile.udf; import raytile as libertem`` (on the same line); likewise
    ``import libertem_live.api`` becomes ``import raytile.live.api; import raytile.live as libertem_live``.
    """
    if stmt.startswith("from"):
        # ``from libertem.x import a as libertem``: only the module part after ``from``.
        m = re.match(r"from(\s+)" + _SOURCE_RE, stmt)
        if m is None:
            return stmt
        return stmt[: m.start(2)] + _SOURCES[m.group(2)] + stmt[m.end(2):]
    # ``import a, libertem.x as y``: module names, never the ``as`` names.
    suffix = ""
    for src in sorted(binds):
        bare = re.compile(r"((?:(?<=import)|(?<=,))\s*)" + src + r"(?=\s*(?:,|$))")
        if bare.search(stmt):
            stmt = bare.sub(r"\g<1>" + f"{_SOURCES[src]} as {src}", stmt)
        else:
            suffix += f"; import {_SOURCES[src]} as {src}"
    out: list[str] = []
    pos = 0
    for m in re.finditer(r"(?:(?<=import)|(?<=,))(\s*\(?\s*)" + _SOURCE_RE, stmt):
        out.append(stmt[pos: m.start(2)])
        out.append(_SOURCES[m.group(2)])
        pos = m.end(2)
    out.append(stmt[pos:])
    return "".join(out) + suffix


def _import(module: str) -> types.ModuleType | Exception:
    try:
        return importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any failure means the name cannot be mapped
        return e


def _has(module: types.ModuleType, name: str) -> bool:
    if hasattr(module, name):
        return True
    sub = _import(f"{module.__name__}.{name}")
    return isinstance(sub, types.ModuleType)


def find_unmapped(source: str) -> list[Unmapped]:
    """Every ``raytile`` module or name that ``source`` imports and raytile does not have.

    Looks at ``from raytile.x import a, b`` (``a`` may be an attribute or a
    submodule), ``import raytile.x``, and, for ``import raytile.x as m``, each
    attribute ``m.name`` the source uses. Run it on rewritten source
    (:func:`rewrite_imports`).
    """
    tree = ast.parse(source)
    found: list[Unmapped] = []
    aliases: dict[str, tuple[types.ModuleType, str]] = {}
    for node in _import_nodes(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level != 0 or not _is_target_module(node.module):
                continue
            assert node.module is not None
            mod = _import(node.module)
            if isinstance(mod, Exception):
                found.append(Unmapped(node.lineno, node.module, None, f"{type(mod).__name__}: {mod}"))
                continue
            for alias in node.names:
                if alias.name != "*" and not _has(mod, alias.name):
                    found.append(Unmapped(node.lineno, node.module, alias.name, "no such name"))
        else:
            for alias in node.names:
                if not _is_target_module(alias.name):
                    continue
                mod = _import(alias.name)
                if isinstance(mod, Exception):
                    found.append(Unmapped(node.lineno, alias.name, None, f"{type(mod).__name__}: {mod}"))
                elif alias.asname is not None:
                    aliases[alias.asname] = (mod, alias.name)
    if aliases:
        seen: set[tuple[str, str]] = set()
        for attr in ast.walk(tree):
            if (isinstance(attr, ast.Attribute) and isinstance(attr.value, ast.Name)
                    and attr.value.id in aliases and (attr.value.id, attr.attr) not in seen):
                seen.add((attr.value.id, attr.attr))
                mod, modname = aliases[attr.value.id]
                if not _has(mod, attr.attr):
                    found.append(Unmapped(attr.lineno, modname, attr.attr, "no such name"))
    return sorted(found, key=lambda u: (u.lineno, u.module, u.name or ""))


def load_ported(source: str, name: str, filename: str = "<ported>") -> types.ModuleType:
    """A module made from LiberTEM-style ``source`` after :func:`rewrite_imports`.

    The module is not left in ``sys.modules``: its classes and functions go to
    Ray workers by value (cloudpickle), as those of ``__main__`` do, so the
    workers need no file for it.
    """
    import sys

    module = types.ModuleType(name)
    code = compile(rewrite_imports(source), filename, "exec")
    sys.modules[name] = module  # dataclasses and typing look a class's module up while it is made
    try:
        exec(code, module.__dict__)  # noqa: S102 - running the user's own UDF module is the point
    finally:
        sys.modules.pop(name, None)
    return module
