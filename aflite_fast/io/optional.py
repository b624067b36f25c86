"""Optional dependencies of the readers: imported on first use, or an error naming the extra.

pyarrow (Arrow, Hugging Face datasets, Parquet) is not a core dependency; a reader calls
:func:`require` when it first needs it, so a user without it learns which extra installs it.
"""
import importlib

#: The extra of ``pyproject.toml`` that installs the optional readers.
EXTRA = "formats"


def require(module):
    """Import ``module`` (an optional dependency) or raise ImportError naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"reading this format needs {module}, which is not installed: pip install "
                          f"'.[{EXTRA}]' in a clone of aflite_fast (or pip install {module})") from exc
