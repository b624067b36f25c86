"""``aflite-fast report DIR``: draw DIR/report.png from the DIR/report.json of a filter run."""
import sys

from aflite_fast.cli._args import HelpFormatter

_DESCRIPTION = """\
Draw DIR/report.png from DIR/report.json (written by 'aflite-fast filter'): rows active and rows
>= tau per phase (and, for a run with --null, the rows >= tau with permuted labels and the margin
of --stop null), the score histograms of the first and last phase, and the share of each class
among kept rows per phase.

report.png joins DIR's output set (docs/outputs.md): it is drawn from the report.json of the set
in place and the set, with it, is switched in whole, so DIR's files always come from one run.
The command waits for no one: while a filter run holds DIR it refuses.

Needs matplotlib (pip install matplotlib, or pip install '.[plots]' in a clone of the repository).
"""


def add_parser(subparsers):
    p = subparsers.add_parser(
        "report", help="draw DIR/report.png from the report.json of a filter run",
        description=_DESCRIPTION, formatter_class=HelpFormatter)
    p.add_argument("dir", metavar="DIR", help="output directory of 'aflite-fast filter'")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    return p


def run(args):
    from aflite_fast.cli._figure import write_report_png

    path = write_report_png(args.dir)
    if not args.quiet:
        print(f"aflite-fast report: wrote {path}", file=sys.stderr)
    return 0
