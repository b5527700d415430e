"""Reads a package's imports with `ast` and checks them against a layer order: no module may import from a
layer below it in the order's list (upward), no set of modules may import each other in a loop, and no two
entries of one layer line (packages such as launchers and schedulers) may depend on each other both ways,
even through modules that form no loop.

Every import counts: module level, inside functions, under `if TYPE_CHECKING`. A package's `__init__`
importing its own submodules (registration, re-exports) is not an edge between layers."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path


def read_layers(markdown: str) -> list[list[str]]:
    """The ```layers block of a markdown text: one layer per line, module names separated by spaces."""
    match = re.search(r"^```layers\n(.*?)^```", markdown, re.MULTILINE | re.DOTALL)
    if not match:
        raise ValueError("no ```layers block")
    return [line.split() for line in match.group(1).splitlines() if line.strip()]


def package_modules(package_dir: Path) -> dict[str, Path]:
    """{dotted module name: file} for every .py file of the package."""
    base = package_dir.parent
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        name = ".".join(path.relative_to(base).with_suffix("").parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        modules[name] = path
    return modules


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(modules: dict[str, Path], package: str) -> list[Edge]:
    edges = []
    for module, path in modules.items():
        is_init = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = module.split(".") if is_init else module.split(".")[:-1]
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            seen = set()
            for target in targets:
                if target.split(".")[0] != package:
                    continue
                resolved = _resolve(target, modules)
                if resolved is None or resolved == module or resolved in seen:
                    continue
                if is_init and resolved.startswith(module + "."):
                    continue
                seen.add(resolved)
                edges.append(Edge(module, resolved, node.lineno))
    return edges


def layer_entry(module: str, layers: list[list[str]]) -> tuple[int, str] | None:
    """(layer, entry) of the longest entry that is the module or a package above it."""
    best, best_len = None, -1
    for index, entries in enumerate(layers):
        for entry in entries:
            if (module == entry or module.startswith(entry + ".")) and len(entry) > best_len:
                if entry == module.split(".")[0] and module != entry:
                    continue  # the package's own __init__ entry covers only itself
                best, best_len = (index, entry), len(entry)
    return best


def layer_index(module: str, layers: list[list[str]]) -> int | None:
    """The layer of the longest entry that is the module or a package above it."""
    found = layer_entry(module, layers)
    return found[0] if found else None


def entry_cycles(edges: list[Edge], layers: list[list[str]]) -> list[list[str]]:
    """Entries of one layer line that depend on each other (through any of their modules), both ways."""
    entry_edges, entries = [], set()
    for edge in edges:
        src, dst = layer_entry(edge.source, layers), layer_entry(edge.target, layers)
        if src and dst and src[0] == dst[0] and src[1] != dst[1]:
            entry_edges.append(Edge(src[1], dst[1], edge.line))
            entries |= {src[1], dst[1]}
    return cycles(entry_edges, sorted(entries))


def cycles(edges: list[Edge], nodes: list[str]) -> list[list[str]]:
    graph: dict[str, set[str]] = {node: set() for node in nodes}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def check(package_dir: Path, layers: list[list[str]]) -> list[str]:
    """Every problem as one line: modules outside the layers, upward imports, cycles."""
    package = package_dir.name
    modules = package_modules(package_dir)
    problems = []
    for module in modules:
        if layer_index(module, layers) is None:
            problems.append(f"{module} is in no layer: add it to the layers block")
    edges = import_edges(modules, package)
    for edge in edges:
        src, dst = layer_index(edge.source, layers), layer_index(edge.target, layers)
        if src is not None and dst is not None and dst > src:
            problems.append(f"{modules[edge.source]}:{edge.line}: {edge.source} imports {edge.target}, "
                            f"which is in a layer above it ({' '.join(layers[dst])})")
    module_cycles = cycles(edges, list(modules))
    for component in module_cycles:
        problems.append("import cycle: " + " -> ".join(component))
    said = list(module_cycles)
    for component in entry_cycles(edges, layers):
        if component not in module_cycles:  # entries that are modules: said above
            problems.append("entries of one layer depend on each other: " + " <-> ".join(component))
        said.append(component)
    for component in package_cycles(edges):
        if component not in said:
            problems.append("packages depend on each other: " + " <-> ".join(component))
    return problems


def package_cycles(edges: list[Edge]) -> list[list[str]]:
    """Top-level packages (and modules) that depend on each other both ways, even where each module imports only
    downward: a package whose parts sit on two layers, with another package between them."""
    def top(module: str) -> str:
        return ".".join(module.split(".")[:2])

    package_edges = [Edge(top(e.source), top(e.target), e.line) for e in edges if top(e.source) != top(e.target)]
    return cycles(package_edges, sorted({e.source for e in package_edges} | {e.target for e in package_edges}))
