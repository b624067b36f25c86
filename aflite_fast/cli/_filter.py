"""``aflite-fast filter EMB.npy LABELS --out DIR``: AFLite on an embedding file."""
import os
import sys
import time
import warnings
from dataclasses import dataclass

from aflite_fast._version import __version__
from aflite_fast.cli._args import (
    HelpFormatter,
    add_flag,
    cap_threads,
    memory_size,
    positive_int,
    positive_seconds,
    tolerance,
)
from aflite_fast.cli._inputs import (
    add_groups_arguments,
    add_input_arguments,
    add_model_arguments,
    loss_params,
    read_eval_rows,
    read_groups,
    resolve_labels,
    train_size_arg,
)
from aflite_fast.filtering.modes import CLASS_QUOTAS, COMBINE_RULES, NULL_MODES, REMOVE_MODES, STOP_RULES, TIE_BREAKS
from aflite_fast.io.atomic import OutputSet

#: Files the command writes into --out, switched in together (aflite_fast.io.atomic).
OUTPUT_NAMES = ("keep.npy", "scores.npy", "report.json")
#: Added to the set by --plot.
PLOT_NAME = "report.png"
#: Added to the set by --card.
CARD_NAME = "dataset_card.md"
#: Added to the set by --n-seeds 2 or more.
ENSEMBLE_NAMES = ("consensus_keep.npy", "removal_frequency.npy")

#: Library parameter names -> the flags of this command, for error messages.
PARAMETER_FLAGS = {
    "target_size": "--target-size", "n_partitions": "--n-partitions", "train_size": "--train-size",
    "slice_size": "--slice-size", "tau": "--tau", "C": "--C", "max_memory": "--max-memory",
    "random_state": "--seed", "n_jobs": "--n-jobs", "tol": "--tol", "max_iter": "--max-iter", "T": "--transition",
    "groups": "--groups", "remove": "--remove", "checkpoint": "--checkpoint", "null": "--null",
    "n_null": "--n-null", "stop": "--stop", "scheduler": "--scheduler", "eval_rows": "--eval-rows",
    "eval_only_score": "--eval-only-score", "position_bias": "--position-bias", "tie_break": "--tie-break",
    "features": "--features", "margin": "--margin", "max_removed": "--max-removed",
    "class_quota": "--class-quota", "sources": "--sources", "source_quota": "--source-quota",
    "n_seeds": "--n-seeds", "views": "--view", "combine": "--combine", "featurizer": "--featurizer",
    "device": "--device",
}

_DESCRIPTION = """\
Run AFLite on EMB (N x d, read a chunk at a time, never loaded whole: a .npy file, a .npz
archive holding one array, or FILE.npz:KEY, a directory or glob of .npy shards,
FILE.safetensors[:KEY], a Hugging Face dataset saved with save_to_disk or an .arrow file, a
Parquet file or directory with --column; float16/32/64 or integer, either byte order) with
LABELS and write DIR/keep.npy (sorted kept row indices), DIR/scores.npy (last predictability
score per row, NaN where never scored) and DIR/report.json (parameters, per-phase history with
score histograms, per-class counts and solver status counts, timings); with --plot also
DIR/report.png.

The files are switched in together when the run ends: a reader sees all of the previous run's
files or all of this run's, never a mix, even if the run is killed (they are links into
DIR/.aflite/; see docs/outputs.md). A second run on the same DIR refuses while one is running.

A 3-D EMB (N items x K candidates x d) is multiple choice: LABELS holds the right candidate of
each item (0..K-1), each model scores candidates and an item is a row (docs/multiple_choice.md).

Every run also scores phase 0 with the labels permuted 3 times (the chance check, about 3 more
phase-0 scorings; --no-chance-check skips it) and records it in report.json (chance_check). When
phase 0's rows at or above tau do not exceed what permuted labels give, one line on stderr says
"warning: chance check: ..." (even with --quiet): what the run removes may be chance, and
--null permutation --n-null 3 --stop null removes only what exceeds chance. --evaluate adds
'aflite-fast evaluate' (the kept rows against random subsets of their size) to report.json.

Ties: rows of equal score are taken in order of higher mean held-out probability of their label
(--tie-break label_prob, the default), or in a random order from --seed and the rows' indices
(--tie-break random).

Inputs on which no model can learn (X with no variance, or a scale at or below the solver's
tolerance, a singular --transition) are refused: filtering them would only remove rows by
their class prior.

Views: --view NAME=PATH[:COLUMN] (repeatable) gives another representation of the same rows
(a file as EMB, or COLUMN of a table); every view's models train on the same partitions, each
row gets a score per view and a combined one (--combine max, the default: predictable by any
view; or mean). EMB may then be left out (one positional argument is LABELS); when given it is
the view "X". report.json holds each view's history (views), and DIR/report-NAME.json (with
--plot DIR/report-NAME.png) each view's own report.

Text: with --text-column COL (repeatable) EMB is a table of texts (.csv, .tsv, .jsonl, .parquet,
a Hugging Face dataset saved with save_to_disk or an .arrow file) and each text column is a view,
featurized by --featurizer: ngrams (default: hashed word 1-2-gram counts), tfidf, or
sentence-transformers:MODEL (float16 vectors cached in DIR/embeddings/, so a rerun does not
embed again; --device). LABELS may be left out: --labels-column NAME reads them from the table.
Texts must be UTF-8, with no missing, empty or blank value (docs/text.md).

Exit codes: 0 done; 2 bad input (one line on stderr, DIR unchanged); 75 the Dask cluster of
--scheduler lost every worker, or no worker left could read EMB (one line, DIR unchanged;
rerun with the same --checkpoint to resume; a lost worker alone costs the rounds it had not
answered, not the run: docs/dask.md); 130 Ctrl-C, 143 SIGTERM.
"""

