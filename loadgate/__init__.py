"""loadgate: a load tester for LLM serving engines that proves exactness before it reports speed."""

__version__ = "0.1.0"
