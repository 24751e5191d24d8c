"""Griffe extension for the documentation build: the docstrings' reST markup as Markdown.

sdjax's docstrings are Markdown with two reST habits: cross-reference roles
(``:func:`rollout```, ``:class:`~sdjax.Model```, ``:mod:`sdjax.contact```) and, in a few
module docstrings, reST "simple tables" (rows of ``====`` rules). This extension rewrites both
before mkdocstrings renders the API pages:

- a role becomes a Markdown cross-reference ``[rollout][sdjax.integrate.rollout]`` when its
  target resolves (the way Python would: the object's class, its module, then ``sdjax``) to
  an object that the API pages render, and plain code otherwise, so that ``mkdocs build
  --strict`` only sees references that exist;
- a ``#:`` comment block just above a module or class attribute (Sphinx's doc-comment, which
  griffe does not read) becomes that attribute's docstring;
- a simple table becomes a Markdown table, and ``paragraph::`` before a literal block a
  plain colon (the indented block is a code block in Markdown too).

The source files are not changed.
"""

from __future__ import annotations

import pathlib
import re

import griffe

API_DIR = pathlib.Path(__file__).resolve().parent.parent / "api"
ROLE = re.compile(r":(?:func|class|mod|data|meth|attr|obj|exc):`(~?)([A-Za-z_][\w.]*)(?:\(\))?`")
DIRECTIVE = re.compile(r"^:::\s+([\w.]+)\s*$", re.MULTILINE)
# A directive that renders a module's docstring only (its names are rendered by the directives of
# the modules that define them, e.g. a package whose page renders its submodules):
#     ::: sdjax.massless_arm
#         options:
#           members: false
NO_MEMBERS = re.compile(r"^:::\s+([\w.]+)\s*\n\s+options:\s*\n\s+members:\s*false\s*$", re.MULTILINE)
SECTION = re.compile(r"^(Arguments|Args|Parameters|Returns|Yields|Raises|Attributes|Examples?|Notes?|Warns|Warnings):\s*$")
RULE = re.compile(r"^(\s*)(=+)((?:\s+=+)+)\s*$")


def _documented_modules() -> list[str]:
    """Modules (and single objects) that the API pages render (their ``::: path`` directives)."""
    return [m for page in sorted(API_DIR.glob("*.md")) for m in DIRECTIVE.findall(page.read_text())]


def _docstring_only_modules() -> set[str]:
    """Modules whose directive renders their docstring only (``members: false``)."""
    return {m for page in sorted(API_DIR.glob("*.md")) for m in NO_MEMBERS.findall(page.read_text())}


def _target(obj):
    """The object an alias finally points at, or None when it leaves the package."""
    try:
        return obj.final_target if obj.is_alias else obj
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _rendered(pkg) -> dict[str, str]:
    """Canonical path -> identifier of the heading that renders it, for every rendered object."""
    out: dict[str, str] = {}
    docstring_only = _docstring_only_modules()

    def visit(obj, ident: str) -> None:
        target = _target(obj)
        if target is None:
            return
        out.setdefault(target.path, ident)
        if not target.is_class:
            return
        for name, member in target.members.items():
            if name.startswith("_") or not member.is_public:
                continue
            inner = _target(member)
            if inner is not None and inner.docstring is not None:
                visit(member, f"{ident}.{name}")

    for path in _documented_modules():
        module = pkg.get_member(path.split(".", 1)[1]) if "." in path else pkg
        if not module.is_module:  # a directive for one object (a function shadowed by its module)
            visit(module, path)
            continue
        out.setdefault(module.path, module.path)
        if path in docstring_only:
            continue
        for name, member in module.members.items():
            if name.startswith("_") or not member.is_public:
                continue
            target = _target(member)
            if target is not None and not target.is_module and (target.docstring is not None or target.is_class):
                visit(member, f"{module.path}.{name}")
    return out