_EPILOG = """\
LABELS files: a .npy/.npz array, or UTF-8 text with one row per line of EMB (a byte-order mark
is dropped; lines end with LF, CRLF or CR; a NUL byte is an error). Fields are separated by commas (csv quoting), or by tabs in a .tsv file or one
with tabs and no commas. A file with several columns needs --labels-column (a header name with
--labels-header, or a 0-based index); a first line that names columns needs --labels-header.
Blank lines are an error, except at the end. If every label is a number they are read as
numbers, so 1, 1.0 and 01 are one class; otherwise labels are compared as written.
--groups FILE follows the same rules, with --groups-column and --groups-header.
LABELS (and --groups) may also be a table (Arrow, Hugging Face dataset, Parquet), EMB's own
included: --labels-column NAME (--groups-column NAME) names its column. When EMB is the table
holding the labels, LABELS may be left out: --labels-column NAME alone reads them from EMB.
"""


def add_parser(subparsers):
    p = subparsers.add_parser(
        "filter", help="filter embeddings with AFLite (.npy/.npz, shards, safetensors, Arrow, Parquet)",
        description=_DESCRIPTION,
        epilog=_EPILOG, formatter_class=HelpFormatter)
    add_input_arguments(p)
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (created)")
    p.add_argument("--target-size", type=int, required=True, metavar="N",
                   help="n: stop once this many rows remain (never keep fewer); must be below the "
                        "number of rows, e.g. the size you want the filtered set to have")
    add_flag(p, "--n-partitions", "--partitions", type=int, default=64, metavar="M", help="m: models per phase")
    p.add_argument("--train-size", type=train_size_arg, required=True, metavar="T",
                   help="t: training rows per model (an integer), or a fraction in (0, 1) of the "
                        "active rows; the paper uses the size of the embedding model's warm-up "
                        "split, 0.5 is a safe start")
    p.add_argument("--slice-size", type=int, default=500, metavar="K", help="k: rows removed per phase at most")
    p.add_argument("--tau", type=float, default=0.75,
                   help="remove only rows predicted correctly by at least this share of the models "
                        "that held them out; filtering stops when fewer than K rows reach it (see "
                        "--stop); lower it to filter harder")
    add_model_arguments(p)
    p.add_argument("--tol", type=tolerance, default="auto", metavar="TOL|auto",
                   help="each model stops when its gradient's largest entry is at most TOL; auto "
                        "(default): 1e-4 in phases whose models train on fewer rows than EMB has "
                        "columns (features + 1), 3e-4 in the others")
    p.add_argument("--max-memory", type=memory_size, default=None, metavar="SIZE",
                   help="memory budget: bytes, or K/M/G/T (powers of 1000, also KB/MB/GB/TB) or "
                        "Ki/Mi/Gi/Ti (powers of 1024, also KiB/...), e.g. 500M, 2GB, 1GiB "
                        "(default: RAM / 4)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    add_flag(p, "--n-jobs", "--threads", type=positive_int, default=None, metavar="N",
                   help="threads, capped at the available cores (default: all cores); results do "
                        "not depend on it")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run on a Dask cluster (e.g. tcp://host:8786); needs dask (pip install '.[dask]' in a clone)")
    p.add_argument("--scheduler-timeout", type=positive_seconds, default=None, metavar="SECONDS",
                   help="seconds the --scheduler has to answer as a Dask scheduler before the run is "
                        "refused (default: 10)")
    add_groups_arguments(p, "group id per row (.npy/.npz, or text read as LABELS is, see below): every "
                            "model trains on whole groups, so rows of a group are never split between "
                            "training and held out")
    p.add_argument("--remove", choices=REMOVE_MODES, default="row",
                   help="row: remove single rows; group: remove whole groups whose mean score "
                        "reaches tau (needs --groups)")
    p.add_argument("--checkpoint", default=None, metavar="PATH",
                   help="save the state after every phase to PATH (.npz); rerunning the same command "
                        "continues from it with the same result; other parameters or data are refused")
    p.add_argument("--null", choices=[mode for mode in NULL_MODES if mode], default=None,
                   help="also score every phase's partitions with the labels permuted (class counts "
                        "kept; whole groups with --groups) and record how many rows reach tau by chance "
                        "(report.json history: null_*); each permutation costs about one more phase")
    p.add_argument("--n-null", type=positive_int, default=1, metavar="N",
                   help="label permutations per phase with --null (3 or more for --stop null)")
    p.add_argument("--stop", choices=STOP_RULES, default="paper",
                   help="paper: stop when fewer than K rows reach tau; null (needs --null): stop, "
                        "removing nothing more, when the rows at or above tau do not exceed the "
                        "null's mean + 3 sd (at least sqrt(mean)) x sqrt(1 + 1/N); both: whichever "
                        "comes first (docs/null.md); chance: stop, removing nothing more, when the "
                        "phase's held-out balanced accuracy is within --margin of chance (below it by "
                        "more: the last slice is put back) (docs/curation.md)")
    p.add_argument("--margin", type=float, default=0.02,
                   help="--stop chance: how close to chance a balanced accuracy counts as chance")
    p.add_argument("--max-removed", type=_count_or_fraction, default=None, metavar="N|F",
                   help="remove at most N rows, or a fraction F in (0, 1) of the rows, whatever the stop rule")
    p.add_argument("--class-quota", choices=[q for q in CLASS_QUOTAS if q], default=None,
                   help="prior: remove from each class in proportion, so the kept rows keep the input's "
                        "label distribution (within a row per class)")
    p.add_argument("--sources", default=None, metavar="FILE",
                   help="source id per row (.npy/.npz, or text read as LABELS is): report.json and the "
                        "card count rows per source; --source-quota caps what a source loses")
    p.add_argument("--sources-column", default=None, metavar="NAME|INDEX",
                   help="source column of a CSV/TSV sources file, as --labels-column")
    p.add_argument("--sources-header", action="store_true",
                   help="the first line of the sources file names its columns")
    p.add_argument("--source-quota", type=float, default=None, metavar="F",
                   help="with --sources: no source loses more than this share of its rows")
    p.add_argument("--n-seeds", type=positive_int, default=1, metavar="N",
                   help="run N seeds (--seed, --seed + 1, ...) on one scan of EMB: keep.npy is the first's; "
                        "also writes consensus_keep.npy (rows kept by at least half), removal_frequency.npy "
                        "and the kept sets' pairwise Jaccard index (report.json: seeds)")
    p.add_argument("--view", action="append", dest="views", default=None, metavar="NAME=PATH[:COLUMN]",
                   help="another view of the rows (repeatable): PATH as EMB, or COLUMN of a table PATH; "
                        "every view trains on the same partitions and the scores are combined (--combine)")
    p.add_argument("--combine", choices=COMBINE_RULES, default=None,
                   help="with views: a row's score is the largest of its views' (max, the default) or their mean")
    p.add_argument("--text-column", action="append", dest="text_columns", default=None, metavar="COL",
                   help="EMB is a table of texts: COL is a column of texts, featurized into a view "
                        "(repeatable; see --featurizer)")
    p.add_argument("--featurizer", default=None, metavar="NAME",
                   help="with --text-column: ngrams (default; hashed word 1-2-gram counts), tfidf, or "
                        "sentence-transformers:MODEL (needs pip install '.[embed]'; vectors cached in DIR/embeddings/)")
    p.add_argument("--device", default=None,
                   help="with --featurizer sentence-transformers:MODEL: the model's device (cpu, cuda, ...)")
    p.add_argument("--position-bias", action="store_true",
                   help="multiple-choice EMB (N x K x d) only: each model also learns a bias per "
                        "candidate position")
    p.add_argument("--eval-rows", default=None, metavar="FILE",
                   help="evaluation rows (e.g. a dev split): row indices (.npy/.npz, or text with one "
                        "index per line) or a boolean mask (.npy/.npz); never trained on, predicted by "
                        "every model of every phase; --train-size then counts the other rows")
    p.add_argument("--eval-only-score", action="store_true",
                   help="score the --eval-rows rows but never remove them (--target-size and "
                        "--slice-size then count the other rows)")
    p.add_argument("--no-chance-check", dest="chance_check", action="store_false",
                   help="skip the chance check (phase 0 scored again under 3 label permutations; "
                        "report.json: chance_check)")
    p.add_argument("--tie-break", choices=TIE_BREAKS, default="label_prob",
                   help="order of rows of equal score: label_prob (default), higher mean held-out "
                        "probability of the row's label first; random, a random order drawn from "
                        "--seed and the rows' indices")
    p.add_argument("--evaluate", action="store_true",
                   help="at the end, compare the kept rows with random subsets of their size "
                        "(see 'aflite-fast evaluate') and add it to report.json (and report.png)")
    p.add_argument("--features", default=None, metavar="F2",
                   help="with --evaluate: a second representation of the rows (.npy), N x d2 (multiple-choice "
                        "EMB: N x K x d2), which the filter never saw")
    p.add_argument("--plot", action="store_true",
                   help="also draw DIR/report.png (see 'aflite-fast report'); needs matplotlib")
    p.add_argument("--card", action="store_true",
                   help="also write DIR/dataset_card.md: a dataset-card section saying how the data was "
                        "filtered (method and citation, parameters, seeds, rows per class and source, "
                        "phases, the chance check, the verdict of --evaluate)")
    p.add_argument("--quiet", action="store_true", help="no progress bar, notes or summary")
    return p


def _count_or_fraction(text):
    """argparse type of --max-removed: a row count (an integer >= 0) or a fraction in (0, 1)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not 0 < value < 1:
            raise argparse.ArgumentTypeError(f"must be a row count or a fraction in (0, 1), got {text!r}") from None
        return value
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a row count or a fraction in (0, 1), got {text!r}")
    return value


def output_names(args, view_names=()):
    """The files of the command's output set (``view_names``: the views' report names)."""
    per_view = tuple(f"report-{name}.{ext}" for name in view_names for ext in (("json", "png") if args.plot
                                                                               else ("json",)))
    return (OUTPUT_NAMES + ((PLOT_NAME,) if args.plot else ()) + ((CARD_NAME,) if args.card else ())
            + (ENSEMBLE_NAMES if args.n_seeds > 1 else ()) + per_view)


def run(args):
    """parse -> problem -> run -> write: the files read and the flags checked
    (:func:`_read_inputs`), the backend (local, or the cluster of ``--scheduler``), the filter
    (:func:`_filter`) and the output set (:func:`_write`), then the summary."""
    prog = "aflite-fast filter"
    start = time.perf_counter()
    inputs = _read_inputs(args, prog)
    view_names = list(inputs.view_files) if inputs.views is not None else []
    with _backend(args, inputs.params["n_jobs"]) as backend:
        # Entered before the first phase: an unwritable or busy --out fails now, not at the end.
        with OutputSet(args.out, output_names(args, view_names), label="--out",
                       before_commit=inputs.watch.check) as out:
            result = _filter(args, inputs, backend)
            report = _write(out, args, inputs, result, time.perf_counter() - start)
    _summarize(args, prog, inputs, result, report)
    return 0


@dataclass
class _Inputs:
    """What the command read from its files and flags (:func:`_read_inputs`)."""

    X: object
    y: object
    groups: object
    sources: object
    eval_rows: object
    loss_params: object
    params: dict
    watch: object
    views: object = None  # {name: opened rows} with --view / --text-column
    view_files: dict = None  # {name: file name of its report} with views
    view_sources: dict = None  # {name: what report.json says of where the view came from}
    n_rows: int = 0


def _read_inputs(args, prog):
    """The files of the command, opened and read, and the checks of flags that only the command
    line has; the library checks the rest (its messages name the flags: PARAMETER_FLAGS)."""
    from aflite_fast.io.inputs import open_embeddings
    from aflite_fast.io.labelfile import read_labels_file
    from aflite_fast.io.watch import InputWatch

    text = args.text_columns is not None
    for flag, given in (("--featurizer", args.featurizer), ("--device", args.device)):
        if given is not None and not text:
            raise ValueError(f"{flag} applies to --text-column")
    if args.combine is not None and not (args.views or text):
        raise ValueError("--combine applies to views: give --view NAME=PATH or --text-column COL")
    if args.views and not text and args.labels is None:  # one positional argument with --view: LABELS
        args.embeddings, args.labels = None, args.embeddings
    if text:
        if args.column is not None:
            raise ValueError("--column names the embedding column of EMB; with --text-column EMB is a table of "
                             "texts (give embeddings as --view NAME=PATH[:COLUMN])")
        if args.labels is None and args.labels_column is None:
            raise ValueError("LABELS is missing: give a labels file, or --labels-column NAME to read the labels "
                             "from a column of the table of texts")
    elif args.embeddings is not None:
        resolve_labels(args)
    view_specs = _view_specs(args)
    # checked again before the outputs are committed (the run checks EMB at every phase too)
    watch = InputWatch([("EMB", args.embeddings), ("LABELS", args.labels), ("--groups", args.groups),
                        ("--sources", args.sources),
                        ("--transition", args.transition), ("--eval-rows", args.eval_rows),
                        ("--features", args.features)]
                       + [(f"--view {name}", path) for name, (path, _) in view_specs.items()])
    views, view_sources = None, {}
    if text:
        X, y, views, view_sources = _text_views(args)
    else:
        X = None if args.embeddings is None else open_embeddings(args.embeddings, args.column, items=True)
        y = read_labels_file(args.labels, column=args.labels_column, header=args.labels_header)
    if view_specs:
        views = dict(views or {})
        for name, (path, column) in view_specs.items():
            try:
                views[name] = open_embeddings(path, column, items=True)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"--view {name}: {exc}") from None
            view_sources[name] = {"path": os.path.abspath(path), "column": column}
    if views is not None and X is not None:  # EMB is then the view "X" (aflite's rule)
        if "X" in views:
            raise ValueError("--view X: the name X is EMB's when EMB is given with views; rename the view")
        view_sources = {"X": {"path": os.path.abspath(args.embeddings), "column": args.column}, **view_sources}
    first = X if X is not None else next(iter(views.values()))
    n_rows = first.shape[0]
    shown = args.embeddings if X is not None else "the views"
    if args.target_size >= n_rows:
        # nothing to filter: an error rather than a run that keeps every row
        raise ValueError(f"--target-size ({args.target_size}) must be smaller than the number of "
                         f"rows of {shown} ({n_rows}); nothing would be filtered")
    if args.groups is None:
        for flag, given in (("--remove group", args.remove == "group"), ("--groups-column", args.groups_column),
                            ("--groups-header", args.groups_header)):
            if given:
                raise ValueError(f"{flag} needs --groups FILE")
    groups = None if args.groups is None else read_groups(args)
    if args.sources is None:
        for flag, given in (("--source-quota", args.source_quota is not None),
                            ("--sources-column", args.sources_column), ("--sources-header", args.sources_header)):
            if given:
                raise ValueError(f"{flag} needs --sources FILE")
    sources = None if args.sources is None else _read_sources(args)
    if args.margin != 0.02 and args.stop != "chance":
        raise ValueError("--margin applies to --stop chance")
    if args.eval_only_score and args.eval_rows is None:
        raise ValueError("--eval-only-score needs --eval-rows FILE")
    eval_rows = None if args.eval_rows is None else read_eval_rows(args.eval_rows)
    if args.stop in ("null", "both") and args.null is None:
        raise ValueError(f"--stop {args.stop} needs --null permutation")
    if args.features is not None and not args.evaluate:
        raise ValueError("--features needs --evaluate")
    if args.evaluate and views is not None:
        raise ValueError("--evaluate takes one X: with --view or --text-column, run 'aflite-fast evaluate' on a view")
    if args.plot:
        from aflite_fast.cli._figure import require_matplotlib

        require_matplotlib()  # fail before the run, not after it
    if args.position_bias and first.ndim != 3:
        raise ValueError(f"--position-bias applies to a multiple-choice EMB (items x candidates x features); "
                         f"{shown} is {first.ndim}-D")
    import numpy as np

    params = dict(target_size=args.target_size, n_partitions=args.n_partitions,
                  train_size=args.train_size, slice_size=args.slice_size, tau=args.tau, C=args.C,
                  loss=args.loss, max_memory=args.max_memory, random_state=args.seed,
                  n_jobs=cap_threads(args.n_jobs, prog, args.quiet), tol=args.tol, max_iter=args.max_iter,
                  remove=args.remove, null=args.null, n_null=args.n_null, stop=args.stop,
                  chance_check=args.chance_check, tie_break=args.tie_break)
    # the curation flags, only when given: report.json's parameters of other runs stay as they were
    for name, value, default in (("margin", args.margin, 0.02), ("max_removed", args.max_removed, None),
                                 ("class_quota", args.class_quota, None), ("source_quota", args.source_quota, None),
                                 ("n_seeds", args.n_seeds, 1)):
        if value != default or (name == "margin" and args.stop == "chance"):
            params[name] = value
    if first.ndim == 3:
        params["position_bias"] = args.position_bias
    view_files = None
    if views is not None:
        params["combine"] = args.combine or "max"
        if text:
            params.update(text_columns=list(args.text_columns), featurizer=args.featurizer or "ngrams")
        view_files = _view_file_names(list(view_sources))
    return _Inputs(X=X, y=y, groups=groups, sources=sources, eval_rows=eval_rows,
                   loss_params=loss_params(args, first.shape[1] if first.ndim == 3 else len(np.unique(y))),
                   params=params, watch=watch, views=views, view_files=view_files, view_sources=view_sources,
                   n_rows=int(n_rows))


def _view_specs(args):
    """{name: (path, column)} of the --view flags; ValueError naming the flag."""
    from aflite_fast.io.formats import is_table

    specs = {}
    for text in args.views or ():
        name, sep, spec = text.partition("=")
        name = name.strip()
        if not sep or not name or not spec:
            raise ValueError(f"--view: expected NAME=PATH[:COLUMN], got {text!r}")
        if name in specs or name in (args.text_columns or ()):
            raise ValueError(f"--view: the view name {name!r} is given twice")
        path, column = spec, None
        head, colon, tail = spec.rpartition(":")
        # PATH:COLUMN for a table; other colons are the path's own (FILE.npz:KEY, FILE.safetensors:KEY)
        if colon and head and tail and not os.path.exists(spec) and is_table(head):
            path, column = head, tail
        specs[name] = (path, column)
    return specs


def _view_file_names(names):
    """{view name: the name of its report files}: the name with characters a file name should not
    hold replaced, made unique."""
    import re

    out, used = {}, set()
    for name in names:
        base = re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_") or "view"
        file_name, i = base, 1
        while file_name in used:
            i += 1
            file_name = f"{base}_{i}"
        used.add(file_name)
        out[name] = file_name
    return out


def _text_views(args):
    """X (None), the labels and the views of --text-column: the table's text columns read and
    checked (:func:`aflite_fast.io.texts.read_text_table`), featurized by --featurizer."""
    from aflite_fast.filtering.text import parse_featurizer, text_views
    from aflite_fast.io.inputs import open_embeddings
    from aflite_fast.io.labelfile import read_labels_file
    from aflite_fast.io.texts import read_text_table

    featurizer = args.featurizer or "ngrams"
    try:
        parse_featurizer(featurizer)
    except ValueError as exc:
        raise ValueError(f"--featurizer: {exc}") from None
    others = [(args.labels_column, "labels", "--labels-column")] if args.labels is None else []
    texts, read = read_text_table(args.embeddings, list(args.text_columns), others, text_flag="--text-column")
    if args.labels is None:  # the labels are the table's --labels-column (report.json: labels)
        y, args.labels = read[0], args.embeddings
    else:
        y = read_labels_file(args.labels, column=args.labels_column, header=args.labels_header)
    views = text_views(texts, featurizer, cache_dir=args.out, device=args.device, progress=not args.quiet)
    # cached embedding shards (a list of paths) opened as EMB's shards are; sparse matrices as they are
    views = {name: open_embeddings(v) if isinstance(v, list) else v for name, v in views.items()}
    sources = {name: {"path": os.path.abspath(args.embeddings), "text_column": name, "featurizer": featurizer}
               for name in texts}
    return None, y, views, sources


def _read_sources(args):
    """Source ids of --sources FILE, read as LABELS files are; errors name the flag."""
    from aflite_fast.io.labelfile import read_labels_file

    try:
        return read_labels_file(args.sources, column=args.sources_column, header=args.sources_header, kind="sources")
    except ValueError as exc:
        raise ValueError(f"--sources: {exc}") from None


def _backend(args, n_jobs):
    """The phases' backend: this machine, or the Dask cluster of ``--scheduler`` (connected as
    the API's ``DaskBackend.connect`` connects, closed when the command ends)."""
    from aflite_fast.phase.backends import DaskBackend, LocalBackend

    if args.scheduler:  # needs the optional dask
        return DaskBackend.connect(args.scheduler, n_jobs=n_jobs, timeout=args.scheduler_timeout)
    return LocalBackend(n_jobs)


