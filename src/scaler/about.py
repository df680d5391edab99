"""The package version; one place, read by pyproject.toml."""

__version__ = "2.0.0.dev0"
