"""The documentation site (mkdocs.yml, docs/) covers the public API and every notebook.

Cheap, static checks; the full ``mkdocs build --strict`` (which also resolves every link and
cross-reference) runs in ``.ci/run``. Skipped where the docs extra is not installed.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pathlib
import pkgutil
import re
import types

import pytest

pytest.importorskip("mkdocs")
griffe = pytest.importorskip("griffe")
yaml = pytest.importorskip("yaml")

import sdjax  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
API = DOCS / "api"
DIRECTIVE = re.compile(r"^:::\s+([\w.]+)\s*$", re.MULTILINE)
#: Modules that are not part of the reference: the command line's entry points (documented by
#: docs/guide/cli.md from ``sdjax --help``), the internal tree recursion and 3 x 3 algebra and the
#: readers' shared input checks (tests/test_public_api.py keeps the same list).
INTERNAL = {"sdjax.__main__", "sdjax.cli", "sdjax.cli_jobs", "sdjax.tree", "sdjax.algebra", "sdjax.io.inputs"}


def _nav_paths(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in _nav_paths(item)]
    if isinstance(node, dict):
        return [p for value in node.values() for p in _nav_paths(value)]
    return []


@pytest.fixture(scope="module")
def nav() -> list[str]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    return _nav_paths(config["nav"])


@pytest.fixture(scope="module")
def directives() -> dict[str, pathlib.Path]:
    """Module (or single object) -> the API page that renders it (``::: path``)."""
    out = {}
    for page in sorted(API.glob("*.md")):
        for module in DIRECTIVE.findall(page.read_text()):
            assert module not in out, f"{module} is rendered by both {out[module].name} and {page.name}"
            out[module] = page
    return out


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    """Canonical path -> heading identifier of every object the API pages render, as the docs
    build computes it (the griffe extension of docs/_ext, which mkdocs.yml loads)."""
    spec = importlib.util.spec_from_file_location("sdjax_docs_ext", DOCS / "_ext" / "rst_roles.py")
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    pkg = griffe.load("sdjax", search_paths=[str(ROOT)], docstring_parser="google")
    ext._doc_comments(pkg, {})
    return ext._rendered(pkg)


def _defining_modules() -> dict[str, str]:
    """Name in ``sdjax.__all__`` -> the module ``sdjax/__init__.py`` imports it from."""
    out = {}
    for node in ast.parse((ROOT / "sdjax" / "__init__.py").read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sdjax"):
            for alias in node.names:
                name = alias.asname or alias.name
                out[name] = f"sdjax.{name}" if node.module == "sdjax" else node.module
    return out


def _public_modules() -> list[str]:
    top = [f"sdjax.{m.name}" for m in pkgutil.iter_modules(sdjax.__path__) if not m.name.startswith("_")]
    return sorted(set(top) - INTERNAL)


def _public_submodules() -> list[str]:
    """The public modules inside sdjax's subpackages (sdjax.io.urdf, sdjax.models.srms, ...) but
    the viewer's, whose ``__all__`` is their interface to each other (its page renders the
    names of the package)."""
    names = [m.name for m in pkgutil.walk_packages(sdjax.__path__, "sdjax.") if m.name.count(".") >= 2]
    return sorted(
        n
        for n in set(names) - INTERNAL
        if not n.startswith("sdjax.viewer.") and not any(p.startswith("_") for p in n.split("."))
    )


_ORIGINS: dict[str, dict[str, str]] = {}


def _import_origins(module: str) -> dict[str, str]:
    """Name -> ``origin.name`` of the names ``module`` imports from other sdjax modules
    (re-exports, followed through packages), read from its source."""
    if module in _ORIGINS:
        return _ORIGINS[module]
    out = _ORIGINS[module] = {}  # (an import cycle ends here)
    path = ROOT / pathlib.Path(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    if not path.is_file():  # ``from sdjax.x import y`` where sdjax.x.y is a module
        return out
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sdjax"):
            for alias in node.names:
                origin = f"{node.module}.{alias.name}"
                out[alias.asname or alias.name] = _import_origins(node.module).get(alias.name, origin)
    return out


def test_every_nav_page_exists(nav):
    missing = [p for p in nav if not (DOCS / p).is_file()]
    assert not missing, f"mkdocs.yml nav names pages that do not exist under docs/: {missing}"


def test_every_notebook_is_in_the_nav(nav):
    notebooks = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert notebooks, "no notebooks found"
    missing = [name for name in notebooks if f"notebooks/{name}" not in nav]
    assert not missing, f"notebooks missing from the Notebooks section of mkdocs.yml: {missing}"
    # The site renders the stored notebooks themselves (docs/notebooks links to notebooks/).
    assert (DOCS / "notebooks").resolve() == (ROOT / "notebooks").resolve()


def test_every_api_page_is_in_the_nav(nav):
    pages = sorted(f"api/{p.name}" for p in API.glob("*.md"))
    missing = [p for p in pages if p not in nav]
    assert not missing, f"API pages missing from mkdocs.yml nav: {missing}"


def test_every_public_module_has_an_api_page(directives):
    missing = [m for m in _public_modules() if m not in directives]
    assert not missing, f"public modules without a '::: module' API page in docs/api/: {missing}"
    for path in directives:  # every directive names a real module or object
        module, _, name = path.rpartition(".")
        try:
            importlib.import_module(path)
        except ModuleNotFoundError:
            assert hasattr(importlib.import_module(module), name), f"{path}: no such module or object"


def test_every_top_level_name_is_in_the_api_reference(directives, rendered):
    """Each name of ``sdjax.__all__`` is listed in docs/api/index.md, linked to the object the
    API pages render (mkdocs --strict then checks that the link resolves)."""
    index = (API / "index.md").read_text()
    where = _defining_modules()
    problems = []
    for name in sdjax.__all__:
        module = where[name]
        if isinstance(getattr(sdjax, name), types.ModuleType):
            if module not in directives or f"`sdjax.{name}`" not in index:
                problems.append(f"namespace sdjax.{name}: no API page or not listed in api/index.md")
            continue
        page_module = "sdjax.io" if module.startswith("sdjax.io.") else module
        ident = f"{page_module}.{name}"
        if f"[`{name}`][{ident}]" not in index:
            problems.append(f"{name}: api/index.md lacks [`{name}`][{ident}]")
        if not {f"{module}.{name}", ident} & (set(rendered) | set(rendered.values())):
            problems.append(f"{name}: {module}.{name} is not rendered (no docstring, or its module has no API page)")
    assert not problems, "\n".join(problems)


def test_every_module_all_name_is_rendered(directives, rendered):
    """Each name in a public module's ``__all__``, subpackages' modules included, appears in the
    API reference: mkdocstrings leaves out objects without a docstring, so each needs one, and a
    submodule's names are rendered by its own ``:::`` directive or by its package's (a re-export)."""
    problems = []
    for module_name in _public_modules() + _public_submodules():
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:  # an optional dependency (viser, MuJoCo) is not installed
            if (error.name or "").startswith("sdjax"):
                raise
            continue
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if isinstance(obj, types.ModuleType):
                continue
            defining = getattr(obj, "__module__", None) if callable(obj) or isinstance(obj, type) else None
            candidates = {f"{module_name}.{name}"} | ({f"{defining}.{name}"} if defining else set())
            if name in _import_origins(module_name):  # a re-exported constant: where it is defined
                candidates.add(_import_origins(module_name)[name])
            if not candidates & (set(rendered) | set(rendered.values())):
                problems.append(f"{module_name}.{name}")
    assert not problems, f"names in a module's __all__ that the API reference does not render: {problems}"


def test_readme_points_to_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert 'pip install -e ".[docs]" && mkdocs serve' in readme
    # The home page includes the README's set-up and quick start by these section markers.
    for section in ("setup", "quickstart"):
        assert f"<!-- --8<-- [start:{section}] -->" in readme and f"<!-- --8<-- [end:{section}] -->" in readme
        assert f'--8<-- "README.md:{section}"' in (DOCS / "index.md").read_text()


PAGES_WITH_CODE = sorted(p for p in DOCS.rglob("*.md") if "```python" in p.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: str(p.relative_to(DOCS)))
def test_page_examples_run(page):
    """The Python examples of a page run, in order, in one fresh interpreter (outside this test
    configuration, as a reader would run them)."""
    import subprocess
    import sys

    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)
    env = {k: v for k, v in __import__("os").environ.items() if k != "JAX_ENABLE_X64"}
    result = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"{page.relative_to(ROOT)}:\n{result.stderr[-3000:]}"
