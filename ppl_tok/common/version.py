"""The release (one place: the package, pyproject.toml and run folders read it from here)."""

__version__ = "0.2.0"
