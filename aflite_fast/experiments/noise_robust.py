"""Noise-robust losses on real images with synthetic label noise (GCE-paper style comparison).

The comparison of Zhang & Sabuncu (NeurIPS 2018, Tables 1-2), with linear models on raw
pixels instead of ResNets:

a. load a dataset that ships offline: scikit-learn's bundled ``digits`` (8x8, 10 classes,
   1797 rows; a stratified 70/30 train/test split per seed) and, when the Debian package
   ``dataset-fashion-mnist`` is installed, Fashion-MNIST (28x28, 10 classes; a stratified
   subsample of the official training set, the official test set);
b. corrupt the *training* labels with a known noise transition matrix ``T``
   (``T[i, j] = P(noisy j | true i)``): ``uniform`` noise at rate r sends a label to one of
   the other C - 1 classes uniformly with probability r; ``pairflip`` noise at rate r sends
   class c to class (c + 1) mod C with probability r (the class-dependent noise of Han et al.
   2018; the GCE paper's CIFAR-10 mapping is specific to those classes);
c. train one multinomial linear model per loss (:mod:`aflite_fast.core.losses`: ce, gce, gce_trunc,
   mae, sce, forward with the true ``T``) with the same L2 strength and solver settings, and
   measure accuracy on the *clean* test labels;
d. repeat over seeds (new split or subsample, new noise) and report mean and standard
   deviation.

``gce_trunc`` is warm-started from the plain GCE solution (Zhang & Sabuncu also train with
L_q before they start pruning); every other loss starts from zeros.

:func:`run_noise_robust` computes (no files); :func:`run_noise_robust_experiment` writes
``table.csv``, ``table.md`` and ``figure.png`` into a directory as one set, switched in
together once all are complete (:class:`aflite_fast.io.atomic.OutputSet`).
"""
import csv
import gzip
import io
import os
import time

import numpy as np

from aflite_fast.core import layout, prediction, solver
from aflite_fast.core.losses import needs_warmup, resolve_loss
from aflite_fast.experiments._names import DATASETS, FASHION_MNIST_DIR
from aflite_fast.io.atomic import OutputSet
from aflite_fast.phase.plan import kernel_C
from aflite_fast.runtime.threads import effective_n_threads

__all__ = ["DEFAULT_LOSSES", "DEFAULT_SETTINGS", "FASHION_MNIST_DIR", "noise_matrix",
           "corrupt_labels", "load_dataset", "fit_predict", "run_noise_robust",
           "run_noise_robust_experiment", "table_markdown", "table_csv", "plot_figure"]

#: Losses compared, with their parameters (the GCE paper's q = 0.7, k = 0.5; SCE's alpha = 0.1,
#: beta = 1, A = -4 of Wang et al. 2019 for CIFAR-10); "forward" gets the true T.
DEFAULT_LOSSES = (
    ("ce", {}),
    ("gce", {"q": 0.7}),
    ("gce_trunc", {"q": 0.7, "k": 0.5}),
    ("mae", {}),
    ("sce", {"alpha": 0.1, "beta": 1.0, "A": -4.0}),
    ("forward", {}),
)
#: Noise settings: (kind, rate).
DEFAULT_SETTINGS = (("uniform", 0.0), ("uniform", 0.2), ("uniform", 0.4), ("uniform", 0.6),
                    ("pairflip", 0.4))


def _require_matplotlib():
    """Import matplotlib with the Agg backend, or fail with a message that says what to do."""
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the noise-robust figure needs matplotlib, an optional dependency: install it with "
            "`pip install matplotlib` (or pass plot=False / --no-plot)") from exc
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def noise_matrix(kind, rate, n_classes):
    """Noise transition matrix ``T[i, j] = P(noisy label j | true label i)``.

    Parameters
    ----------
    kind : {"uniform", "pairflip"}
    rate : float in [0, 1)
        Probability that a label is changed.
    n_classes : int

    Returns
    -------
    T : ndarray of shape (n_classes, n_classes), rows summing to 1
    """
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"noise rate must be in [0, 1), got {rate}")
    C = int(n_classes)
    if kind == "uniform":
        T = np.full((C, C), rate / (C - 1))
        np.fill_diagonal(T, 1.0 - rate)
    elif kind == "pairflip":
        T = (1.0 - rate) * np.eye(C)
        T[np.arange(C), (np.arange(C) + 1) % C] += rate
    else:
        raise ValueError(f"unknown noise kind {kind!r}; choose 'uniform' or 'pairflip'")
    return T


