"""The ``aflite-fast`` command line: one module per subcommand, dispatched here.

Adding a subcommand
-------------------
Write ``aflite_fast/cli/_NAME.py`` with ``add_parser(subparsers)`` (registers and returns its
parser) and ``run(args) -> int``, then add ``"_NAME"`` to :data:`SUBCOMMANDS`: that one line
registers it.  Every subcommand module is imported to build the parser (for ``aflite-fast
--help`` and ``--version`` too), so at its top it imports only light modules (argparse, the
standard library, ``cli._args``, ``aflite_fast.runtime.memory``, ``aflite_fast.core.loss_names``,
``aflite_fast.filtering.modes``) and
``run`` imports NumPy, the kernel and the rest when it runs; ``tests/test_cli.py::
test_help_and_version_import_nothing_heavy`` holds every subcommand to it.  A module may
define ``PARAMETER_FLAGS`` (Python parameter name -> flag) so that library errors name the
flags the user typed.

Exit codes: 0 success; 2 bad input or a refusal of the system (a command line argparse
refuses, ValueError, MemoryError, a missing optional dependency, OSError such as a full disk:
one line on stderr); 75 (:data:`EXIT_CLUSTER_LOST`) when the Dask cluster of ``--scheduler`` can
no longer score a phase (every worker lost, X unreadable on the workers left:
:class:`aflite_fast.phase.backends.ClusterLost`), one line on stderr, nothing written, a
``--checkpoint`` kept for a rerun to resume; 130 Ctrl-C and 143 SIGTERM, at any moment from the start of :func:`main`
(argument parsing, NumPy code, Numba and compiled kernel calls), one line on stderr, after the
run removed what it had staged (outputs are written through
:class:`aflite_fast.io.atomic.OutputSet`, never half-way).
"""
import importlib
import re
import signal
import sys
import threading

from aflite_fast._version import __version__
from aflite_fast.cli._args import ArgumentParser, UsageError, name_flags

#: Subcommand modules, in the order ``--help`` lists them; one line registers a subcommand.
#: A module missing from this build (an optional one) is skipped.
SUBCOMMANDS = ("_filter", "_evaluate", "_oof", "_report", "_demo", "_synthetic", "_noise_robust", "_label_issues")


#: Exit code when the Dask cluster can no longer score a phase (every worker lost, X unreadable
#: on the workers left): sysexits' EX_TEMPFAIL, a failure of the system the run used, which a
#: rerun may get past (with ``--checkpoint``, from the last finished phase); not 2, which
#: means bad input.
EXIT_CLUSTER_LOST = 75


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


