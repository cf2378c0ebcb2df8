"""The package version (a module of its own, so that any stage can read it without importing the
public API in `loadgate/__init__.py`)."""

__version__ = "0.1.0"