def corrupt_labels(y, T, rng):
    """Draw a noisy label for every row: ``P(noisy = j | y = i) = T[i, j]``."""
    y = np.asarray(y)
    cdf = np.cumsum(T, axis=1)[y]
    u = rng.random(len(y))[:, None]
    return np.minimum((u >= cdf).sum(axis=1), T.shape[0] - 1).astype(np.int32)


def _read_idx(path):
    with gzip.open(path, "rb") as fh:
        data = fh.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_dataset(name, seed, *, max_train=None, data_dir=None):
    """Train/test split of a bundled dataset, pixels scaled to [0, 1], float32.

    Parameters
    ----------
    name : {"digits", "fashion-mnist"}
    seed : int
        Seeds the digits split and the Fashion-MNIST training subsample.
    max_train : int, optional
        Stratified subsample of at most this many training rows.
    data_dir : str, optional
        Directory with the Fashion-MNIST IDX files (default :data:`FASHION_MNIST_DIR`).

    Returns
    -------
    X_train, y_train, X_test, y_test
    """
    from sklearn.model_selection import train_test_split

    if name == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        X = (X / 16.0).astype(np.float32)
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)
    elif name == "fashion-mnist":
        d = data_dir or FASHION_MNIST_DIR
        files = {k: os.path.join(d, f"{k}-idx{3 if 'images' in k else 1}-ubyte.gz")
                 for k in ("train-images", "train-labels", "t10k-images", "t10k-labels")}
        missing = [p for p in files.values() if not os.path.exists(p)]
        if missing:
            raise ValueError(f"Fashion-MNIST not found ({missing[0]} is missing); install the "
                             "Debian package dataset-fashion-mnist or pass its directory")
        Xtr = _read_idx(files["train-images"]).reshape(-1, 784).astype(np.float32) / 255.0
        ytr = _read_idx(files["train-labels"]).astype(np.int64)
        Xte = _read_idx(files["t10k-images"]).reshape(-1, 784).astype(np.float32) / 255.0
        yte = _read_idx(files["t10k-labels"]).astype(np.int64)
    else:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if max_train is not None and max_train < len(ytr):
        Xtr, _, ytr, _ = train_test_split(Xtr, ytr, train_size=int(max_train), random_state=seed,
                                          stratify=ytr)
    return (np.ascontiguousarray(Xtr, dtype=np.float32), ytr.astype(np.int32),
            np.ascontiguousarray(Xte, dtype=np.float32), yte.astype(np.int32))


def fit_predict(X_train, y_train, X_test, n_classes, loss, loss_params=None, *, C=1.0, tol=1e-4,
                max_iter=1000, n_threads=1):
    """Train one linear model on (X_train, y_train) with ``loss``; predict X_test.

    The same model as :class:`aflite_fast.RobustLogisticRegression` (rows centered by the
    training mean, unpenalized intercept, L2 with scikit-learn's ``C``), plus the warm start
    that ``gce_trunc`` needs (:func:`aflite_fast.core.losses.needs_warmup`).

    Returns
    -------
    pred : ndarray of int (n_test,)
    info : dict with ``n_iter`` (total accepted L-BFGS steps) and ``status`` (kernel status
        name of the last stage)
    """
    spec = resolve_loss(loss, loss_params, n_classes)
    center = X_train.mean(axis=0, dtype=np.float64).astype(np.float32)
    Xa = layout.augment_rows(X_train, center)
    member = np.ones((len(y_train), 1), dtype=np.uint8)
    options = solver.SolverOptions(tol=tol, max_iter=max_iter)
    Ck = kernel_C(C, n_classes)
    coef, n_iter = None, 0
    stages = ([spec.warmup] if needs_warmup(spec) else []) + [spec]
    for stage in stages:
        coef, info = solver.train_models(Xa, y_train, member, n_classes, C=Ck, loss=stage, coef=coef,
                                         precond="auto", options=options, n_threads=n_threads)
        n_iter += int(info["n_iter"][0])
    proba = prediction.predict_proba(layout.augment_rows(X_test, center), coef[0], n_threads=n_threads)
    return np.argmax(proba, axis=1), {"n_iter": n_iter,
                                      "status": solver.STATUS_NAMES[int(info["status"][0])]}


