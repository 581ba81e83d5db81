"""The plugin's version: the one string, which pyproject reads without importing the package."""

__version__ = "0.1.0"
