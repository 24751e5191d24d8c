"""The layer map of ARCHITECTURE.md, enforced: every sdjax module imports only from its own
layer or the layers below it, and module-level imports form no cycle.

Read from the source (``ast``), so it needs no optional dependency and sees imports inside
functions too (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sdjax"

#: Layer of every top-level module or subpackage, bottom (0) to top; a subpackage's modules
#: share its layer. Kept in step with the picture in ARCHITECTURE.md (checked below).
LAYERS: dict[str, tuple[str, ...]] = {
    "data": (
        "_checks",
        "_compile",
        "_derivatives",
        "algebra",
        "tree",
        "rotation",
        "model",
        "state",
        "editing",
        "solvers",
    ),
    "core": ("kinematics", "jacobians", "dynamics", "momentum", "batch_kernel", "_kernel_equations", "_kernel_ffi"),
    "time": ("integrate",),
    "features": (
        "gjm",
        "control",
        "maneuver",
        "constraints",
        "contact",
        "wheels",
        "capture",
        "flexible",
        "orbital",
        "lagrange",
        "massless_arm",
    ),
    "files": ("io", "models"),
    "applications": (
        "montecarlo",
        "planning",
        "identification",
        "excitation",
        "simulation",
        "spacedyn",
        "plotting",
        "viewer",
        "cli",
        "cli_jobs",
        "__main__",
    ),
}
LEVEL = {name: level for level, names in enumerate(LAYERS.values()) for name in names}

#: Upward imports that are allowed, each with its reason: (importer, imported) top-level names.
ALLOWED_UPWARD = {
    # model.check_well_posed evaluates H (at two configurations) to prove a model with massless
    # or inertia-less links well posed: a lazy import inside that one check, run only for such
    # models, so building a model never needs the dynamics otherwise.
    ("model", "dynamics"),
}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> list[tuple[str, bool]]:
    """``(imported sdjax module, at module level)`` for every import in the file; ``from sdjax
    import x`` counts as importing ``sdjax.x`` when ``x`` is a module."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    top_level = set(map(id, tree.body))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            names = [f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base for alias in node.names]
        else:
            continue
        out += [(name, id(node) in top_level) for name in names if name == "sdjax" or name.startswith("sdjax.")]
    return out


def _is_module(dotted: str) -> bool:
    relative = pathlib.Path(*dotted.split("."))
    return (ROOT / relative).with_suffix(".py").is_file() or (ROOT / relative / "__init__.py").is_file()


def _top(dotted: str) -> str:
    """``sdjax.control.ik`` -> ``control``; ``sdjax`` -> ``""`` (the package's own face)."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else ""


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer():
    tops = {_top(_module_name(path)) for path in SOURCES} - {""}
    assert sorted(tops - set(LEVEL)) == [], "modules missing from LAYERS (add them to ARCHITECTURE.md too)"
    assert sorted(set(LEVEL) - tops) == [], "LAYERS names modules that do not exist"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_downwards(path):
    importer = _top(_module_name(path))
    if not importer:  # sdjax/__init__.py is the public face: it re-exports every layer
        return
    wrong = []
    for imported, _ in _imports(path):
        target = _top(imported)
        if not target:  # the package face re-exports every layer: only an application may use it
            if LEVEL[importer] < LEVEL["montecarlo"]:
                wrong.append(f"'{imported}' (the package face: import the defining module)")
        elif LEVEL[target] > LEVEL[importer] and (importer, target) not in ALLOWED_UPWARD:
            layer = list(LAYERS)[LEVEL[target]]
            wrong.append(f"'{imported}' ({layer}, above {list(LAYERS)[LEVEL[importer]]})")
    assert not wrong, f"{path.relative_to(ROOT)} imports upwards: {wrong}"


def test_no_import_cycles_at_module_level():
    graph: dict[str, set[str]] = {}
    for path in SOURCES:
        name = _module_name(path)
        graph[name] = {imported for imported, top_level in _imports(path) if top_level and imported != name}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt == "sdjax" or nxt.startswith(node + "."):  # a package importing its own modules
                continue
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt]
                raise AssertionError(f"import cycle: {' -> '.join(cycle)}")
            if state.get(nxt) is None:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if state.get(node) is None:
            visit(node, [node])


def test_architecture_page_shows_every_layer():
    """ARCHITECTURE.md's picture names each layer and, on that layer's lines, its modules."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    picture = text.split("```")[1]
    rows: dict[str, str] = {}
    current = None
    for line in picture.splitlines():
        head = re.match(r"^ (\w+)\s{2,}", line)
        if head and head.group(1) in LAYERS:
            current = head.group(1)
        if current:
            rows[current] = rows.get(current, "") + " " + line
    missing = [
        f"{module} ({layer})"
        for layer, modules in LAYERS.items()
        for module in modules
        if module != "__main__" and not re.search(rf"(?<![\w.]){re.escape(module)}\b", rows.get(layer, ""))
    ]
    assert not missing, f"ARCHITECTURE.md's picture does not show these modules on their layer: {missing}"
