"""Sphinx configuration of simaccel's documentation site (docs/): `python -m sphinx -W docs OUT`.

Where it sits: the site is built from the repository itself. The pages are the Markdown files
of docs/ (MyST), the tutorials are tutorials/*.py rendered by sphinx-gallery (executed unless
`-D plot_gallery=0`; the tests execute them anyway), the API reference comes from the
docstrings (autodoc, numpydoc sections through napoleon). The results' tables are generated
blocks of the committed pages (docs/site_results.py writes them from the files that
results/current.json names); the site_results extension draws their charts from the same files
when the build starts and places each after its table. tests/test_site.py builds it with
warnings as errors.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The repository (tutorials/, results/, examples/): docs/'s parent, or $SIMACCEL_REPO for a copy
# of docs/ built elsewhere (the tests build one, so the build writes nothing into the checkout).
ROOT = os.environ.get("SIMACCEL_REPO") or os.path.dirname(HERE)
sys.path.insert(0, HERE)

project = "simaccel"
author = "the simaccel developers"
copyright = "2026, the simaccel developers"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx_gallery.gen_gallery",
    "site_results",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "generated_tutorials/*.ipynb", "generated_tutorials/*.py", "**.zip", "**.md5",
                    "**.codeobj.json"]
myst_heading_anchors = 3
nitpicky = False  # type references in docstrings name numpy, tvm and numba types Sphinx cannot resolve offline

html_theme = "furo"
html_title = "simaccel"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
napoleon_numpy_docstring = True
napoleon_google_docstring = False



sphinx_gallery_conf = {
    "reset_argv": "tutorial_argv.answers",  # the answers too (docs/tutorial_argv.py)
    "examples_dirs": [os.path.join(ROOT, "tutorials")],
    "gallery_dirs": ["generated_tutorials"],
    "filename_pattern": r"/\d\d_",  # the numbered stages run; their helper modules do not
    "ignore_pattern": r"mynpu_",
    "within_subsection_order": "FileNameSortKey",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "min_reported_time": 1,
}