def _filter(args, inputs, backend):
    """The library's run on the command's inputs; its warnings are said by the summary instead."""
    from aflite_fast.core.solver_status import NOT_CONVERGED_MESSAGE
    from aflite_fast.filtering.chance import ChanceWarning
    from aflite_fast.filtering.loop import aflite

    params = {k: v for k, v in inputs.params.items() if k != "n_jobs"}  # the backend's threads
    with warnings.catch_warnings():
        # counted in the history; the summary says it once, in the command line's words
        warnings.filterwarnings("ignore", message=NOT_CONVERGED_MESSAGE)
        warnings.simplefilter("ignore", ChanceWarning)  # said by the summary, in one line
        if inputs.views is None:
            return aflite(inputs.X, inputs.y, progress=not args.quiet, loss_params=inputs.loss_params,
                          groups=inputs.groups, sources=inputs.sources, checkpoint=args.checkpoint,
                          eval_rows=inputs.eval_rows,
                          eval_only_score=args.eval_only_score, backend=backend, **params)
        from aflite_fast.phase.backends import LocalBackend

        params = {k: v for k, v in params.items() if k not in ("text_columns", "featurizer")}
        if isinstance(backend, LocalBackend):  # each view its own local backend, which keeps its rows
            params.update(backend="local", n_jobs=backend.n_threads)
        else:
            params["backend"] = backend
        try:
            return aflite(inputs.X, inputs.y, progress=not args.quiet, loss_params=inputs.loss_params,
                          groups=inputs.groups, sources=inputs.sources, checkpoint=args.checkpoint,
                          eval_rows=inputs.eval_rows, eval_only_score=args.eval_only_score,
                          views=inputs.views, **params)
        except TypeError as exc:  # a view the backend does not take (e.g. sparse rows): one line, exit 2
            if not str(exc).startswith("view "):
                raise
            raise ValueError(str(exc)) from None


