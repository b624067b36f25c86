"""The ``aflite-fast`` command line: one module per subcommand, dispatched here.

Each subcommand module exposes ``add_parser(subparsers)`` (registering its parser with a
default ``func``) and ``run(args) -> int``.  Errors in the user's input exit with code 2 and
one line on stderr; nothing is written half-way (see ``_output.AtomicOutputDir``).
"""
import argparse
import importlib
import sys

from .. import __version__

#: Subcommand modules, in the order ``--help`` lists them.  Optional ones (which need an
#: extra) are imported lazily and skipped when absent.
SUBCOMMANDS = ("_filter", "_report", "_demo", "_synthetic", "_noise_robust", "_label_issues")


def build_parser():
    parser = argparse.ArgumentParser(
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
        if sub_parser is not None and sub_parser.get_default("func") is None:
            sub_parser.set_defaults(func=module.run)
    return parser


def main(argv=None):
    """Entry point of ``aflite-fast``; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, MemoryError, ImportError) as exc:
        # ImportError: an optional dependency a subcommand needs (e.g. matplotlib)
        print(f"aflite-fast {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("aflite-fast: interrupted; no output written", file=sys.stderr)
        return 130


if __name__ == "__main__":  # python -m aflite_fast.cli
    sys.exit(main())
