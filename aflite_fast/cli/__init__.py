"""The ``aflite-fast`` command line: one module per subcommand, dispatched here.

Adding a subcommand
-------------------
Write ``aflite_fast/cli/_NAME.py`` with ``add_parser(subparsers)`` (registers and returns its
parser) and ``run(args) -> int``, then add ``"_NAME"`` to :data:`SUBCOMMANDS`: that one line
registers it.  Every subcommand module is imported to build the parser (for ``aflite-fast
--help`` and ``--version`` too), so at its top it imports only light modules (argparse, the
standard library, ``cli._args``, ``aflite_fast._memory``, ``aflite_fast._loss_names``,
``aflite_fast._mode_names``) and
``run`` imports NumPy, the kernel and the rest when it runs; ``tests/test_cli.py::
test_help_and_version_import_nothing_heavy`` holds every subcommand to it.  A module may
define ``PARAMETER_FLAGS`` (Python parameter name -> flag) so that library errors name the
flags the user typed.

Exit codes: 0 success; 2 bad input or a refusal of the system (a command line argparse
refuses, ValueError, MemoryError, a missing optional dependency, OSError such as a full disk:
one line on stderr); 130 Ctrl-C and
143 SIGTERM, after the run removed what it had staged (outputs are written through
:class:`aflite_fast.io.atomic.OutputSet`, never half-way).
"""
import importlib
import signal
import sys
import threading
from contextlib import contextmanager

from .._version import __version__
from ._args import ArgumentParser, UsageError, name_flags

#: Subcommand modules, in the order ``--help`` lists them; one line registers a subcommand.
#: A module missing from this build (an optional one) is skipped.
SUBCOMMANDS = ("_filter", "_oof", "_report", "_demo", "_synthetic", "_noise_robust", "_label_issues")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that a run unwinds exactly as on Ctrl-C."""


def build_parser():
    parser = ArgumentParser(
        prog="aflite-fast",
        description="Fast AFLite: filter the instances a linear model predicts too easily "
                    "from their embeddings (Le Bras et al., ICML 2020).")
    parser.add_argument("--version", action="version", version=f"aflite-fast {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.endswith(name):
                continue  # subcommand not shipped in this build
            raise
        sub_parser = module.add_parser(sub)
        if sub_parser is not None:
            if sub_parser.get_default("func") is None:
                sub_parser.set_defaults(func=module.run)
            sub_parser.set_defaults(_flags=getattr(module, "PARAMETER_FLAGS", {}))
    return parser


@contextmanager
def _sigterm_raises():
    """While active, SIGTERM raises :class:`Terminated` in the main thread (as SIGINT raises
    KeyboardInterrupt), so ``with`` blocks clean up; the previous handler is restored after.

    The handler runs between Python bytecodes: inside a long compiled call (a kernel block)
    it waits for that call to return, as Ctrl-C does.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv=None):
    """Entry point of ``aflite-fast``; returns the process exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    prog = f"aflite-fast {args.command}"
    try:
        with _sigterm_raises():
            return int(args.func(args) or 0)
    except (ValueError, MemoryError, ImportError, OSError) as exc:
        # ImportError: an optional dependency a subcommand needs (e.g. matplotlib); OSError:
        # the system refused something (disk full, ...), the run's staged outputs are removed
        message = name_flags(str(exc), getattr(args, "_flags", {}))
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 2
    except Terminated:
        print(f"{prog}: terminated (SIGTERM); no output written", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; no output written", file=sys.stderr)
        return 128 + signal.SIGINT


if __name__ == "__main__":  # python -m aflite_fast.cli
    sys.exit(main())