def _write(out, args, inputs, result, seconds):
    """keep.npy, scores.npy, report.json (and report.png) into the output set; returns the report."""
    import numpy as np

    from aflite_fast.core.solver_status import total_status
    from aflite_fast.io.fingerprint import labels_digest
    from aflite_fast.phase.evaluation_rows import eval_mask

    X, n_rows = inputs.X, inputs.n_rows
    first = X if X is not None else next(iter(inputs.views.values()))
    history = [h.as_dict() for h in result.history]
    out.save_npy("keep.npy", result.keep)
    out.save_npy("scores.npy", result.scores)
    report = {
        "aflite_fast_version": __version__,
        "command": "filter",
        "embeddings": None if args.embeddings is None or args.text_columns else os.path.abspath(args.embeddings),
        "column": args.column,
        "labels": os.path.abspath(args.labels),
        "labels_column": args.labels_column, "labels_header": args.labels_header,
        "transition": None if args.transition is None else os.path.abspath(args.transition),
        "n_rows": int(n_rows), "n_features": None if X is None else int(X.shape[-1]),
        "dtype": None if X is None else str(X.dtype),
        "x_sha256": result.fingerprint, "labels_sha256": labels_digest(inputs.y),
        "n_candidates": int(first.shape[1]) if first.ndim == 3 else None,
        "n_classes": int(len(result.classes)),
        "parameters": inputs.params,
        "n_kept": int(result.keep.size), "n_removed": int(result.removed.size),
        "stop_reason": result.stop_reason,
        "seconds": seconds,
        "solver_status": total_status(h["solver_status"] for h in history),
        "history": history,
        "groups": None if args.groups is None else os.path.abspath(args.groups),
        "groups_column": args.groups_column, "groups_header": args.groups_header,
        "checkpoint": None if args.checkpoint is None else os.path.abspath(args.checkpoint),
        "resumed_from_phase": result.resumed_from,
        "eval_rows": None if inputs.eval_rows is None else {
            "path": os.path.abspath(args.eval_rows), "only_score": args.eval_only_score,
            "n_eval": int(np.count_nonzero(eval_mask(inputs.eval_rows, n_rows)))},
        "classes": result.classes.tolist(),
        "class_counts": {"kept": result.kept_per_class.tolist(),
                         "removed": result.removed_per_class.tolist()},
        "chance_check": None if result.chance is None else result.chance.as_dict(),
    }
    if inputs.sources is not None:
        report.update(sources=os.path.abspath(args.sources),
                      source_ids=[s.item() if hasattr(s, "item") else s for s in result.sources.tolist()],
                      source_counts={"kept": result.kept_per_source.tolist(),
                                     "removed": result.removed_per_source.tolist()})
    if inputs.views is not None:
        if args.text_columns:
            report["texts"] = os.path.abspath(args.embeddings)
        report["combine"] = result.combine
        report["views"] = _view_reports(inputs, result, history)
    if result.ensemble is not None:
        report["seeds"] = result.ensemble.as_dict()
        out.save_npy("consensus_keep.npy", result.ensemble.consensus_keep)
        out.save_npy("removal_frequency.npy", result.ensemble.removal_frequency)
    if args.evaluate:
        from aflite_fast.cli._evaluate import evaluation_of

        report["evaluation"] = evaluation_of(X, inputs.y, result.keep, report, features=args.features,
                                             groups=inputs.groups, seed=args.seed, n_jobs=inputs.params["n_jobs"])
    out.save_json("report.json", report)
    for name, file_name in (inputs.view_files or {}).items():  # each view's own report (and figure)
        view_report = _view_report(report, name)
        out.save_json(f"report-{file_name}.json", view_report)
        if args.plot:
            from aflite_fast.cli._figure import draw_report

            out.write(f"report-{file_name}.png", lambda path, r=view_report: draw_report(r, path))
    if args.card:
        from aflite_fast.filtering.card import dataset_card

        out.save_text(CARD_NAME, dataset_card(result, inputs.params, evaluation=report.get("evaluation")))
    if args.plot:
        from aflite_fast.cli._figure import draw_report

        out.write(PLOT_NAME, lambda path: draw_report(report, path))
    return report