class _SignalsRaise:
    """While active (``with``), the first SIGINT raises KeyboardInterrupt and the first SIGTERM
    :class:`Terminated` in the main thread, so that ``with`` blocks clean up as the run unwinds;
    a later signal of either kind is noted but raises nothing more, so a second Ctrl-C cannot
    break the clean-up of the first into a traceback.

    Once the command has finished (:attr:`exit_code` set), or has begun to publish its outputs
    (``io.atomic.publishing``: an output set's commit, an output file's rename), a signal
    raises nothing: the outputs stand and the command ends with its own code, rather than
    publish them and report that it wrote nothing.  On exit the
    previous handlers come back, except for the process's own entry point (``keep_after``):
    there the signals are ignored from then on.  Between the end of the command and the end of
    the process a signal would otherwise meet Python's default handlers (a KeyboardInterrupt
    traceback), or none at all: the interpreter's shutdown resets the signals it handled to
    their default action, so SIGTERM would kill the process silently although its outputs are
    complete.  An ignored signal stays ignored through the shutdown.

    The handler runs between Python bytecodes: inside a long compiled call (a kernel block) it
    waits for that call to return.  A signal that lands inside a Numba function surfaces as a
    SystemError whose cause is the KeyboardInterrupt (Numba's dispatcher returns with the
    exception set); :func:`_interruption` finds it there.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, keep_after=False):
        self.first = None
        self.exit_code = None
        self.keep_after = keep_after
        self._previous = {}

    def _handler(self, signum, frame):
        if self.exit_code is not None:
            return  # the command has finished; its outputs stand
        in_progress, published = self._publishing()
        if in_progress or published > self._published_before:
            return  # the outputs are being (or have been) switched in: they stand
        if self.first is not None:
            return  # already unwinding
        self.first = signum
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    def __enter__(self):
        from aflite_fast.io.atomic import publishing

        self._publishing = publishing
        self._published_before = publishing()[1]
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handler)
        return self

    def __exit__(self, *exc):
        for signum, previous in self._previous.items():
            signal.signal(signum, signal.SIG_IGN if self.keep_after else previous)
        return False


def _interruption(exc):
    """The KeyboardInterrupt (or :class:`Terminated`) behind ``exc``: itself, or one in its
    chain of causes and contexts (a Numba call interrupted raises SystemError from it; a
    clean-up that failed while unwinding raises from it), else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _cluster_lost(exc):
    """``exc`` if it is :class:`aflite_fast.phase.backends.ClusterLost`, else None (the module is
    loaded already when it was raised; it is not imported for this)."""
    failures = sys.modules.get("aflite_fast.phase.failures")
    return exc if failures is not None and isinstance(exc, failures.ClusterLost) else None


def main(argv=None):
    """Entry point of ``aflite-fast``; returns the process exit code.

    Signals are caught from its first line, argument parsing included: Ctrl-C anywhere gives
    exit code 130 and SIGTERM 143, each with one line on stderr.  Called without ``argv`` (the
    process's entry point), a signal after the command has finished is ignored: the process
    ends with the command's exit code.
    """
    words = sys.argv[1:] if argv is None else list(argv)
    # the subcommand named in messages, also before argparse has read it (a signal while parsing)
    prog = f"aflite-fast {words[0]}" if words and re.fullmatch(r"[a-z][a-z-]*", words[0]) else "aflite-fast"
    with _SignalsRaise(keep_after=argv is None) as signals:
        code = _run_command(argv, prog, signals)
        signals.exit_code = code
    return code


def _run_command(argv, prog, signals):
    """Parse ``argv`` and run its subcommand; the exit code, also when interrupted or refused."""
    args = None
    try:
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
        return int(args.func(args) or 0)
    except BaseException as exc:  # noqa: B036 - sorted below; anything else is re-raised
        interrupt = _interruption(exc)
        if interrupt is None and signals.first is not None:
            # the signal surfaced as another error (e.g. an extension module whose import it
            # interrupted raises ImportError): the run was interrupted all the same
            interrupt = Terminated() if signals.first == signal.SIGTERM else KeyboardInterrupt()
        if interrupt is not None:
            signals.first = signals.first or signal.SIGINT  # later signals: no second line
            if isinstance(interrupt, Terminated) or signals.first == signal.SIGTERM:
                print(f"{prog}: terminated (SIGTERM); no output written", file=sys.stderr)
                return 128 + signal.SIGTERM
            print(f"{prog}: interrupted; no output written", file=sys.stderr)
            return 128 + signal.SIGINT
        lost = _cluster_lost(exc)
        if lost is not None:
            print(f"{prog}: error: {name_flags(str(lost), getattr(args, '_flags', {}))}; no output written",
                  file=sys.stderr)
            return EXIT_CLUSTER_LOST
        if isinstance(exc, (ValueError, MemoryError, ImportError, OSError)):
            # ImportError: an optional dependency a subcommand needs (e.g. matplotlib);
            # OSError: the system refused something (disk full, ...); the run's staged
            # outputs are removed
            message = name_flags(str(exc), getattr(args, "_flags", {}))
            print(f"{prog}: error: {message}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":  # python -m aflite_fast.cli
    sys.exit(main())
