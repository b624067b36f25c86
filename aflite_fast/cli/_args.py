"""Argument types, help formatting and error wording shared by the subcommands.

Light on purpose (argparse and the standard library only): subcommand parsers are built for
``aflite-fast --help`` without importing NumPy, Numba or the kernel.
"""
import argparse
import re
import sys

from aflite_fast.runtime.memory import parse_memory


class UsageError(Exception):
    """A command line that argparse refused; :func:`aflite_fast.cli.main` prints it (one line)
    and returns exit code 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, except that a bad command line raises :class:`UsageError` with
    argparse's own one-line message (``aflite-fast filter: error: argument --n-jobs: ...``)
    instead of printing the usage above it and exiting: every refusal of the command line is
    one line on stderr and exit code 2, whether argparse or the run finds it.  Subparsers
    made by ``add_subparsers`` are of this class too.  ``--help`` and ``--version`` still exit
    (code 0) as usual."""

    def error(self, message):
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


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


def _int_at_least(text, low, what):
    """``text`` as an integer >= ``low``, or argparse's error saying it must be ``what``."""
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def positive_int(text):
    """argparse type: an integer >= 1."""
    return _int_at_least(text, 1, "a positive integer")


def non_negative_int(text):
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0, "an integer >= 0")


def positive_seconds(text):
    """argparse type: a number of seconds > 0 (finite)."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def tolerance(text):
    """argparse type: ``auto`` or a non-negative finite number (the solver's ``tol``; the text
    form of :func:`aflite_fast.core.solver.check_tol`, which this module does not import: the
    kernel would load with ``--help``)."""
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 'auto' or a non-negative number, got {text!r}")
    return value


def memory_size(text):
    """argparse type: a memory size (see :mod:`aflite_fast.runtime.memory` for the units), in bytes."""
    try:
        return parse_memory(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace(" for max_memory", "")) from None


def cap_threads(requested, prog, quiet=False):
    """``requested`` threads (None: all cores), capped at the cores this process may use.

    Results do not depend on the thread count, so more threads than cores only costs time;
    a note on stderr says so (unless ``quiet``).
    """
    from aflite_fast.runtime.threads import effective_n_threads

    available = effective_n_threads(None)
    if requested is None or requested <= available:
        return requested
    if not quiet:
        print(f"{prog}: note: --n-jobs {requested} is more than the {available} core(s) "
              f"available; using {available}", file=sys.stderr)
    return available


def name_flags(message, flags):
    """``message`` with each Python parameter name of ``flags`` replaced by its flag.

    The library's errors name parameters (``n_jobs must be ...``); on the command line the
    user typed flags (``--n-jobs``).  Only whole argument names are replaced: not ``C`` in
    ``C-contiguous`` nor ``T`` in ``T.npy``.  A name that is also an ordinary word (lowercase
    letters only: ``groups``, ``null``, ``remove``, ``stop``, ``tau``) is replaced only where
    it names the argument: before "=", or as the subject of the message or of a clause (after
    "; ") followed by a verb of the library's messages (``must``, ``has``, ...), a quoted
    value or punctuation, so that "the largest of the 3 groups", "the permutation null" or "; remove
    it or give another path" keep their words.
    """
    for param, flag in flags.items():
        name = re.escape(param)
        if param.isalpha() and param.islower():
            subject = rf"(?:(?<=^)|(?<=; )){name}(?={_SUBJECT_FOLLOWERS})"
            pattern = rf"{subject}|(?<![\w.-]){name}(?==)"
        else:
            pattern = rf"(?<![\w.-]){name}(?![\w-]|\.\w)"
        message = re.sub(pattern, flag, message)
    return message


#: What follows a parameter name that is the subject of a library message: a verb the
#: messages use, its quoted value (``checkpoint 'c.npz' was written ...``), or punctuation.
_SUBJECT_FOLLOWERS = r" (?:must|has|holds|contains|needs|is|cannot|should)\b| ['\"]|[:.,)]|$"


def add_flag(parser, flag, *aliases, **kwargs):
    """``parser.add_argument(flag, **kwargs)``, plus each of ``aliases`` (an older spelling)
    accepted with the same meaning but not shown by ``--help``, which names ``flag`` only.

    An error about a value names the spelling the user typed (argparse names the action).
    """
    action = parser.add_argument(flag, **kwargs)
    hidden = {key: value for key, value in kwargs.items() if key in ("type", "choices", "metavar", "action", "nargs")}
    for alias in aliases:
        parser.add_argument(alias, dest=action.dest, help=argparse.SUPPRESS, default=argparse.SUPPRESS, **hidden)
    return action
