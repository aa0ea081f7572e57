"""``python -m raytile.compat.check FILE.py [-o OUT.py]``: port a LiberTEM UDF file's imports.

Rewrites ``libertem`` to ``raytile`` in the file's import statements, prints
the result (or writes it to ``-o OUT``), and lists on stderr every imported
name raytile cannot provide. Exit status: 0 if all names map, 1 if some do
not, 2 on a usage error or a file that does not parse.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from raytile.compat._rewrite import Unmapped, find_unmapped, rewrite_imports

__all__ = ["main", "Unmapped", "find_unmapped", "rewrite_imports"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m raytile.compat.check",
        description="Rewrite a LiberTEM UDF file's imports to raytile and report names raytile lacks.",
    )
    parser.add_argument("file", help="the UDF's Python source file ('-' reads stdin)")
    parser.add_argument("-o", "--output", help="write the rewritten source here instead of printing it")
    parser.add_argument("-q", "--quiet", action="store_true", help="print neither the source nor a summary")
    args = parser.parse_args(argv)

    try:
        if args.file == "-":
            source = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8") as f:
                source = f.read()
        ported = rewrite_imports(source)
    except (OSError, SyntaxError) as e:
        print(f"{args.file}: {e}", file=sys.stderr)
        return 2

    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(ported)
    elif not args.quiet:
        sys.stdout.write(ported)

    unmapped = find_unmapped(ported)
    for u in unmapped:
        print(f"{args.file}: {u}", file=sys.stderr)
    if not args.quiet:
        if unmapped:
            print(f"{args.file}: {len(unmapped)} imported name(s) raytile cannot map", file=sys.stderr)
        else:
            print(f"{args.file}: every imported name maps to raytile", file=sys.stderr)
    return 1 if unmapped else 0


if __name__ == "__main__":
    sys.exit(main())
