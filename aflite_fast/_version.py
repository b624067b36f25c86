"""The package version (read by pyproject.toml and ``aflite-fast --version``; no imports)."""
__version__ = "0.1.0"
