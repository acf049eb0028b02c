"""Capabilities, not names (docs/architecture.md): outside a list's owner, no module of ``savigp``
compares a registered name, tests a part's class or probes a family's own attribute; it reads what
the part declares (a kernel's ``has_period``, an optimizer's ``line_search``, a family's
``mean_field_over_u``, ...). Every module of ``savigp/`` is read with :mod:`ast` (not a list of
files: issue 55 found 18 comparisons in modules the earlier list of 7 left out).

What is caught:

* a comparison (``==``, ``!=``, ``in``, ``not in``, chained or not) of a string literal that is a
  name or alias of a registry whose entries are parts (:data:`REGISTRIES`), directly or through a
  module-level tuple, list, set or dict of such literals (``b["kernel"] in _NEUTRAL_FACTORS``);
* ``isinstance(x, C)`` where C is a class in the MRO of a registered entry below its protocol's base
  (a posterior family, a mean head, a kernel family, an estimator), outside the family's package, or
  of a registered likelihood below :class:`likelihoods.Likelihood` outside the likelihoods'
  command-line tables;
* ``getattr(x, "a")`` / ``hasattr(x, "a")`` where "a" is an attribute a registered family defines but
  its protocol's base does not declare (``"logits"``: a mixture's), outside the family's package, or a
  private attribute (``"_x"``) of an object other than ``self`` or ``cls`` that the module does not set
  itself.
"""
import ast
import inspect
from pathlib import Path

import pytest

import savigp
from savigp import _choices
from savigp.estimators import Estimator
from savigp.kernels import Kernel
from savigp.mean_heads import MeanHead
from savigp.posteriors import Posterior

ROOT = Path(savigp.__file__).parent

#: the registries whose entries are parts that declare capabilities, with the protocol's base class
#: and the package that holds the families (where the families' own names, classes and attributes are
#: at home). The plain lists of names (ENTROPY_ESTIMATES, PARAMETER_GROUPS, INDUCING_INITS, DTYPES) map
#: to no part that could declare anything: their names are the vocabulary itself, read by the modules
#: that own them (posteriors/entropy.py, training/groups.py, inducing.py, the dtype's readers).
REGISTRIES = {
    "KERNELS": (_choices.KERNELS, Kernel, "kernels"),
    "POSTERIORS": (_choices.POSTERIORS, Posterior, "posteriors"),
    "MEAN_HEADS": (_choices.MEAN_HEADS, MeanHead, "mean_heads"),
    "ESTIMATORS": (_choices.ESTIMATORS, Estimator, "estimators"),
    "OPTIMIZERS": (_choices.OPTIMIZERS, object, "training/optimizers.py"),
    "LIKELIHOODS": (_choices.LIKELIHOODS, object, None),  # (the likelihoods live in likelihoods/, not savigp/)
}

#: where a registered name may be compared (module -> the registries whose names it owns, and why),
#: and a literal that is another list's own name and only happens to be spelled as a registered one
NAME_OWNERS = {
    "_choices.py": (set(REGISTRIES), "the registries: the names are written here, once"),
    "cli/likelihood_options.py": ({"LIKELIHOODS"}, "the likelihoods' command-line tables (their options, whether "
                                  "their targets are standardizable): likelihoods/ has no command-line vocabulary, so "
                                  "the command's own tables, keyed by name, are where a likelihood's name is at home"),
    "model_files/migrations.py": ({"POSTERIORS", "KERNELS"}, "the format's history: a file of an older version names "
                                  "its family in that version's spelling, which a step translates; no part is built "
                                  "yet to ask"),
}
NAME_EXCEPTIONS = {
    ("training/natural_gradients.py", "adam"): "GAMMA_UPDATES' own 'adam' (the head's gamma update), defined "
                                               "and read in that module; not an OPTIMIZERS name",
}
#: the protocols' attributes that every family sets on its instances, documented on the base
#: (Posterior's docstring: K, Q, M) rather than declared as class attributes
PROTOCOL_INSTANCE_ATTRIBUTES = {"kind", "num_components", "num_latent", "num_inducing"}


