"""The project's import graph and its circles (``make deps``).

Prints the graph of the packages (who imports whom, with the number of module pairs behind each
arrow), the graph inside each package that has sub-packages, the module graph, and every import
circle: among the top-level packages, among the sub-packages of one package, and among the modules
of one package. Every import statement counts: at module level, inside a function (a function
that imports ties the two modules together just the same) and under ``if TYPE_CHECKING:`` (a
module that names another's types depends on it for a reader and for the type checker; a need
that is only a type is met by a protocol in a module below both).

Exits 1 when there is any circle, 0 otherwise. The graph is read by grimp; the layer rules of
docs/architecture.md are import-linter contracts in pyproject.toml (``make lint``).

    python tools/deps.py [--no-modules] [PACKAGE ...]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import grimp

#: the project's packages (pyproject.toml [tool.setuptools.packages.find]); tests/, bench/ and
#: examples/ are scripts, not packages
PACKAGES = ("isa", "sim", "rtl", "compiler", "runtime", "verify", "tetrachip")
#: circles listed per strongly connected group at most (a group of n modules can hold far more)
MAX_CIRCLES = 40


#: where an import statement sits; an edge takes the first of these that one of its imports has
MODULE, FUNCTION, TYPE_CHECKING = "module", "function", "type checking"
#: how the listings mark an edge none of whose imports is at module level
MARK = {MODULE: "", FUNCTION: "*", TYPE_CHECKING: "~"}
SAYS = {MODULE: "", FUNCTION: " (in a function)", TYPE_CHECKING: " (type checking only)"}


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    where: str              # MODULE if one import runs at import time, else FUNCTION, else TYPE_CHECKING
    line: int               # the first line of importer that imports imported from there


def _package_of(module: str, depth: int = 1) -> str:
    return ".".join(module.split(".")[:depth])


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_lines(source: str) -> dict[int, str]:
    """Every line of every import statement in source -> where the statement sits."""
    found: dict[int, str] = {}

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for n in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                found[n] = where
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                visit(stmt, TYPE_CHECKING)
            for stmt in node.orelse:
                visit(stmt, where)
            return
        inner = FUNCTION if where == MODULE and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                  ast.Lambda)) else where
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(source), MODULE)
    return found


def _where(module: str, line: int, cache: dict[str, dict[int, str]]) -> str:
    if module not in cache:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec else None
        cache[module] = import_lines(open(origin, encoding="utf-8").read()) if origin else {}
    return cache[module].get(line, MODULE)


def module_edges(graph: grimp.ImportGraph) -> dict[str, list[Edge]]:
    """importer -> its imports of project modules, sorted by imported module."""
    sources: dict[str, dict[int, str]] = {}
    out: dict[str, list[Edge]] = {}
    for importer in sorted(graph.modules):
        edges = []
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            details = sorted(graph.get_import_details(importer=importer, imported=imported),
                             key=lambda d: d["line_number"])
            places = [(_where(importer, d["line_number"], sources), d["line_number"]) for d in details]
            where = next((w for w in (MODULE, FUNCTION, TYPE_CHECKING) if any(p == w for p, _ in places)), MODULE)
            edges.append(Edge(importer, imported, where, min((n for p, n in places if p == where), default=0)))
        out[importer] = edges
    return out


def _components(nodes: list[str], succ: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(succ.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ.get(w, ()))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1 or v in succ.get(v, ()):
                        found.append(sorted(comp))
    return sorted(found)


def circles(nodes: list[str], succ: dict[str, list[str]]) -> list[tuple[list[list[str]], int]]:
    """Per strongly connected group: its elementary circles (each from its smallest node, at most
    MAX_CIRCLES) and how many there are in all when more."""
    result = []
    for comp in _components(nodes, succ):
        members = set(comp)
        cycles: list[list[str]] = []
        total = 0
        for start in comp:
            # circles through start that only visit nodes after it: each circle is found once
            path, todo = [start], [iter(sorted(w for w in succ.get(start, ()) if w in members))]
            while todo:
                for w in todo[-1]:
                    if w == start:
                        total += 1
                        if len(cycles) < MAX_CIRCLES:
                            cycles.append(path + [start])
                    elif w > start and w not in path and total < 100 * MAX_CIRCLES:
                        path.append(w)
                        todo.append(iter(sorted(x for x in succ.get(w, ()) if x in members)))
                        break
                else:
                    todo.pop()
                    path.pop()
        result.append((sorted(cycles, key=lambda c: (len(c), c)), total))
    return result


def _print_circles(title: str, found: list[tuple[list[list[str]], int]], label: Callable[[str, str], str]) -> int:
    count = sum(total for _, total in found)
    print(f"{title}: {count or 'none'}")
    for cycles, total in found:
        for c in cycles:
            print("    " + " -> ".join(label(a, b) for a, b in zip(c, c[1:])) + f" -> {c[-1]}")
        if total > len(cycles):
            print(f"    ... and {total - len(cycles)} more circles in this group")
    return count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("packages", nargs="*", default=list(PACKAGES), help="packages to read (default: all)")
    ap.add_argument("--no-modules", action="store_true", help="leave out the module graph (circles still listed)")
    args = ap.parse_args(argv)
    graph = grimp.build_graph(*args.packages, exclude_type_checking_imports=False, cache_dir=None)
    edges = module_edges(graph)
    at = {(e.importer, e.imported): e for es in edges.values() for e in es}

    def label(a: str, b: str) -> str:
        e = at[(a, b)]
        return f"{a}:{e.line}{SAYS[e.where]}"

    def grouped(part: Callable[[str], str | None]) -> dict[str, dict[str, int]]:
        g: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for e in at.values():
            a, b = part(e.importer), part(e.imported)
            if a is not None and b is not None and a != b:
                g[a][b] += 1
        return g

    def print_graph(g: dict[str, dict[str, int]], names: list[str]) -> None:
        for p in names:
            deps = g.get(p, {})
            print(f"  {p:<20} -> " + (", ".join(f"{q} ({n})" for q, n in sorted(deps.items())) or "-"))

    bad = 0
    print("packages (importer -> imported (module pairs)); imports in functions and under TYPE_CHECKING count\n")
    top = grouped(_package_of)
    print_graph(top, list(args.packages))
    bad += _print_circles("\ncircles among packages", circles(list(args.packages), {p: sorted(top[p]) for p in top}),
                          lambda a, b: a)
    for pkg in args.packages:
        subs = sorted({_package_of(m, 2) for m in graph.find_descendants(pkg) if graph.find_children(m)})
        if not subs:
            continue

        def part(m: str, pkg: str = pkg, subs: list[str] = subs) -> str | None:
            """the sub-package of pkg that holds m; pkg itself for the modules directly in it"""
            if _package_of(m) != pkg:
                return None
            return _package_of(m, 2) if _package_of(m, 2) in subs else pkg

        inner = grouped(part)
        names = sorted({n for m in graph.modules if (n := part(m)) is not None})
        print(f"\n{pkg}/ by sub-package ({pkg} itself: the modules directly in {pkg}/)")
        print_graph(inner, names)
        bad += _print_circles(f"circles among the parts of {pkg}", circles(names, {p: sorted(inner[p]) for p in inner}),
                              lambda a, b: a)
    if not args.no_modules:
        print("\nmodules (importer -> imported project modules; * inside a function, ~ under TYPE_CHECKING only)\n")
        for m, es in edges.items():
            if es:
                print(f"  {m} -> " + ", ".join(e.imported + MARK[e.where] for e in es))
    print("\nmodule:line is the line of that module that imports the next one")
    for pkg in args.packages:
        mods = sorted(m for m in graph.modules if _package_of(m) == pkg)
        succ = {m: [e.imported for e in edges[m] if _package_of(e.imported) == pkg] for m in mods}
        bad += _print_circles(f"circles among the modules of {pkg}", circles(mods, succ), label)
    print(f"\n{'no import circles' if not bad else f'{bad} import circles'} "
          f"({len(graph.modules)} modules, {len(at)} imports between them)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
