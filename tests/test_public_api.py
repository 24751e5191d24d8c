"""The public face of the package: every module says what it exports (``__all__``), the names
exist and are documented, and the top level re-exports exactly what the defining modules export.

Static where it can be (the modules' source), so that the checks run without the optional
dependencies (Numba, MuJoCo, viser) and without the docs extra; tests/test_docs.py checks that
the API reference renders these names.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import pkgutil
import types

import pytest

import sdjax

ROOT = pathlib.Path(sdjax.__file__).resolve().parent

#: Modules that are not part of the reference (their ``__all__`` is their interface to the rest
#: of sdjax, and need not be documented): the command line (documented by docs/guide/cli.md),
#: the tree recursion, the 3 x 3 algebra and the readers' shared input checks. Modules whose name
#: has a part starting with an underscore (``sdjax._checks``) are internal too.
INTERNAL = {"sdjax.cli", "sdjax.tree", "sdjax.algebra", "sdjax.io.inputs"}


def _module_names() -> list[str]:
    """Every module of the package, subpackages included, except ``__main__``."""
    names = ["sdjax"]
    for info in pkgutil.walk_packages(sdjax.__path__, "sdjax."):
        if info.name.rsplit(".", 1)[-1] != "__main__":
            names.append(info.name)
    return sorted(names)


MODULES = _module_names()


def _path(module: str) -> pathlib.Path:
    relative = pathlib.Path(*module.split(".")[1:])
    package = ROOT / relative / "__init__.py"
    return package if package.is_file() else (ROOT / relative).with_suffix(".py")


def _is_public(module: str) -> bool:
    return module not in INTERNAL and not any(part.startswith("_") for part in module.split("."))


def _top_level(body: list[ast.stmt]):
    """The module-level statements, through ``if``/``try``/``with`` blocks."""
    for node in body:
        yield node
        for block in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, block, None)
            if isinstance(inner, list) and not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                yield from _top_level(inner)


class _Source:
    """A module's source: its ``__all__`` and where each top-level name is bound."""

    def __init__(self, module: str):
        self.module = module
        self.lines = _path(module).read_text().split("\n")
        tree = ast.parse("\n".join(self.lines))
        self.all: list[str] | None = None
        #: name -> the statement that binds it (the last one), or (module, name) for an import.
        self.bindings: dict[str, object] = {}
        for node in _top_level(tree.body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bindings[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        self.bindings[target.id] = node
                        if target.id == "__all__":
                            assert isinstance(node.value, (ast.List, ast.Tuple)), (
                                f"{module}.__all__: not a literal list"
                            )
                            self.all = [ast.literal_eval(e) for e in node.value.elts]
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    self.bindings[alias.asname or alias.name] = (node.module, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    self.bindings[alias.asname or alias.name.split(".")[0]] = (alias.name, None)

    def documented(self, node: object) -> bool:
        """A function or class with a docstring, or an assignment after a ``#:`` comment."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return ast.get_docstring(node) is not None
        assert isinstance(node, (ast.Assign, ast.AnnAssign))
        return node.lineno >= 2 and self.lines[node.lineno - 2].strip().startswith("#:")


_SOURCES: dict[str, _Source] = {}


def _source(module: str) -> _Source:
    if module not in _SOURCES:
        _SOURCES[module] = _Source(module)
    return _SOURCES[module]


def _definition(module: str, name: str) -> tuple[str, object]:
    """The module that defines ``module.name`` (following re-exports within sdjax) and the
    statement that binds it there; ``("", None)`` for a submodule or a name from outside sdjax."""
    binding = _source(module).bindings.get(name)
    while isinstance(binding, tuple):
        origin, original = binding
        if original is None or not origin.startswith("sdjax"):
            return "", None
        if f"{origin}.{original}" in MODULES:  # ``from sdjax import capture``: a module
            return "", None
        module, name = origin, original
        binding = _source(module).bindings.get(name)
    return module, binding


def _imported(module: str) -> types.ModuleType | None:
    """The module, or None where an optional third-party dependency of it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        if (error.name or "").split(".")[0] == "sdjax":
            raise
        return None


@pytest.mark.parametrize("module", MODULES)
def test_every_module_defines_all(module):
    source = _source(module)
    assert source.all is not None, f"{module} ({_path(module).relative_to(ROOT.parent)}) defines no __all__"
    duplicates = sorted({n for n in source.all if source.all.count(n) > 1})
    assert not duplicates, f"{module}.__all__ lists {duplicates} more than once"
    unbound = [n for n in source.all if n not in source.bindings]
    assert not unbound, f"{module}.__all__ names {unbound}, which the module does not define or import"
    imported = _imported(module)
    if imported is not None:
        assert list(imported.__all__) == source.all
        missing = [n for n in imported.__all__ if not hasattr(imported, n)]
        assert not missing, f"{module}.__all__ names {missing}, which do not exist"


@pytest.mark.parametrize("module", [m for m in MODULES if _is_public(m)])
def test_every_exported_name_is_documented(module):
    """A function or class of a public module's ``__all__`` has a docstring, a constant a ``#:``
    comment on the line above it (where the name is defined, for a re-export)."""
    undocumented = []
    for name in _source(module).all or ():
        defining, node = _definition(module, name)
        if node is None:
            continue  # a submodule (documented by its own docstring)
        if not _source(defining).documented(node):
            undocumented.append(f"{name} ({defining})")
    assert not undocumented, f"{module}.__all__: no docstring or '#:' comment: {undocumented}"


@pytest.mark.parametrize("package", [m for m in MODULES if _path(m).name == "__init__.py"])
def test_packages_reexport_what_the_defining_modules_export(package):
    """A package's ``__all__`` names are unique, and each re-exported one is in the ``__all__``
    of the module it is imported from and is that module's object."""
    names = _source(package).all or []
    assert len(names) == len(set(names)), f"{package}.__all__ has duplicates"
    imported = _imported(package)
    problems = []
    for name in names:
        binding = _source(package).bindings.get(name)
        if not isinstance(binding, tuple) or binding[1] is None:
            continue  # defined in the package itself
        origin, original = binding
        if f"{origin}.{original}" in MODULES:
            continue  # a submodule as a namespace
        exported = _source(origin).all or []
        if original not in exported:
            problems.append(f"{name}: not in {origin}.__all__")
        elif imported is not None and getattr(imported, name) is not getattr(importlib.import_module(origin), original):
            problems.append(f"{name}: not the object {origin}.{original}")
    assert not problems, f"{package}:\n" + "\n".join(problems)


def test_top_level_names_are_unique_and_match_their_modules():
    assert len(sdjax.__all__) == len(set(sdjax.__all__))
    for name in sdjax.__all__:
        value = getattr(sdjax, name)
        if isinstance(value, types.ModuleType):
            assert value.__name__ == f"sdjax.{name}"
            continue
        defining, _ = _definition("sdjax", name)
        assert name in (_source(defining).all or ()), f"sdjax.{name}: not in {defining}.__all__"
        assert getattr(importlib.import_module(defining), name) is value
