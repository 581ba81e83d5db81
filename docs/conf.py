"""Sphinx configuration: MyST pages, the furo theme, reference pages generated from the code."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

from pytest_agenteval import __version__

project = "pytest-agenteval"
author = "pytest-agenteval developers"
release = version = __version__
copyright = "pytest-agenteval developers"

extensions = ["myst_parser", "sphinx.ext.autodoc", "agenteval_reference"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "README.md"]
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]
# Curly quotes and ellipses, but never "--" into a dash: option names are typed as written.
smartquotes_action = "qe"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True}

html_theme = "furo"
html_title = f"pytest-agenteval {version}"
# Offline: no fonts or scripts from elsewhere.
html_theme_options = {"navigation_with_keys": True}
html_static_path = ["_static"]
html_css_files = ["agenteval.css"]
