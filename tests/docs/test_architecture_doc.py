"""docs/architecture.md names files, folders and where classes and functions live: every one of
those claims is checked against the source tree (issue 55, item 6), so that the map cannot drift
from the territory."""
import ast
import re
from pathlib import Path

import pytest

from conftest import ROOT

DOC = ROOT / "docs" / "architecture.md"
TEXT = DOC.read_text()


def _resolve(path: str):
    """The file or folder ``path`` names: from the repository root, from ``savigp/``, or under one
    of savigp's packages (the doc writes ``training/step.py`` and ``posteriors/base.py``)."""
    path = path.rstrip("/")
    for base in (ROOT, ROOT / "savigp"):
        if (base / path).exists():
            return base / path
    if "/" not in path:  # a bare file name, after its folder was named: one file of that name in the tree
        found = [f for top in ("savigp", "likelihoods", "tests") for f in (ROOT / top).rglob(path)]
        return found[0] if len(found) == 1 else None
    return None


def _defined(file: Path) -> set:
    """The names a module defines at its top level or in its classes (classes, functions, methods,
    assignments)."""
    tree = ast.parse(file.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def _paths() -> list:
    """Every backticked token of the doc that is a path (has a slash or ends in .py)."""
    tokens = re.findall(r"`([^`\s]+)`", TEXT)
    return sorted({t for t in tokens if re.fullmatch(r"[\w./-]+", t) and ("/" in t or t.endswith(".py"))
                   and not t.startswith("../") and "<" not in t})


def _tree() -> list:
    """``(package, file, names)`` of the doc's tree: each ``file.py`` listed under a package folder,
    with the names in parentheses right after it."""
    block = TEXT.split("The tree", 1)[1].split("```", 2)[1]
    out, package = [], None
    for line in block.splitlines():
        head = re.match(r"^  (\w+)/", line)
        if head:
            package = head.group(1)
        elif re.match(r"^  \w+\.py", line):  # a module of savigp/ itself
            package = ""
        elif re.match(r"^\S", line):
            package = None
        if package is None:
            continue
        for m in re.finditer(r"(\w+\.py)(?: \(([A-Z][\w, ]*)\))?", line):
            names = [n.strip() for n in (m.group(2) or "").split(",") if re.fullmatch(r"[A-Z]\w*", n.strip())]
            out.append((package, m.group(1), names))
    return out


def _located() -> list:
    """``(names, path)`` where the doc writes ``Name (path.py)`` or ``A / B (path.py...)``: the names
    live in that file."""
    out = []
    for m in re.finditer(r"`?([A-Z]\w+(?:`? / `?[A-Z]\w+)*)`? \((?:[a-z]+ )?`?((?:\w+/)+\w+\.py|\w+\.py)", TEXT):
        out.append(([n.strip(" `") for n in m.group(1).split("/")], m.group(2)))
    return out


@pytest.mark.parametrize("path", _paths())
def test_every_path_the_doc_names_exists(path):
    assert _resolve(path) is not None, f"docs/architecture.md names `{path}`, which is not in the repository"


@pytest.mark.parametrize("package, file, names", _tree(), ids=str)
def test_every_file_of_the_tree_is_in_its_package_and_defines_what_it_says(package, file, names):
    path = ROOT / "savigp" / package / file
    assert path.is_file(), f"docs/architecture.md's tree lists {file} under savigp/{package}, which does not hold it"
    missing = set(names) - _defined(path)
    assert not missing, f"docs/architecture.md: savigp/{package}/{file} does not define {sorted(missing)}"


@pytest.mark.parametrize("names, path", _located(), ids=lambda v: str(v))
def test_every_name_the_doc_places_in_a_file_is_defined_there(names, path):
    file = _resolve(path)
    assert file is not None and file.is_file(), f"docs/architecture.md names {path}, not in the repository"
    missing = set(names) - _defined(file)
    assert not missing, f"docs/architecture.md places {sorted(missing)} in {path}, which does not define them"


def test_the_checks_read_the_doc():
    assert len(_paths()) > 40 and len(_tree()) > 60 and len(_located()) >= 5, (len(_paths()), len(_tree()), len(_located()))


def test_every_module_of_a_package_the_tree_lists_file_by_file_is_in_it():
    """A package whose modules the tree lists (more than one of them, without "...") lists all its
    public modules: a new module goes on the map with its file."""
    block = TEXT.split("The tree", 1)[1].split("```", 2)[1]
    elided = set(re.findall(r"^  (\w+)/.*\.\.\.", block, flags=re.M))
    listed = {}
    for package, file, _ in _tree():
        listed.setdefault(package, set()).add(file)
    unlisted = {package: sorted({f.name for f in (ROOT / "savigp" / package).glob("*.py")
                                 if not f.name.startswith("_")} - files)
                for package, files in listed.items() if package and len(files) > 1 and package not in elided}
    assert not {p: f for p, f in unlisted.items() if f}, f"docs/architecture.md's tree leaves out {unlisted}"
