"""Sphinx configuration of the API reference, built from the docstrings:

    python -m sphinx -W -b html docs docs/_build/html

(the test suite builds it with warnings as errors: tests/docs/test_api_reference.py). The guides
beside it (cli.md, custom_likelihood.md, ...) are Markdown, read by MyST (``myst_parser``, in the
``docs`` and ``test`` extras) into the same site: the index lists them before the reference."""
import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "savigp"
author = "the savigp authors"
copyright = "the savigp authors"
release = "0.1.0"

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
myst_heading_anchors = 3  # (the guides link to each other's sections: cli.md#model-files-are-data)
root_doc = "index"
exclude_patterns = ["_build"]

napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the docstrings state shapes and types; signatures stay readable
html_theme = "alabaster"
