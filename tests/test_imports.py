"""Import circles, measured statically: every `import` of the installed package
(inside functions too, since a lazy import that closes a loop still ties the
modules together), read with `ast`, as a graph of modules; it must have no
cycle, and nothing below the front door (`taso/__init__.py`) may import a name
from `taso` itself."""

from __future__ import annotations

import ast
import importlib.util
import os
from pathlib import Path

import taso

ROOT = Path(taso.__file__).parent


def _folders(root: Path) -> list[tuple[Path, list[str]]]:
    """(folder, its module-name prefix) for the package at `root` and, where it
    is taso's, the subpackages an editable install maps from the checkout's top
    level (pyproject's wheel.packages) rather than from inside `root`."""
    out = [(root, [root.name])]
    if root == ROOT:
        for sub in ("generator", "optimizer", "rules_db", "verifier"):
            where = Path(importlib.util.find_spec(f"taso.{sub}").origin).parent
            if root not in where.parents:
                out.append((where, ["taso", sub]))
    return out


def modules(root: Path = ROOT) -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, whether it is a package's __init__)."""
    out = {}
    for folder, prefix in _folders(root):
        files = [Path(d) / f for d, _, fs in os.walk(folder, followlinks=True) for f in fs]
        for f in sorted(f for f in files if f.suffix == ".py"):
            parts = prefix + list(f.relative_to(folder).with_suffix("").parts)
            package = parts[-1] == "__init__"
            out[".".join(parts[:-1] if package else parts)] = (f, package)
    return out


def imports(name: str, path: Path, package: bool, known: set[str]
            ) -> list[tuple[str, str | None]]:
    """(module imported, the name taken from it or None) for every import in
    the module's source that lands in `known`."""
    here = name if package else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names if a.name in known]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[:len(here.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.append((sub, None) if sub in known else (target, a.name))
    return [(m, n) for m, n in out if m in known]


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    mods = modules(root)
    return {m: {t for t, _ in imports(m, f, pkg, set(mods))} - {m}
            for m, (f, pkg) in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's
    algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
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
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_checker_finds_a_circle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import thing\n")
    (pkg / "sub" / "__init__.py").write_text("from .b import thing\n")
    (pkg / "sub" / "b.py").write_text("def thing():\n    from ..a import x\n")
    (pkg / "c.py").write_text("from . import a\n")
    assert cycles(import_graph(pkg)) == [["pkg.a", "pkg.sub", "pkg.sub.b"]]
    (pkg / "sub" / "b.py").write_text("def thing():\n    pass\n")
    assert cycles(import_graph(pkg)) == []


def test_the_package_has_no_import_circle():
    graph = import_graph()
    assert {"taso.ir", "taso.onnx_io.load", "taso.optimizer.search",
            "taso.generator.enumerate", "taso.rules_db.rule"} <= set(graph)
    assert cycles(graph) == []


def test_nothing_below_the_front_door_imports_taso_itself():
    mods = modules()
    found = [(m, name) for m, (f, pkg) in mods.items() if m != "taso"
             for target, name in imports(m, f, pkg, set(mods)) if target == "taso"]
    assert found == []
