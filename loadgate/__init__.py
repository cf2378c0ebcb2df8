"""loadgate: a load tester for LLM serving engines that proves exactness before it reports speed."""

from loadgate.version import __version__

__all__ = ["__version__"]
