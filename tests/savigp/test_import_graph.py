"""The import graph of ``savigp`` (read from the source): no import circle among module-level
imports, none new among the imports inside functions, and no arrow that runs back up the layers of
docs/architecture.md (a kernel, a posterior family or an estimator never imports the model, the model
and training never import the model files or the command line; the model does not know its file
format)."""
import ast
import functools
import subprocess
import sys

from conftest import ROOT

#: circles through imports inside functions that exist already (none: a new one fails)
KNOWN_CIRCLES = []
#: the layers, bottom up (docs/architecture.md): a module imports modules of its own layer or of lower
#: ones only, never one of a higher layer; every module is in one (a new top-level module or package
#: is placed here)
LAYERS = (
    ("savigp._choices", "savigp.settings", "savigp._checks"),  # the registries, the settings: no torch
    ("savigp.linalg", "savigp.runtime", "savigp.io"),
    # the model's parts; estimators read the families' marginals (savigp.posteriors.marginals)
    ("savigp.kernels", "savigp.posteriors", "savigp.mean_heads", "savigp.estimators", "savigp.inducing",
     "savigp.metrics", "savigp.cost", "savigp.user_likelihood", "savigp.best_constant"),
    ("savigp.model", "savigp.odvff", "savigp.parts"),
    ("savigp.training",),
    # model selection: searches proposing candidates over one loop, above fit (which knows nothing of them)
    ("savigp.selection",),
    ("savigp.model_files",),
    # the report reads a model file's records (the search's table, the trace) and the model
    ("savigp.reports",),
    ("savigp.cli", "savigp.testing"),
)
#: the package's entry points: the root holds only the table of lazy exports and the version, so an
#: arrow into it (``from .. import __version__``) imports no layer
ENTRY_POINTS = ("savigp", "savigp.__main__")


def _layer(module: str):
    """The index in :data:`LAYERS` of ``module`` (None for an entry point)."""
    if module in ENTRY_POINTS:
        return None
    for i, group in enumerate(LAYERS):
        if any(module == g or module.startswith(g + ".") for g in group):
            return i
    raise AssertionError(f"{module} is in no layer of LAYERS: place it there (docs/architecture.md)")


def _arrows_up(edges: dict) -> set:
    """The imports ``(module, target)`` from a lower layer to a higher one."""
    return {(m, t) for m, ts in edges.items() for t in ts
            if _layer(m) is not None and _layer(t) is not None and _layer(t) > _layer(m)}


def _modules() -> dict:
    mods = {}
    for path in sorted((ROOT / "savigp").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        package = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if package else parts)] = (path, package)
    return mods


@functools.lru_cache(maxsize=None)
def _graph(top_level_only: bool) -> dict:
    """module -> the savigp modules it imports (``from . import x`` of a submodule x: x itself)."""
    mods = _modules()
    edges = {m: set() for m in mods}
    for name, (path, package) in mods.items():
        tree = ast.parse(path.read_text())
        for node in tree.body if top_level_only else ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    pkg = name.split(".") if package else name.split(".")[:-1]
                    pkg = pkg[:len(pkg) - node.level + 1]
                    base = ".".join(pkg + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            edges[name] |= {t for t in targets if t in mods and t != name}
    return edges


def _circles(edges: dict) -> list:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_no_import_circle_among_module_level_imports():
    assert _circles(_graph(top_level_only=True)) == []


def test_no_new_circle_through_imports_inside_functions():
    assert [c for c in _circles(_graph(top_level_only=False)) if c not in KNOWN_CIRCLES] == []


def test_the_arrow_finder_finds_an_arrow_up():
    assert _arrows_up({"savigp.kernels.base": {"savigp.model", "savigp.linalg.cholesky"}, "savigp.cli.train":
                       {"savigp.model"}, "savigp": {"savigp.cli"}}) == {("savigp.kernels.base", "savigp.model")}


def test_every_module_is_in_a_layer():
    for module in _modules():
        _layer(module)


def test_no_arrow_runs_back_up_a_layer():
    """Imports inside functions included: a kernel does not build a model (the ODVFF model is
    savigp.odvff's), the model and training do not import the model files or the command."""
    assert _arrows_up(_graph(top_level_only=False)) == set()


def test_the_model_imports_without_its_file_format_in_a_fresh_interpreter():
    code = ("import sys, savigp.model, savigp.kernels, savigp.posteriors, savigp.training; "
            "print(sorted(m for m in sys.modules if m.startswith(('savigp.model_files', 'savigp.cli'))))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"


def test_the_model_has_no_save_method_and_no_arrow_to_the_file_format():
    """savigp.save(model, path) sits beside savigp.load; the model does not know its file format
    (SAVIGP.save, deprecated for it, is gone with its arrow up to savigp.model_files)."""
    import savigp

    assert not hasattr(savigp.SAVIGP, "save")
    assert not any(t.startswith("savigp.model_files") for t in _graph(top_level_only=False)["savigp.model"])
