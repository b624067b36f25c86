"""The figure of a filtering run, ``DIR/report.png``, drawn from ``DIR/report.json`` alone.

a. Everything drawn is read from the report written by ``aflite-fast filter``: the history
   (``n_active``, ``n_above_tau``, ``score_hist``, ``class_active``, ``class_removed`` of
   every phase, with ``--null`` ``null_mean`` and ``null_margin``, with ``--stop chance``
   ``probe`` and ``n_put_back``), ``parameters`` (tau,
   target_size, n_null), ``classes`` and ``class_counts``; so a run can be drawn again
   later, or on another machine.
b. The figure is a row of panels, one function each, listed in :data:`PANELS`; a panel takes
   ``(ax, report)`` and draws on ``ax``.  A new kind of per-phase record gets its panel by
   adding a function to the list.
c. matplotlib is the optional extra ``plots``: imported only to draw, and its
   absence is an ImportError that names the extra.
d. report.png belongs to the output set of DIR (:class:`aflite_fast.io.atomic.OutputSet`):
   ``filter --plot`` writes it with the other files; :func:`write_report_png` adds it to the
   committed set, drawn from that set's report.json, under DIR's lock, and switches the set
   in whole, so DIR's files always come from one run (a later ``filter`` without ``--plot``
   drops it with the set it replaces).
"""
import json
import os

import numpy as np

from aflite_fast.io.atomic import OutputSet

REPORT_JSON = "report.json"
REPORT_PNG = "report.png"


def require_matplotlib():
    """Import matplotlib with a non-interactive backend; an ImportError naming the extra if absent."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("drawing report.png needs matplotlib: pip install matplotlib "
                          "(or pip install '.[plots]' in a clone of aflite_fast)") from exc
    matplotlib.use("Agg")  # files only; never open a window
    import matplotlib.pyplot as plt
    return plt


def _phases(report):
    return list(report.get("history") or [])


def _axes(ax, report, title, xlabel, ylabel):
    """Label a panel's axes; its phase records, or None (and a note on ``ax``) if none ran."""
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    history = _phases(report)
    if not history:
        ax.text(0.5, 0.5, "no phase ran", ha="center", va="center", transform=ax.transAxes)
        return None
    return history


def filtering_curve(ax, report):
    """Rows active at the start of each phase (and kept at the end), rows at or above tau, and
    (runs with a null) the mean count under the label permutations, shaded up to the margin
    ``stop="null"`` asks the observed count to exceed."""
    history = _axes(ax, report, "filtering curve", "phase", "rows")
    if history is None:
        return
    phases = np.arange(len(history) + 1)
    active = [h["n_active"] for h in history] + [report["n_kept"]]
    ax.plot(phases, active, marker="o", label="active")
    ax.plot(phases[:-1], [h["n_above_tau"] for h in history], marker="s",
            label=f"score >= tau ({report['parameters']['tau']:g})")
    _null_counts(ax, phases[:-1], history, report)
    ax.axhline(report["parameters"]["target_size"], color="0.5", ls=":", label="target size")
    ax.set_ylim(bottom=0)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize="small")


def _null_counts(ax, phases, history, report):
    with_null = [(p, h) for p, h in zip(phases, history) if h.get("null_mean") is not None]
    if not with_null:
        return
    at = np.array([p for p, _ in with_null])
    mean = np.array([h["null_mean"] for _, h in with_null])
    margin = np.array([h["null_margin"] for _, h in with_null])
    n_null = report["parameters"].get("n_null", len(with_null[0][1].get("null_above_tau", [])))
    line, = ax.plot(at, mean, marker="^", ls="--", label=f">= tau, labels permuted (mean of {n_null})")
    ax.fill_between(at, mean, mean + margin, color=line.get_color(), alpha=0.2, label="+ margin of stop='null'")


def score_histograms(ax, report):
    """Score histograms (fixed bins over [0, 1]) of the first and the last phase."""
    history = _axes(ax, report, "predictability scores", "score (held-out accuracy)", "rows")
    if history is None:
        return
    shown = [history[0]] if len(history) == 1 else [history[0], history[-1]]
    for h in shown:
        counts = np.asarray(h["score_hist"])
        edges = np.linspace(0.0, 1.0, counts.size + 1)
        ax.stairs(counts, edges, label=f"phase {h['phase']}", lw=1.5)
    ax.axvline(report["parameters"]["tau"], color="k", ls="--", lw=1, label="tau")
    ax.legend(fontsize="small")


def class_shares(ax, report):
    """Share of each class among the rows active at each phase and kept at the end."""
    history = _axes(ax, report, "label balance of kept rows", "phase", "share of rows")
    if history is None:
        return
    classes = [str(c) for c in report.get("classes", [])]
    counts = np.array([h["class_active"] for h in history] + [report["class_counts"]["kept"]], dtype=float)
    shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)
    phases = np.arange(counts.shape[0])
    ax.stackplot(phases, shares.T, labels=classes, alpha=0.85)
    ax.set_xlim(0, phases[-1])
    ax.set_ylim(0, 1)
    ax.xaxis.get_major_locator().set_params(integer=True)
    if len(classes) <= 12:  # beside the axes: the stack fills them
        ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5), title="class")


