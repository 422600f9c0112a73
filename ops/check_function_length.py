"""Fail when a function in gateway/ is longer than MAX_LINES (from ``def`` to its
last line, docstring included): a longer one does several things, and each deserves a name."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_LINES = 60
ROOTS = ("gateway",)  # bench/ has 9 longer run() functions still: measurement scripts


def long_functions(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_LINES:
                    found.append(f"{path}:{node.lineno}: {node.name} is {length} lines")
    return found


def main() -> int:
    base = Path(__file__).resolve().parent.parent
    found = [line for root in ROOTS for line in long_functions(base / root)]
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} function(s) over {MAX_LINES} lines")
        return 1
    print(f"no function over {MAX_LINES} lines in {', '.join(ROOTS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