def _view_reports(inputs, result, history):
    """report.json's ``views``: where each view came from, its shape, its chance check and its
    per-phase records (the phase's own fields: n_above_tau, score_hist, the null's counts, ...)."""
    from aflite_fast.core.solver_status import total_status

    out = {}
    for name in result.views:
        rows = inputs.views[name] if name in inputs.views else inputs.X
        records = [h["views"][name] for h in history]
        sparse = hasattr(rows, "tocsr")
        out[name] = dict(inputs.view_sources.get(name, {}),
                         report=f"report-{inputs.view_files[name]}.json",
                         n_features=None if isinstance(rows, list) else int(rows.shape[-1]),
                         dtype=None if isinstance(rows, list) else str(rows.dtype), sparse=sparse,
                         solver_status=total_status(r["solver_status"] for r in records),
                         chance_check=None if result.view_chance is None else result.view_chance[name].as_dict(),
                         history=records)
    return out


def _view_report(report, name):
    """The report of view ``name`` alone: report.json with the view's per-phase records in place
    of the combined ones (rows active and removed stay the run's), so that 'aflite-fast report'
    draws it as any other."""
    view = report["views"][name]
    out = {k: v for k, v in report.items() if k != "views"}
    out.update(view=name, source={k: v for k, v in view.items() if k not in ("history", "chance_check")},
               chance_check=view["chance_check"], solver_status=view["solver_status"],
               history=[dict(h, **{k: v for k, v in record.items() if k != "chance"})
                        for h, record in zip(report["history"], view["history"])])
    for h in out["history"]:
        h.pop("views", None)
        if h.get("null_mean") is not None:  # the view's own null, against the view's own count
            h.update(null_share=h["null_mean"] / h["n_active"], null_excess=h["n_above_tau"] - h["null_mean"])
    return out


