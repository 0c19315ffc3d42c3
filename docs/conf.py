"""Sphinx configuration of the pymc_sgmcmc documentation site.

Build it with ``python -m sphinx -W -b html docs docs/_build/html`` after
``pip install -e ".[docs]"``; the entry page is ``docs/_build/html/index.html``.
"""

from __future__ import annotations

import inspect
import shutil
from pathlib import Path

import pymc_sgmcmc
from pymc_sgmcmc.step_method import StochasticGradientStep

_HERE = Path(__file__).parent
_EXAMPLES = _HERE.parent / "examples"

project = "pymc_sgmcmc"
author = "The pymc_sgmcmc developers"
copyright = "2026, The pymc_sgmcmc developers"
release = version = pymc_sgmcmc.__version__

extensions = [
    "myst_nb",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
]

# Markdown pages and the example notebooks, rendered with their stored outputs:
# the notebooks are run by the test suite, not by the documentation build.
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3

exclude_patterns = ["_build", "benchmark/usable.md"]

autodoc_default_options = {"members": False}
autodoc_typehints = "none"
autosummary_generate = False
numpydoc_show_class_members = False
numpydoc_xref_param_type = False

html_theme = "pydata_sphinx_theme"
html_title = "pymc_sgmcmc"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
html_static_path: list[str] = []


def _copy_notebooks(app) -> None:
    """Copy the example notebooks next to the pages that include them."""
    target = _HERE / "examples"
    target.mkdir(exist_ok=True)
    for notebook in sorted(_EXAMPLES.glob("*.ipynb")):
        destination = target / notebook.name
        if not destination.exists() or destination.read_bytes() != notebook.read_bytes():
            shutil.copyfile(notebook, destination)


def _step_method_signature(app, what, name, obj, options, signature, return_annotation):
    """Show a step method's ``__init__`` arguments, not PyMC's ``__new__(*args, **kwargs)``."""
    if what == "class" and isinstance(obj, type) and issubclass(obj, StochasticGradientStep):
        parameters = list(inspect.signature(obj.__init__).parameters.values())[1:]
        bare = [parameter.replace(annotation=inspect.Parameter.empty) for parameter in parameters]
        return str(inspect.Signature(bare)), None
    return None


def setup(app):
    """Copy the notebooks before reading, and fix the step methods' signatures."""
    app.connect("builder-inited", _copy_notebooks)
    app.connect("autodoc-process-signature", _step_method_signature)
