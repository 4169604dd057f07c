"""`python -m benchmarks.tools.imports [--deferred]`: the import graph of `benchmarks/`, read from the
code's syntax trees: each module's floor (0: it imports no other runtime module; a module's floor is
one above the highest it imports), its imports, and any cycle. By default module-level imports (what
importing a module runs); `--deferred` adds a function's deferred imports. A script guard's imports
(`if __name__ == "__main__":`, code that runs only as the program) and annotations' (`if
TYPE_CHECKING:`) are not the module's. The layout
tests hold the runtime to no cycle either way (tests/test_layout.py); docs/architecture.md points here
instead of keeping a floor list by hand."""
from __future__ import annotations

import argparse
import ast
from pathlib import Path

from benchmarks import PROJECT_ROOT


def is_script_guard(node: ast.AST) -> bool:
    """`if __name__ == "__main__":`, code that runs when the module is the program, not when imported;
    or `if TYPE_CHECKING:`, annotations' imports, which never run."""
    return isinstance(node, ast.If) and ast.unparse(node.test).replace("'", '"') in (
        '__name__ == "__main__"', "TYPE_CHECKING")


def walk(tree: ast.Module, deferred: bool):
    """The nodes importing a module runs (its module-level statements), or, with `deferred`, every
    node a call into it may run too; a script guard's never."""
    todo = [n for n in tree.body if not is_script_guard(n)]
    while todo:
        node = todo.pop()
        yield node
        if deferred:
            todo += [n for n in ast.iter_child_nodes(node) if not is_script_guard(n)]


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(PROJECT_ROOT).with_suffix("").parts).removesuffix(".__init__")


def import_graph(paths: list[Path], deferred: bool = False) -> dict[str, set[str]]:
    """module -> the modules among `paths` it imports (`from benchmarks.base import traffic` names the
    module `benchmarks.base.traffic`)."""
    names = {module_of(p) for p in paths}
    graph = {}
    for path in paths:
        edges = set()
        for node in walk(ast.parse(path.read_text()), deferred):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                edges |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        graph[module_of(path)] = {m for m in edges if m in names and m != module_of(path)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle of `graph` a depth-first search meets (each back edge, as its loop)."""
    found, state, stack = [], {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                found.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = "done"
    for m in sorted(graph):
        if m not in state:
            visit(m)
    return found


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each module's floor in an acyclic `graph`: 0 for one that imports none of the others, else one
    above the highest it imports."""
    out: dict[str, int] = {}

    def floor(m):
        if m not in out:
            out[m] = 1 + max((floor(n) for n in graph[m]), default=-1)
        return out[m]
    for m in graph:
        floor(m)
    return out


def runtime() -> list[Path]:
    return sorted((PROJECT_ROOT / "benchmarks").rglob("*.py"))


#: The rooms of `benchmarks/`, lowest first: each imports only the rooms before it (tools and the entry
#: point stand above the rest, beside each other). docs/architecture.md says what each holds.
ROOMS = ("base", "core", "run", "families", "commands", "tools", "__main__")


def room_of(module: str) -> str:
    """`benchmarks.core.comm` -> `core`; the package itself is `base` (it holds PROJECT_ROOT alone)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "base"


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto rooms: room -> the other rooms it imports."""
    out: dict[str, set[str]] = {}
    for m, deps in graph.items():
        out.setdefault(room_of(m), set()).update(room_of(d) for d in deps if room_of(d) != room_of(m))
    return out


def upward(rooms: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Arrows from a room to one above it in `ROOMS` (tools and the entry point may import each other's
    rooms below, not each other)."""
    rank = {r: i for i, r in enumerate(ROOMS)}
    return sorted((a, b) for a, deps in rooms.items() for b in deps if rank[b] >= rank[a])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tools.imports", description=__doc__.split("\n\n")[0])
    p.add_argument("--deferred", action="store_true", help="count a function's deferred imports too")
    args = p.parse_args(argv)
    graph = import_graph(runtime(), args.deferred)
    loops = cycles(graph)
    rooms = room_graph(graph)
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} imports, {len(loops)} cycle(s)")
    for r in ROOMS:
        print(f"room {r}: imports {', '.join(sorted(rooms.get(r, ()), key=ROOMS.index)) or 'no other room'}")
    for a, b in upward(rooms):
        print(f"upward arrow: {a} -> {b}")
    for loop in loops:
        print("cycle: " + " -> ".join(loop))
    if loops:
        return
    by_floor: dict[int, list[str]] = {}
    for m, f in floors(graph).items():
        by_floor.setdefault(f, []).append(m.removeprefix("benchmarks."))
    for f in sorted(by_floor):
        print(f"floor {f}: {', '.join(sorted(by_floor[f]))}")


if __name__ == "__main__":
    main()