def _modules():
    return sorted(ROOT.rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _inside(rel: str, package) -> bool:
    return package is not None and (rel == package or rel.startswith(package + "/"))


def _registered_names() -> dict:
    """Every name and alias of :data:`REGISTRIES` -> the registries that hold it."""
    names = {}
    for what, (registry, _, _) in REGISTRIES.items():
        for name in list(registry.names()) + list(registry._aliases):
            names.setdefault(name, set()).add(what)
    return names


def _strings(node, constants: dict) -> list:
    """The string literals a comparison operand stands for: a literal, a tuple/list/set of them, or a
    module-level name bound to such a collection (a dict: its keys)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e, {})]
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    return []


def _module_constants(tree: ast.Module) -> dict:
    out = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        value = getattr(node, "value", None)
        if isinstance(value, ast.Dict):
            strings = [s for k in value.keys if k is not None for s in _strings(k, {})]
        else:
            strings = _strings(value, {}) if value is not None else []
        for t in targets:
            if isinstance(t, ast.Name) and strings:
                out[t.id] = strings
    return out


def name_comparisons(source: str, rel: str, names: dict) -> list:
    """``["rel:line: <code> (REGISTRY names: ...)"]`` for each comparison of a registered name not owned
    by the module (:data:`NAME_OWNERS`, :data:`NAME_EXCEPTIONS`)."""
    owned = NAME_OWNERS.get(rel, (set(), ""))[0]
    tree = ast.parse(source)
    constants = _module_constants(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        hits = sorted({s for part in [node.left, *node.comparators] for s in _strings(part, constants)
                       if s in names and not names[s] <= owned and (rel, s) not in NAME_EXCEPTIONS})
        if hits:
            what = ", ".join(sorted({r for s in hits for r in names[s]}))
            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)} ({what} names: {', '.join(hits)})")
    return found


def _families():
    """``(class, package)`` for every class in the MRO of a registered entry below its protocol's base
    (FullMixture, MixturePosterior, ScaledPosterior, RBF, Stationary, ...)."""
    for registry, base, package in REGISTRIES.values():
        for name in registry.names() if base is not object else ():
            for cls in inspect.getmro(registry[name]):
                if cls is not base and issubclass(cls, base) and cls.__module__.startswith("savigp."):
                    yield cls, package


#: where a registered likelihood's class may be tested: the likelihoods' command-line tables, their
#: owner in savigp (the likelihoods themselves live in likelihoods/, outside savigp/)
LIKELIHOOD_CLASS_OWNER = "cli/likelihood_options.py"


def _likelihood_classes():
    """``(class, owner)`` for every class in the MRO of a registered likelihood below
    :class:`likelihoods.Likelihood` (Gaussian, Logistic, Probit, ...): what a likelihood declares
    (``conjugate``, ``binary``, ``log_concave``, ...) is read instead of its class."""
    from likelihoods import Likelihood

    registry = _choices.LIKELIHOODS
    for name in registry.names():
        for cls in inspect.getmro(registry[name]):
            if cls is not Likelihood and isinstance(cls, type) and issubclass(cls, Likelihood):
                yield cls, LIKELIHOOD_CLASS_OWNER


def _family_classes() -> dict:
    """Class name -> the package of its family (:func:`_families`), and the registered likelihoods'
    classes -> their owner (:func:`_likelihood_classes`)."""
    return {cls.__name__: package for cls, package in [*_families(), *_likelihood_classes()]}


def _own_attributes(cls) -> set:
    """What a class body defines and its methods assign to ``self`` (parameters and buffers too)."""
    out = set(vars(cls))
    try:
        tree = ast.parse(inspect.getsource(cls).lstrip())  # (a nested class's source is indented)
    except (OSError, TypeError):
        return out
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" \
                and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("register_buffer", "register_parameter") and node.args \
                and isinstance(node.args[0], ast.Constant):
            out.add(node.args[0].value)
    return out


def _family_attributes() -> dict:
    """Attribute -> package, for the attributes registered families define that no protocol's base
    declares (a mixture's ``logits``, a family's ``mean`` and ``raw_scale``, ...; ``num_latent``, which
    :class:`~savigp.kernels.Kernel` declares, is the parts' shared vocabulary, not a family's own)."""
    out, bases = {}, [base for _, base, _ in REGISTRIES.values() if base is not object]
    declared = {a for base in bases for c in inspect.getmro(base) for a in [*dir(c), *getattr(c, "__annotations__", {})]}
    declared |= PROTOCOL_INSTANCE_ATTRIBUTES
    for cls, package in _families():
        for attr in _own_attributes(cls) - declared:
            if not attr.startswith("__"):
                out.setdefault(attr, package)
    return out


def class_tests_and_probes(source: str, rel: str, classes: dict, attributes: dict) -> list:
    """``isinstance`` against a family's class outside its package; ``getattr``/``hasattr`` of a
    family's own attribute outside its package, or of a private attribute of another object."""
    found, tree = [], ast.parse(source)
    # private attributes the module sets itself (a kit's cache on its own problem object): its own
    set_here = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id == "isinstance" and len(node.args) == 2:
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            for k in kinds:
                cls = k.id if isinstance(k, ast.Name) else k.attr if isinstance(k, ast.Attribute) else None
                if cls in classes and not _inside(rel, classes[cls]):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)} (a {classes[cls]} class)")
        if node.func.id in ("getattr", "hasattr") and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str):
            attr, owner = node.args[1].value, node.args[0]
            if attr in attributes and not _inside(rel, attributes[attr]):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)} (an attribute of {attributes[attr]} families)")
            elif attr.startswith("_") and not attr.startswith("__") and attr not in set_here \
                    and not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)} (a private attribute)")
    return found