def _lookup(pkg, path: str):
    if path == pkg.path:
        return pkg
    if not path.startswith(pkg.path + "."):
        return None
    try:
        return _target(pkg.get_member(path[len(pkg.path) + 1 :]))
    except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _scopes(obj) -> list[str]:
    """Where a bare name in ``obj``'s docstring is looked up, innermost first."""
    scopes = []
    node = obj
    while node is not None:
        if node.is_class or node.is_module:
            scopes.append(node.path)
        node = node.parent
    return scopes


def _markdown_table(lines: list[str]) -> list[str]:
    """A reST simple table (rule, header, rule, rows, rule) as a Markdown table."""
    match = RULE.match(lines[0])
    indent = match.group(1)
    starts = [m.start() for m in re.finditer(r"=+", lines[0])]
    rows = []
    for line in lines:
        if RULE.match(line):
            continue
        cells = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    if not rows:
        return lines
    return [indent + rows[0], indent + "|" + "---|" * len(starts)] + [indent + r for r in rows[1:]]


def _tables(text: str) -> str:
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        if RULE.match(lines[i]):
            rules = [i]
            j = i + 1
            while j < len(lines) and len(rules) < 3 and lines[j].strip():
                if RULE.match(lines[j]):
                    rules.append(j)
                j += 1
            if len(rules) == 3:
                out.extend(_markdown_table(lines[i : rules[2] + 1]))
                i = rules[2] + 1
                continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def _doc_comments(obj, files: dict) -> None:
    """Give attributes without a docstring the ``#:`` comment block above them."""
    for member in obj.members.values():
        if member.is_alias:
            continue
        if member.is_attribute and member.docstring is None and member.lineno and member.filepath:
            path = member.filepath
            if path not in files:
                files[path] = pathlib.Path(path).read_text().split("\n")
            lines, k, block = files[path], member.lineno - 2, []
            while k >= 0 and lines[k].strip().startswith("#:"):
                block.insert(0, lines[k].strip()[2:].strip())
                k -= 1
            if block:
                member.docstring = griffe.Docstring("\n".join(block), lineno=k + 2, parent=member)
        if member.is_module or member.is_class:
            _doc_comments(member, files)


class RestRoles(griffe.Extension):
    """Rewrite reST roles and simple tables of every sdjax docstring (see the module docstring)."""

    def on_package(self, *, pkg, **kwargs) -> None:
        if pkg.path != "sdjax":
            return
        _doc_comments(pkg, {})
        rendered = _rendered(pkg)

        def replace(obj):
            def one(match: re.Match) -> str:
                short, name = match.group(1), match.group(2)
                shown = name.rsplit(".", 1)[-1] if short else name
                candidates = [name] if name.startswith("sdjax") else [f"{s}.{name}" for s in _scopes(obj)] + [f"sdjax.{name}"]
                for path in candidates:
                    target = _lookup(pkg, path)
                    if target is not None and target.path in rendered:
                        return f"[`{shown}`][{rendered[target.path]}]"
                return f"`{shown}`"

            return one

        def roles(obj, text: str) -> str:
            # Indented literal blocks outside the Arguments/Returns/... sections are code in
            # Markdown: a role there becomes the bare name.
            out, code, section, previous = [], False, False, ""
            for line in text.split("\n"):
                indented = line.startswith("    ")
                if SECTION.match(line):
                    section = True
                elif line.strip() and not indented:
                    section = False
                if line.strip():
                    code = indented and not section and (code or not previous.strip())
                out.append(ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), line) if code else ROLE.sub(replace(obj), line))
                previous = line
            return "\n".join(out)

        def walk(obj) -> None:
            if obj.docstring is not None:
                text = _tables(roles(obj, obj.docstring.value))
                # reST's "paragraph::" before a literal block: the block is indented code in
                # Markdown already.
                obj.docstring.value = re.sub(r"(?<=\S)::$", ":", text, flags=re.MULTILINE)
            for member in obj.members.values():
                if not member.is_alias:
                    walk(member)

        walk(pkg)