def chance_probe(ax, report):
    """``--stop chance``: the held-out balanced accuracy of each phase's models on its active rows,
    against chance and the band of ``--margin`` around it (phases that put the last slice back
    marked)."""
    history = _axes(ax, report, "probe: held-out balanced accuracy", "phase", "balanced accuracy")
    if history is None:
        return
    probed = [h for h in history if h.get("probe")]
    phases = np.array([h["phase"] for h in probed])
    accuracy = np.array([h["probe"]["balanced_accuracy"] for h in probed])
    chance = np.array([h["probe"]["chance"] for h in probed])
    margin = np.array([h["probe"]["margin"] for h in probed])
    ax.plot(phases, accuracy, marker="o", label="balanced accuracy")
    ax.plot(phases, chance, color="k", ls=":", lw=1, label="chance")
    ax.fill_between(phases, chance - margin, chance + margin, color="0.5", alpha=0.25, label="chance +- margin")
    back = [h["phase"] for h in probed if h.get("n_put_back")]
    if back:
        ax.plot(back, accuracy[np.isin(phases, back)], "rv", label="last slice put back")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize="small")


def evaluation(ax, report):
    """Balanced accuracy of the probe on all rows, the kept rows and random subsets of their size
    (error bar: the subsets' sd), per representation, with the verdict (``aflite-fast evaluate``)."""
    ev = report["evaluation"]
    ax.set_title(f"evaluation: {ev['verdict']}")
    ax.set_ylabel("balanced accuracy (probe, out of fold)")
    reps = [("filtering", ev)] + ([("second", ev["features"])] if ev.get("features") else [])
    width = 0.25
    for k, (which, color) in enumerate((("full", "0.6"), ("kept", "C3"), ("random", "C0"))):
        x = np.arange(len(reps)) + (k - 1) * width
        heights = [r[f"{which}_balanced_accuracy"] for _, r in reps]
        err = [r["random_balanced_accuracy_std"] for _, r in reps] if which == "random" else None
        ax.bar(x, heights, width, yerr=err, color=color, label=which if which != "random" else
               f"random subsets ({ev['n_random']})")
    chance = 1.0 / max(1, len(ev.get("classes", [])) or 2)
    ax.axhline(chance, color="k", ls=":", lw=1, label="chance")
    ax.set_xticks(np.arange(len(reps)), [f"{name} repr." for name, _ in reps])
    ax.set_ylim(0, 1.25)  # room for the legend above the bars
    ax.legend(fontsize="x-small", loc="upper center", ncol=2)


#: The panels of the figure, left to right; :func:`chance_probe` is added when the history records
#: the probe (``--stop chance``), :func:`evaluation` when the report has one.
PANELS = [filtering_curve, score_histograms, class_shares]


def draw_report(report, path):
    """Draw the figure of ``report`` (the dict of a report.json) into the PNG file ``path``."""
    plt = require_matplotlib()
    probed = any(h.get("probe") for h in _phases(report))
    panels = PANELS + ([chance_probe] if probed else []) + ([evaluation] if report.get("evaluation") else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
    try:
        for panel, ax in zip(panels, axes[0]):
            panel(ax, report)
        # a view's own report (filter with views): its scores, the run's rows
        view = f"view {report['view']!r} of a run with views ({report.get('combine')}): " if report.get("view") else ""
        fig.suptitle(f"AFLite: {view}kept {report['n_kept']} of {report['n_rows']} rows in "
                     f"{len(_phases(report))} phase(s); {report.get('stop_reason', '')}", fontsize="medium")
        fig.tight_layout()
        fig.savefig(path, format="png", dpi=110)
    finally:
        plt.close(fig)


def read_report(out_dir, path=None):
    """The dict of ``out_dir/report.json`` (or of ``path``); a ValueError naming the file if it is
    missing or bad."""
    path = os.path.join(os.fspath(out_dir), REPORT_JSON) if path is None else path
    try:
        with open(path, encoding="utf-8") as fh:
            report = json.load(fh)
    except RecursionError:
        raise ValueError(f"cannot read {path!r}: its JSON is nested too deeply") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path!r}: {exc}") from exc
    if not isinstance(report, dict):
        kind = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}.get(type(report), "a number")
        raise ValueError(f"{path!r} holds {kind}, not a JSON object: it is not a report of 'aflite-fast filter'")
    missing = [k for k in ("history", "parameters", "n_rows", "n_kept", "class_counts") if k not in report]
    if missing:
        raise ValueError(f"{path!r} lacks {', '.join(missing)}: it was not written by this version of "
                         "'aflite-fast filter'")
    return report


def write_report_png(out_dir):
    """Draw ``out_dir/report.png`` from ``out_dir/report.json`` and add it to the directory's
    output set (module docstring, d); returns its path.

    Raises
    ------
    ValueError
        If ``out_dir`` is not a directory holding a report.json of ``aflite-fast filter``, or
        another run holds its lock.
    ImportError
        Without matplotlib (before anything is written).
    """
    out_dir = os.fspath(out_dir)
    if not os.path.isdir(out_dir):
        raise ValueError(f"{out_dir!r} is not a directory")
    require_matplotlib()  # fail before writing anything
    with OutputSet(out_dir, [REPORT_PNG], label="DIR", extend=True) as out:
        # under the lock: the report.json of the set report.png joins (plain file if there is none)
        carried = REPORT_JSON in out.names
        report = read_report(out_dir, out.file(REPORT_JSON) if carried else None)
        out.write(REPORT_PNG, lambda path: draw_report(report, path))
    return os.path.join(out_dir, REPORT_PNG)