def test_no_module_compares_a_registered_name_outside_its_owner():
    names = _registered_names()
    found = [hit for path in _modules() for hit in name_comparisons(path.read_text(), _rel(path), names)]
    assert not found, "compare what the part declares, not its name:\n" + "\n".join(found)


def test_no_module_tests_a_family_class_or_probes_a_family_attribute():
    classes, attributes = _family_classes(), _family_attributes()
    found = [hit for path in _modules() for hit in class_tests_and_probes(path.read_text(), _rel(path), classes, attributes)]
    assert not found, "read the protocol's declarations, not a class or a family's attributes:\n" + "\n".join(found)


@pytest.mark.parametrize("code,caught", [
    ('if optimizer == "lbfgs": pass', True),
    ('ok = steps.optimizer in ("adam", "adadelta")', True),
    ('ok = leaf["kernel"] != "periodic"', True),
    ('FAMILIES = ("rbf", "matern12")\nok = b["kernel"] in FAMILIES', True),
    ('WORDS = {"rbf": "a smooth"}\nok = leaf.get("kernel") in WORDS', True),
    ('ok = kind == "mog"', True),  # (an alias)
    ('ok = name == "gaussian"', True),
    ('ok = a < b == "closed-form"', True),
    ('fit(model, optimizer="lbfgs")', False),  # passing a name is how a part is chosen
    ('ok = mode == "nearest"', False),
])
def test_the_scan_catches_a_name_compared(code, caught):
    """The scan itself, on code of each form (and on calls that pass a name, which it leaves)."""
    assert bool(name_comparisons(code, "training/example.py", _registered_names())) == caught


@pytest.mark.parametrize("code,caught", [
    ("ok = isinstance(model.posterior, UDiagonalMixture)", True),
    ("ok = isinstance(p, (int, posteriors.MixturePosterior))", True),
    ("ok = isinstance(k, Periodic)", True),
    ("ok = isinstance(model.likelihood, Gaussian)", True),  # (a likelihood's class: read its conjugate)
    ("ok = isinstance(likelihood, likelihoods.Logistic)", True),
    ('logits = getattr(post, "logits", None)', True),
    ('ok = hasattr(model.posterior, "raw_scale")', True),
    ('cache = getattr(model, "_cache", None)', True),
    ('cache = getattr(self, "_cache", None)', False),
    ('cache = getattr(p, "_cache", None)\np._cache = 1', False),  # (the module's own cache on its object)
    ("ok = isinstance(model.posterior, Posterior)", False),  # the protocol itself
    ('ok = getattr(likelihood, "log_concave", False)', False),
])
def test_the_scan_catches_a_class_tested_or_an_attribute_probed(code, caught):
    found = class_tests_and_probes(code, "cli/example.py", _family_classes(), _family_attributes())
    assert bool(found) == caught, found
