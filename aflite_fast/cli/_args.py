"""Argument types, help formatting and error wording shared by the subcommands.

Light on purpose (argparse and the standard library only): subcommand parsers are built for
``aflite-fast --help`` without importing NumPy, Numba or the kernel.
"""
import argparse
import re
import sys

from .._memory import parse_memory


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's line breaks and appends ``(default: X)`` to every option that
    has a meaningful default (not None, not a False switch, not already in the text)."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if ("%(default)" in text or default is None or default is False
                or default is argparse.SUPPRESS or not action.option_strings):
            return text
        return f"{text} (default: %(default)s)"


def positive_int(text):
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def memory_size(text):
    """argparse type: a memory size (see :mod:`aflite_fast._memory` for the units), in bytes."""
    try:
        return parse_memory(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace(" for max_memory", "")) from None


def cap_threads(requested, prog, quiet=False):
    """``requested`` threads (None: all cores), capped at the cores this process may use.

    Results do not depend on the thread count, so more threads than cores only costs time;
    a note on stderr says so (unless ``quiet``).
    """
    from .._threads import effective_n_threads

    available = effective_n_threads(None)
    if requested is None or requested <= available:
        return requested
    if not quiet:
        print(f"{prog}: note: --threads {requested} is more than the {available} core(s) "
              f"available; using {available}", file=sys.stderr)
    return available


def name_flags(message, flags):
    """``message`` with each Python parameter name of ``flags`` replaced by its flag.

    The library's errors name parameters (``n_jobs must be ...``); on the command line the
    user typed flags (``--threads``).  Only whole names are replaced: not ``C`` in
    ``C-contiguous`` nor ``T`` in ``T.npy``.
    """
    for param, flag in flags.items():
        message = re.sub(rf"(?<![\w.-]){re.escape(param)}(?![\w-]|\.\w)", flag, message)
    return message
