"""``aflite-fast report DIR``: draw DIR/report.png from the DIR/report.json of a filter run."""
import sys

from ..report import write_report_png


def add_parser(subparsers):
    p = subparsers.add_parser(
        "report", help="draw DIR/report.png from the report.json of a filter run",
        description="Draw DIR/report.png from DIR/report.json (written by 'aflite-fast filter'): rows "
                    "active and rows >= tau per phase (and, for a run with --null, the rows >= tau "
                    "with permuted labels and the margin of --stop null), the score histograms of the first and last "
                    "phase, and the share of each class among kept rows per phase. Needs matplotlib: "
                    "pip install 'aflite_fast[plots]'.")
    p.add_argument("dir", metavar="DIR", help="output directory of 'aflite-fast filter'")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    return p


def run(args):
    path = write_report_png(args.dir)
    if not args.quiet:
        print(f"aflite-fast report: wrote {path}", file=sys.stderr)
    return 0