def run_noise_robust(datasets=("digits",), *, settings=DEFAULT_SETTINGS, losses=DEFAULT_LOSSES,
                     n_seeds=5, C=1.0, max_train=None, data_dir=None, tol=1e-4, max_iter=1000,
                     n_jobs=None, progress=True):
    """Run the comparison; return one result row per (dataset, setting, loss).

    Parameters
    ----------
    datasets : sequence of {"digits", "fashion-mnist"}
    settings : sequence of (kind, rate)
        Noise settings (see :func:`noise_matrix`).
    losses : sequence of (name, params)
        Losses to compare; "forward" is given the true ``T`` of each setting.
    n_seeds : int
        Repetitions (seeds 0 .. n_seeds - 1): new split/subsample and new noise each.
    C, tol, max_iter : solver settings, the same for every loss.
    max_train : int, optional
        Cap on training rows (stratified subsample), e.g. for Fashion-MNIST.
    data_dir : str, optional
        Fashion-MNIST directory.
    n_jobs : int, optional
        Threads of the kernel (results do not depend on it).
    progress : bool
        tqdm progress bar over the fits.

    Returns
    -------
    rows : list of dict
        Keys: dataset, noise, rate, loss, n_train, n_test, seeds, acc_mean, acc_std, acc_min,
        acc_max, actual_noise (measured share of changed training labels, mean over seeds),
        n_iter (mean), seconds (mean fit time), statuses (count of kernel stop statuses).
    """
    from tqdm.auto import tqdm

    if n_seeds < 1:
        raise ValueError(f"n_seeds must be at least 1, got {n_seeds}")
    for kind, rate in settings:
        noise_matrix(kind, rate, 3)  # validate before any work
    for name in datasets:
        if name not in DATASETS:
            raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    n_threads = effective_n_threads(n_jobs)
    total = len(datasets) * len(settings) * n_seeds * len(losses)
    bar = tqdm(total=total, desc="noise-robust", unit="fit", disable=not progress)
    acc = {}
    meta = {}
    try:
        for ds in datasets:
            for seed in range(n_seeds):
                Xtr, ytr, Xte, yte = load_dataset(ds, seed, max_train=max_train, data_dir=data_dir)
                C_cls = int(max(ytr.max(), yte.max())) + 1
                for si, (kind, rate) in enumerate(settings):
                    T = noise_matrix(kind, rate, C_cls)
                    rng = np.random.default_rng([seed, si, 20181203])
                    ynoisy = corrupt_labels(ytr, T, rng)
                    for name, params in losses:
                        params = dict(params)
                        if name == "forward":
                            params["T"] = T
                        t0 = time.perf_counter()
                        pred, info = fit_predict(Xtr, ynoisy, Xte, C_cls, name, params, C=C, tol=tol,
                                                 max_iter=max_iter, n_threads=n_threads)
                        dt = time.perf_counter() - t0
                        key = (ds, kind, rate, name)
                        acc.setdefault(key, []).append(float(np.mean(pred == yte)))
                        m = meta.setdefault(key, {"n_iter": [], "seconds": [], "statuses": {},
                                                  "noise": [], "n_train": len(ytr), "n_test": len(yte)})
                        m["n_iter"].append(info["n_iter"])
                        m["seconds"].append(dt)
                        m["statuses"][info["status"]] = m["statuses"].get(info["status"], 0) + 1
                        m["noise"].append(float(np.mean(ynoisy != ytr)))
                        bar.update(1)
    finally:
        bar.close()
    rows = []
    for (ds, kind, rate, name), a in acc.items():
        m = meta[(ds, kind, rate, name)]
        a = np.array(a)
        rows.append({
            "dataset": ds, "noise": kind, "rate": rate, "loss": name,
            "n_train": m["n_train"], "n_test": m["n_test"], "seeds": len(a),
            "acc_mean": float(a.mean()), "acc_std": float(a.std(ddof=1)) if len(a) > 1 else 0.0,
            "acc_min": float(a.min()), "acc_max": float(a.max()),
            "actual_noise": float(np.mean(m["noise"])), "n_iter": float(np.mean(m["n_iter"])),
            "seconds": float(np.mean(m["seconds"])),
            "statuses": ";".join(f"{k}:{v}" for k, v in sorted(m["statuses"].items())),
        })
    return rows


CSV_COLUMNS = ("dataset", "noise", "rate", "loss", "n_train", "n_test", "seeds", "acc_mean",
               "acc_std", "acc_min", "acc_max", "actual_noise", "n_iter", "seconds", "statuses")


