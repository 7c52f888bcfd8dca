"""The shape of the package read from its own source (issue 25): each module's size and the
package modules it imports, the import circles, and the imports that run back up the stage
order. tests/unit/test_architecture.py asserts on it; run as a script it prints the tables of
docs/architecture.md:

    python -m tests.helpers.architecture [--out FILE]
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

import stress

PACKAGE = Path(stress.__file__).parent
MAX_LINES: int = 500  # shared/STYLE.md: aim for modules under ~500 lines
# each stage's rank, in the order data flows: a module may import its own stage and lower
#   ones only (rank 0: the small shared modules every stage may read)
STAGES: dict[str, int] = {
    "vocab": 0, "fs": 0, "keys": 0, "errors": 0, "stacktext": 0, "ui": 0, "stress": 0,
    "programs": 1, "engine": 2, "store": 3, "analysis": 4, "runtimes": 4, "soak": 5,
    "verdicts": 6, "housekeeping": 7, "versions": 7, "options": 7, "cli": 8, "__main__": 9}


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Module name -> file, for every module of the package (a package by its __init__)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _absolute(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    """The module an ImportFrom names, its dots resolved against module `name`."""
    if node.level == 0:
        return node.module or ""
    base = name.split(".") if is_package else name.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that module `name` imports (anywhere in it: a late import or one
    only for type checking is a dependency too; relative imports resolved)."""
    found: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, name, is_package)
            found |= {f"{module}.{a.name}" if f"{module}.{a.name}" in known else module
                      for a in node.names}
    return {m for m in found if m in known and m != name}


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    known = modules(package)
    return {name: imports(name, path, known) for name, path in known.items()}


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def stage(module: str) -> str:
    """`stress.engine.session` -> `engine`; `stress.cli` -> `cli`; `stress` -> `stress`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def arrows_up(g: dict[str, set[str]], stages: dict[str, int] = STAGES) -> list[str]:
    """`a -> b` for every import of a module of a higher stage than the importer's."""
    return sorted(f"{m} -> {d}" for m, deps in g.items() for d in deps
                  if stages[stage(d)] > stages[stage(m)])


def sizes(package: Path = PACKAGE) -> dict[str, int]:
    """Module name -> lines."""
    return {name: len(path.read_text().splitlines()) for name, path in modules(package).items()}


def _short(module: str) -> str:
    return module.removeprefix("stress.")


def report() -> str:
    """docs/architecture.md's generated part: the stage order, every module's size, the
    engine's import graph, and what the checks find (circles, arrows up, long modules)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=PACKAGE.parent).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "stress"], capture_output=True,
                           text=True, cwd=PACKAGE.parent).stdout.strip()
    g, n = graph(), sizes()
    order: dict[int, list[str]] = {}
    for name, rank in STAGES.items():
        order.setdefault(rank, []).append(name)
    lines = [f"# python -m tests.helpers.architecture  (commit {commit}"
             f"{' + uncommitted changes' if dirty else ''})", "",
             "stage order (rank: stages; an import may only go to the same rank or lower):"]
    lines += [f"  {rank}: {', '.join(names)}" for rank, names in sorted(order.items())]
    long = {m: k for m, k in n.items() if k > MAX_LINES}
    lines += ["", f"{len(n)} modules, {sum(n.values())} lines; largest "
              f"{max(n.values())} ({max(n, key=lambda m: n[m])}); over {MAX_LINES}: "
              f"{', '.join(long) or 'none'}; import circles: {len(circles(g))}; "
              f"imports back up the stage order: {len(arrows_up(g))}", "",
              "| module | lines |", "|---|---:|"]
    lines += [f"| {_short(m)} | {k} |" for m, k in sorted(n.items())]
    lines += ["", "engine import graph (module -> the package modules it imports; engine's own "
              "first):", ""]
    for m in sorted(x for x in g if stage(x) == "engine"):
        deps = sorted(g[m], key=lambda d: (stage(d) != "engine", d))
        lines.append(f"{_short(m)} -> {', '.join(_short(d) for d in deps) or '(nothing)'}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the output to this file")
    args = parser.parse_args()
    text = report()
    sys.stdout.write(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
