"""``likelihoods/`` is the lower layer: it imports nothing from savigp and declares nothing of the
command line (the names and options of ``savigp train --likelihood`` are savigp's,
:mod:`savigp.cli.likelihood_options`)."""
import ast
from pathlib import Path

import likelihoods

SOURCES = sorted(Path(likelihoods.__file__).parent.glob("*.py"))


def test_likelihoods_import_nothing_from_savigp():
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""] if node.level == 0 else []
            else:
                continue
            assert not any(m == "savigp" or m.startswith("savigp.") for m in mods), (path.name, mods)


def test_likelihoods_declare_no_command_line_vocabulary():
    declared = [(path.name, node.targets[0].id) for path in SOURCES for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in ("cli_name", "cli_options", "cli_user_code", "standardizable")]
    declared += [(path.name, node.target.id) for path in SOURCES for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                 and node.target.id.startswith("cli_")]
    assert declared == []
    assert not (Path(likelihoods.__file__).parent / "registry.py").exists()