def table_csv(rows):
    """Rows as CSV text (one line per dataset, setting and loss)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    return buf.getvalue()


def _settings_of(rows, ds):
    seen = []
    for r in rows:
        if r["dataset"] == ds and (r["noise"], r["rate"]) not in seen:
            seen.append((r["noise"], r["rate"]))
    return seen


def _unique(values):
    out = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def table_markdown(rows):
    """Markdown: per dataset, one line per noise setting, one column per loss.

    Cells are test accuracy in percent, mean +- standard deviation over seeds; the best mean
    of each line is bold.
    """
    out = []
    for ds in _unique(r["dataset"] for r in rows):
        sub = [r for r in rows if r["dataset"] == ds]
        losses = _unique(r["loss"] for r in sub)
        by = {(r["noise"], r["rate"], r["loss"]): r for r in sub}
        r0 = sub[0]
        out.append(f"**{ds}** ({r0['n_train']} train / {r0['n_test']} clean test rows, "
                   f"{r0['seeds']} seeds; test accuracy %, mean ± std)\n")
        out.append("| noise | " + " | ".join(losses) + " |")
        out.append("|---|" + "---|" * len(losses))
        for kind, rate in _settings_of(rows, ds):
            cells = [by.get((kind, rate, l)) for l in losses]
            best = max(c["acc_mean"] for c in cells if c)
            txt = []
            for c in cells:
                if c is None:
                    txt.append("")
                    continue
                s = f"{100 * c['acc_mean']:.1f} ± {100 * c['acc_std']:.1f}"
                txt.append(f"**{s}**" if c["acc_mean"] == best else s)
            label = "none" if rate == 0 else f"{kind} {int(round(100 * rate))}%"
            out.append(f"| {label} | " + " | ".join(txt) + " |")
        out.append("")
    return "\n".join(out) + ("\n" if out else "")


def plot_figure(rows, path, *, dpi=110):
    """Grouped bars per noise setting (one bar per loss, std as error bars), one panel per dataset."""
    plt = _require_matplotlib()
    datasets = _unique(r["dataset"] for r in rows)
    fig, axes = plt.subplots(1, len(datasets), figsize=(7.5 * len(datasets), 4.6), squeeze=False)
    try:
        for ax, ds in zip(axes[0], datasets):
            sub = [r for r in rows if r["dataset"] == ds]
            losses = _unique(r["loss"] for r in sub)
            settings = _settings_of(rows, ds)
            by = {(r["noise"], r["rate"], r["loss"]): r for r in sub}
            width = 0.8 / len(losses)
            x = np.arange(len(settings))
            for j, l in enumerate(losses):
                m = [100 * by[(k, r, l)]["acc_mean"] if (k, r, l) in by else np.nan for k, r in settings]
                s = [100 * by[(k, r, l)]["acc_std"] if (k, r, l) in by else np.nan for k, r in settings]
                ax.bar(x - 0.4 + (j + 0.5) * width, m, width, yerr=s, label=l, capsize=2)
            ax.set_xticks(x)
            ax.set_xticklabels(["none" if r == 0 else f"{k} {int(round(100 * r))}%" for k, r in settings])
            ax.set_ylabel("clean test accuracy (%)")
            lo = min(100 * r["acc_mean"] for r in sub)
            ax.set_ylim(max(0.0, lo - 10), 100)
            ax.set_title(f"{ds}: linear model on pixels, {sub[0]['seeds']} seeds")
            ax.legend(fontsize=8, ncol=len(losses), loc="upper center", bbox_to_anchor=(0.5, -0.1),
                      frameon=False)
        fig.tight_layout()
        fig.savefig(path, dpi=dpi, format="png")
    finally:
        plt.close(fig)


def run_noise_robust_experiment(out_dir, *, plot=True, **kwargs):
    """Run :func:`run_noise_robust` and write ``table.csv``, ``table.md`` and ``figure.png``.

    Parameters
    ----------
    out_dir : str or path-like
        Output directory (created). Files appear only once all are complete.
    plot : bool
        Also write ``figure.png`` (needs matplotlib, checked before any work).
    **kwargs
        Passed to :func:`run_noise_robust`.

    Returns
    -------
    rows : list of dict
    """
    if plot:
        _require_matplotlib()
    names = ["table.csv", "table.md"] + (["figure.png"] if plot else [])
    with OutputSet(out_dir, names) as out:  # before the work: a bad out_dir fails at once
        rows = run_noise_robust(**kwargs)
        out.save_text("table.csv", table_csv(rows))
        out.save_text("table.md", table_markdown(rows))
        if plot:
            out.write("figure.png", lambda path: plot_figure(rows, path))
    return rows
