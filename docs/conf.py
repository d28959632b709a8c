"""Sphinx configuration for the torchgraphrec documentation."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

project = "torchgraphrec"
author = "the torchgraphrec developers"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.doctest", "myst_nb"]
html_theme = "furo"
html_static_path = ["_static"]
html_title = "torchgraphrec"
exclude_patterns = ["_build", "notebooks/.ipynb_checkpoints", "pictures.py"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_timeout = 300
suppress_warnings = ["mystnb.unknown_mime_type"]


def setup(app):  # noqa: ANN001, ANN201 - Sphinx's hook
    import pictures

    pictures.main(HERE / "_static")

# Docstring examples run under pytest --doctest-modules; the builder runs the pages' own.
doctest_test_doctest_blocks = ""