def _summarize(args, prog, inputs, result, report):
    """The lines the command prints: the chance check's warning (also with --quiet), the solver's
    note, what was kept and written, the verdict of --evaluate."""
    from aflite_fast.filtering.chance import chance_line

    line = chance_line(result.chance, args.stop)
    if line:  # a warning: printed with --quiet too
        print(f"{prog}: warning: {line}", file=sys.stderr)
    if args.quiet:
        return
    solver_status = report["solver_status"]
    failed = sum(count for name, count in solver_status.items() if name != "converged")
    if failed:
        detail = ", ".join(f"{k}: {v}" for k, v in solver_status.items() if k != "converged" and v)
        print(f"{prog}: note: {failed} of {sum(solver_status.values())} models did not converge "
              f"({detail}; per phase in report.json); raise --max-iter or standardize the "
              "embeddings", file=sys.stderr)
    print(f"{prog}: kept {result.keep.size} of {inputs.n_rows} rows in "
          f"{len(result.history)} phase(s), {report['seconds']:.1f} s ({result.stop_reason}); "
          f"{f'resumed from phase {result.resumed_from}; ' if result.resumed_from else ''}"
          f"wrote {os.path.join(args.out, 'keep.npy')}, scores.npy, report.json"
          f"{', report.png' if args.plot else ''}{', dataset_card.md' if args.card else ''}"
          f"{', consensus_keep.npy, removal_frequency.npy' if result.ensemble else ''}", file=sys.stderr)
    if result.ensemble is not None:
        ens = result.ensemble
        print(f"{prog}: {len(ens.seeds)} seeds: mean pairwise Jaccard of the kept sets {ens.mean_jaccard:.3f}; "
              f"{ens.consensus_keep.size} rows kept by at least half of them", file=sys.stderr)
    if args.evaluate:
        print(f"{prog}: {report['evaluation']['summary']}", file=sys.stderr)
