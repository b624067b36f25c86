"""Out-of-sample (out-of-fold) predicted probabilities on the batched kernel.

A drop-in fast replacement for::

    cross_val_predict(LogisticRegression(C=C), X, y, cv=StratifiedKFold(...), method="predict_proba")

which label-error tools such as cleanlab consume (``find_label_issues(labels, pred_probs)``).

Design
A. Every fold's model is one column of a uint8 membership matrix over the same rows, so all
   K folds are trained by one call of the kernel (``solver.train_models``): each solver step
   evaluates all unfinished folds with one GEMM pass over X instead of K separate passes.
   Folds may differ in size (StratifiedKFold's do), which ``local.score_phase`` (equal-size
   random partitions) does not express; ``_fit_predict_subsets`` below takes any training and
   test sets and reuses the engine's block planner and the kernel's prediction pass.
B. Held-out means "in this fold's test set", given separately from the training set, so a
   custom splitter whose test sets do not cover the complement of the training set is
   handled exactly as ``cross_val_predict`` would.
C. With ``n_partitions=m`` the folds are replaced by AFLite's m random partitions of phase 0
   (``partitions.partition_train_positions``) and each row's probabilities are averaged over the
   partitions that held it out; this path calls ``local.score_phase`` itself, so its counts
   are exactly :func:`aflite_fast.predictability`'s for the same ``random_state``.
D. With ``groups`` no group is split between a training and a held-out set: an int ``cv``
   gives ``StratifiedGroupKFold``, a splitter gets ``split(X, y, groups)``, given pairs are
   checked, and partitions draw whole groups (``partitions.partition_train_positions``).
E. Results depend on the inputs, the folds and ``random_state`` only: the kernel's sums are
   in fixed row blocks (aligned to row positions), so neither thread count, memory budget,
   nor memory-mapped input changes them.
"""
import numbers
import warnings
from dataclasses import dataclass

import numpy as np

from aflite_fast.core import preconditioning, prediction, solver
from aflite_fast.filtering.problem import Problem, check_C, validate_settings
from aflite_fast.io.inputs import gather_rows
from aflite_fast.io.sparse import is_sparse
from aflite_fast.phase import gather, plan
from aflite_fast.phase.backends import LocalBackend
from aflite_fast.phase.groups import encode_groups, partition_groups
from aflite_fast.phase.partitions import seed_entropy
from aflite_fast.runtime.memory import parse_memory


@dataclass
class OOFRun:
    """Everything one out-of-sample run produced (used by :mod:`aflite_fast.filtering.label_issues`).

    Attributes
    ----------
    proba : ndarray (N, n_classes) float32
        Mean held-out probabilities; rows sum to 1 (NaN rows where ``seen == 0``).
    seen, correct : ndarray (N,) int32
        Held-out predictions of each row, and how many predicted the given label.
    prob_label : ndarray (N,) float64
        Summed held-out probability of the given label.
    codes : ndarray (N,) int32
        Label codes (index into ``classes``).
    classes : ndarray (n_classes,)
    n_iter, status : ndarray (n_models,) int32
        L-BFGS iterations and exit status of each fold's / partition's model.
    mode : str
        "folds" or "partitions".
    """

    proba: np.ndarray
    seen: np.ndarray
    correct: np.ndarray
    prob_label: np.ndarray
    codes: np.ndarray
    classes: np.ndarray
    n_iter: np.ndarray
    status: np.ndarray
    mode: str

    @property
    def scores(self):
        """AFLite predictability correct / seen (NaN where never held out)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.seen > 0, self.correct / np.maximum(self.seen, 1), np.nan)


def _sklearn_seed(random_state):
    """A seed StratifiedKFold accepts; an int is passed unchanged so the folds can be rebuilt."""
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state must be non-negative, got {random_state}")
        return int(random_state) % (2**32)
    return seed_entropy(random_state) % (2**32)


def make_folds(cv, codes, random_state=None, groups=None):
    """(train, test) index pairs from an int, a splitter with ``split``, or an iterable of pairs.

    An int K gives ``StratifiedKFold(K, shuffle=True, random_state=random_state)`` (with
    ``groups``, integer group codes: ``StratifiedGroupKFold``), so the same folds can be
    rebuilt with scikit-learn for an int ``random_state``.  A splitter is called as
    ``split(X, codes, groups)``; given pairs must not split a group.
    """
    n = codes.shape[0]
    if isinstance(cv, numbers.Integral) and not isinstance(cv, bool):
        from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold

        if cv < 2:
            raise ValueError(f"cv must be at least 2 folds, got {cv}")
        smallest = int(np.bincount(codes).min())
        if smallest < cv:
            raise ValueError(f"cv={cv} folds need at least {cv} rows of every class; the smallest class has {smallest}")
        seed = _sklearn_seed(random_state)
        if groups is None:
            cv = StratifiedKFold(int(cv), shuffle=True, random_state=seed)
        elif np.unique(groups).size < cv:
            raise ValueError(f"cv={cv} folds need at least {cv} groups; groups holds {np.unique(groups).size}")
        else:
            cv = StratifiedGroupKFold(int(cv), shuffle=True, random_state=seed)
    if hasattr(cv, "split"):
        X0 = np.zeros((n, 1), dtype=np.uint8)
        pairs = cv.split(X0, codes) if groups is None else cv.split(X0, codes, groups)
    else:
        try:
            pairs = iter(cv)
        except TypeError:
            raise ValueError(f"cv must be an int, a splitter with split(X, y), or (train, test) pairs; got {cv!r}") from None
    folds = []
    for k, pair in enumerate(pairs):
        try:
            train, test = pair
        except (TypeError, ValueError):
            raise ValueError(f"cv entry {k} is not a (train, test) pair") from None
        train = np.asarray(train)
        test = np.asarray(test)
        if train.dtype == bool:
            train = np.flatnonzero(train)
        if test.dtype == bool:
            test = np.flatnonzero(test)
        if train.ndim != 1 or test.ndim != 1 or train.dtype.kind not in "iu" or test.dtype.kind not in "iu":
            raise ValueError(f"cv entry {k}: train and test must be 1-D integer indices or boolean masks")
        for name, idx in (("train", train), ("test", test)):
            if idx.size and (idx.min() < 0 or idx.max() >= n):
                raise ValueError(f"cv entry {k}: {name} indices out of range [0, {n})")
        if train.size == 0 or test.size == 0:
            raise ValueError(f"cv entry {k} has an empty train or test set")
        if groups is not None:
            split = np.intersect1d(groups[train], groups[test])
            if split.size:
                raise ValueError(f"cv entry {k} puts rows of {split.size} group(s) in both its train and test "
                                 f"sets (group code {split[0]}); with groups no fold may split a group")
        folds.append((np.unique(train.astype(np.int64)), np.unique(test.astype(np.int64))))
    if len(folds) == 0:
        raise ValueError("cv produced no folds")
    return folds


def _overhead_bytes(n, n_models, D, n_classes, budget):
    """Bytes held outside the blocks and prediction chunks: per row the training and held-out
    masks (one byte per model each), label codes, ``seen``/``correct``/``prob_label`` and
    ``proba_sum`` with the float32 result and its temporaries; the models (float64 and the
    float32 prediction operand) and the gather buffer."""
    per_row = 2 * n_models + 4 + 16 + n_classes * (8 + 4 + 8)
    models = n_models * D * n_classes * (8 + 4)
    return (n * per_row + models + plan.gather_chunk_bytes(budget)
            + plan.prediction_fixed_bytes(n_models, n_classes, D - 1))


def _fit_predict_subsets(X, codes, center, member, heldout, *, n_classes, C, loss, options,
                         max_memory, n_threads, bar=None):
    """Train one model per column of ``member`` and accumulate predictions where ``heldout``.

    Like ``local.score_phase`` on the active set ``arange(N)``, but training sets are any
    columns of ``member`` (N, K) and held-out sets any columns of ``heldout`` (N, K).  ``bar``
    (a tqdm bar) counts the rows predicted.
    """
    budget = parse_memory(max_memory)
    if is_sparse(X):  # CSR rows: the sparse kernel, models in groups under the budget
        return _fit_predict_subsets_sparse(X, codes, member, heldout, n_classes=n_classes, C=C, loss=loss,
                                           options=options, budget=budget, n_threads=n_threads, bar=bar)
    n, d = X.shape
    D = d + 1
    K = member.shape[1]
    overhead = _overhead_bytes(n, K, D, n_classes, budget)
    if overhead >= budget:
        raise MemoryError(
            f"max_memory={budget / 1e9:.3g} GB does not cover the per-row arrays "
            f"({overhead / 1e9:.3g} GB for {n} rows and {K} models); raise max_memory")
    budget -= overhead
    blocks = plan.plan_blocks(member, budget, d, n_classes, options.history, overhead, n_threads)
    coef = np.zeros((K, D, n_classes))
    n_iter = np.zeros(K, dtype=np.int32)
    status = np.zeros(K, dtype=np.int32)
    Ck = plan.kernel_C(C, n_classes)
    precond = None
    if options.precondition:
        precond = preconditioning.phase_preconditioner(
            lambda rows: gather_rows(X, rows, center, np.empty((rows.size, D), dtype=np.float32),
                                     n_threads=n_threads),
            np.arange(n, dtype=np.int64), d, n_classes, Ck, float(member.sum(axis=0).mean()), n_threads)
    Xa_all = None  # the gathered rows, kept for prediction when one block trained on all rows
    for block in blocks:
        bm = member[:, block]
        union = np.flatnonzero(bm.any(axis=1))
        Xa = gather.gather_new(X, union, center, n_threads=n_threads)
        coef_b, info = solver.train_models(
            Xa, codes[union], np.ascontiguousarray(bm[union]), n_classes, C=Ck, loss=loss,
            coef=np.ascontiguousarray(coef[block]), positions=union, precond=precond, options=options,
            n_threads=n_threads)
        coef[block] = coef_b
        n_iter[block] = info["n_iter"]
        status[block] = info["status"]
        if len(blocks) == 1 and union.size == n:
            Xa_all = Xa
        del Xa
    seen = np.zeros(n, dtype=np.int32)
    correct = np.zeros(n, dtype=np.int32)
    prob_label = np.zeros(n, dtype=np.float64)
    proba_sum = np.zeros((n, n_classes), dtype=np.float64)
    W = prediction.stack_weights(coef)
    rows = np.flatnonzero(heldout.any(axis=1))
    per_row = plan.prediction_row_bytes(d, K, n_classes)
    chunk = int(max(1024, min(max(rows.size, 1), budget // per_row)))
    for s0 in range(0, rows.size, chunk):
        r = rows[s0:s0 + chunk]
        if Xa_all is not None and r[-1] - r[0] + 1 == r.size:
            Xa = Xa_all[r[0]:r[-1] + 1]  # consecutive rows: a view, nothing gathered again
        elif Xa_all is not None:
            Xa = Xa_all[r]
        else:
            Xa = gather.gather_new(X, r, center, n_threads=n_threads)
        s_seen, s_correct = seen[r], correct[r]
        s_prob, s_sum = prob_label[r], proba_sum[r]
        prediction.predict_accumulate(Xa, codes[r], np.ascontiguousarray(heldout[r]), W, n_classes,
                                  s_seen, s_correct, s_prob, s_sum, n_threads)
        seen[r], correct[r], prob_label[r], proba_sum[r] = s_seen, s_correct, s_prob, s_sum
        if bar is not None:
            bar.set_description("out-of-fold: predicting", refresh=False)
            bar.update(r.size)
    return seen, correct, prob_label, proba_sum, coef, n_iter, status


def _fit_predict_subsets_sparse(X, codes, member, heldout, *, n_classes, C, loss, options, budget, n_threads,
                                bar=None):
    """:func:`_fit_predict_subsets` on CSR X (:func:`aflite_fast.phase.sparse_local.fit_predict`)."""
    from aflite_fast.core.sparse_solver import CSRRows
    from aflite_fast.phase.sparse_local import fit_predict

    rows = CSRRows(X)
    n, K = member.shape
    lists = [np.flatnonzero(member[:, k]).astype(np.int64) for k in range(K)]
    proba_sum = np.zeros((n, n_classes), dtype=np.float64)
    fit = fit_predict(rows, codes, lists, np.ascontiguousarray(heldout), n_classes=n_classes,
                      C=plan.kernel_C(C, n_classes), loss=loss,
                      options=options, budget=budget, n_threads=n_threads, proba_sum=proba_sum)
    if bar is not None:
        bar.set_description("out-of-fold: predicting", refresh=False)
        bar.update(n)
    return fit["seen"], fit["correct"], fit["prob_label"], proba_sum, fit["coef"], fit["n_iter"], fit["status"]


def _progress_bar(progress, total):
    """A tqdm bar over ``total`` rows (hidden unless ``progress``), starting with the validation scan."""
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not progress, unit="row", desc="out-of-fold: validating rows", leave=False)


def _normalize(proba_sum, seen):
    """Mean probability vectors as float32 rows summing to 1; NaN rows where seen == 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = proba_sum / proba_sum.sum(axis=1, keepdims=True)
    mean[seen == 0] = np.nan
    return mean.astype(np.float32)


def oof_run(X, y, *, cv=5, C=1.0, loss="ce", loss_params=None, n_partitions=None, train_size=None,
            max_memory=None, random_state=None, n_jobs=None, tol=1e-4, max_iter=1000, groups=None,
            progress=False, column=None):
    """Run the kernel once and return every held-out statistic (see :class:`OOFRun`).

    Parameters are those of :func:`oof_predict_proba`; ``progress=True`` shows a tqdm bar
    (rows validated, then rows predicted; the command line's ``oof`` uses it).
    """
    problem = Problem.open(X, y, backend=LocalBackend(n_jobs), loss=loss, loss_params=loss_params, tol=tol,
                           column=column, items=False)
    X, labels, n_rows = problem.X, problem.labels, problem.n_rows
    C = check_C(C)
    budget = parse_memory(max_memory)  # fail early on a bad budget string
    if n_partitions is not None:
        settings = validate_settings(n_rows, n_partitions=n_partitions,
                                     train_size=0.5 if train_size is None else train_size, C=C)
        t = settings.train_rows(n_rows)
        problem.check_phase_memory(settings.n_partitions, t, budget, with_proba=True)  # before allocating
        problem.solver_arguments(C=C, max_iter=max_iter, max_memory=max_memory)
        with _progress_bar(progress, n_rows) as bar:
            problem.scan(progress=bar)
        active = np.arange(n_rows, dtype=np.int64)
        train_pos = problem.train_positions(seed_entropy(random_state), 0, active, t, settings.n_partitions,
                                            partition_groups(groups, n_rows, t))
        proba_sum = np.zeros((n_rows, labels.n_classes), dtype=np.float64)
        res = problem.score(labels.codes, active, train_pos, proba_sum=proba_sum)
        seen, correct, prob_label, n_iter, status = res.seen, res.correct, res.prob_label, res.n_iter, res.status
        mode = "partitions"
        n_missing = int(np.count_nonzero(seen == 0))
        if n_missing:
            warnings.warn(f"{n_missing} row(s) were in every partition's training set and have no "
                          "out-of-sample probabilities (NaN); raise n_partitions or lower train_size",
                          RuntimeWarning, stacklevel=3)
    else:
        if train_size is not None:
            raise ValueError("train_size applies to n_partitions mode only; with cv the folds fix the training sets")
        folds = make_folds(cv, labels.codes, random_state,
                           groups=None if groups is None else encode_groups(groups, n_rows))
        K = len(folds)
        member = np.zeros((n_rows, K), dtype=np.uint8)
        heldout = np.zeros((n_rows, K), dtype=np.uint8)
        for k, (train, test) in enumerate(folds):
            member[train, k] = 1
            heldout[test, k] = 1
            missing = np.setdiff1d(np.arange(labels.n_classes), labels.codes[train])
            if missing.size:
                raise ValueError(f"fold {k}'s training set has no row of class {labels.classes[missing[0]]!r}; "
                                 "use stratified folds or fewer of them")
        covered = heldout.any(axis=1)
        if not covered.all():
            raise ValueError(f"{int(np.count_nonzero(~covered))} row(s) are in no test set; "
                             "the folds' test sets must cover every row")
        # the folds' tolerance as a phase's (tol="auto": by the largest training set)
        options = solver.SolverOptions(tol=problem.phase_tol(int(member.sum(axis=0).max())), max_iter=max_iter)
        with _progress_bar(progress, 2 * n_rows) as bar:
            problem.scan(progress=bar)
            bar.set_description(f"out-of-fold: training {K} models")
            seen, correct, prob_label, proba_sum, coef, n_iter, status = _fit_predict_subsets(
                X, labels.codes, problem.center, member, heldout, n_classes=labels.n_classes, C=C, loss=problem.loss,
                options=options, max_memory=max_memory, n_threads=problem.backend.n_threads, bar=bar)
        # the guards of every phase: no fold model reported that did not train
        problem.check_models(coef, n_iter, status, lambda k: np.flatnonzero(member[:, k]), what="fold model",
                             tol=options.tol)
        mode = "folds"
    return OOFRun(proba=_normalize(proba_sum, seen), seen=seen, correct=correct, prob_label=prob_label,
                  codes=labels.codes, classes=labels.classes, n_iter=n_iter, status=status, mode=mode)


def oof_predict_proba(X, y, *, cv=5, C=1.0, loss="ce", loss_params=None, n_partitions=None,
                      train_size=None, max_memory=None, random_state=None, n_jobs=None, tol=1e-4,
                      max_iter=1000, groups=None, column=None):
    """Out-of-sample predicted probabilities of every row, all folds trained in one kernel call.

    With ``loss="ce"`` and the same folds this equals
    ``cross_val_predict(LogisticRegression(C=C), X, y, cv=folds, method="predict_proba")``
    up to the solvers' tolerance.

    Parameters
    ----------
    X : ndarray, numpy.memmap or path to a ``.npy``/``.npz`` file (``FILE.npz:KEY``), shape (N, d)
        Embeddings, float16/32/64 or integers, either byte order (see
        :func:`aflite_fast.io.inputs.open_embeddings`); memory maps are read in chunks, never copied whole.
    y : array-like of shape (N,)
        Labels of any sortable type; columns of the output follow ``np.unique(y)``.
    cv : int, splitter or iterable of (train, test) pairs, default=5
        An int K gives stratified K folds (``StratifiedKFold(K, shuffle=True,
        random_state=random_state)``); a scikit-learn splitter is called as
        ``cv.split(X, y)``; pairs are index arrays or boolean masks.  Every row must be in at
        least one test set (rows in several are averaged).  Ignored when ``n_partitions`` is set.
    C : float, default=1.0
        Inverse L2 strength (scikit-learn's meaning; the intercept is not penalized).
    loss : str, default="ce"
        Training loss (see :data:`aflite_fast.LOSS_NAMES`); ``loss_params`` its parameters,
        e.g. ``{"q": 0.7}`` for "gce".
    loss_params : dict, optional
    n_partitions : int, optional
        Instead of folds, train m models on random training sets of ``train_size`` rows (AFLite's
        partitions) and average each row's probabilities over the models that held it out.
    train_size : int or float, optional
        Rows (or a fraction of them) per partition; default 0.5.  Only with ``n_partitions``.
    max_memory : int or str, optional
        Budget of training rows and prediction chunks (e.g. ``"2GB"``); changes speed, never results.
    random_state : None, int or numpy.random.Generator
        Seeds the folds (or partitions).
    n_jobs : int, optional
        Threads (None: all cores); results do not depend on it.
    tol, max_iter : float or "auto", int
        Each model's L-BFGS stopping rules (max |gradient| of mean loss + L2 term; iterations);
        ``"auto"`` as in :func:`aflite_fast.aflite` (:func:`aflite_fast.core.solver.phase_tol`).
    groups : array-like of shape (N,), optional
        A group id per row: no group is split between a model's training and held-out rows.
        An int ``cv`` then gives ``StratifiedGroupKFold(cv, shuffle=True,
        random_state=random_state)`` over the group codes (0..G-1 in order of first appearance),
        a splitter is called as ``cv.split(X, y, groups)``, and partitions draw whole groups
        as in :func:`aflite_fast.aflite`.
    column : str, optional
        When X is the path of a table (a Hugging Face dataset or ``.arrow`` file, a Parquet file
        or directory): its embedding column (see docs/formats.md).

    Returns
    -------
    proba : ndarray of shape (N, n_classes), float32
        Rows sum to 1.  In ``n_partitions`` mode a row never held out is NaN (with a warning).

    Raises
    ------
    ValueError
        For inconsistent inputs (shapes, NaN/inf in X, a single class, a class with fewer rows
        than folds, folds whose test sets miss rows or whose training set misses a class, ...).

    Examples
    --------
    >>> from aflite_fast import oof_predict_proba
    >>> P = oof_predict_proba("emb.npy", y, cv=5, C=1.0, random_state=0)   # doctest: +SKIP
    >>> from cleanlab.filter import find_label_issues
    >>> issues = find_label_issues(labels=y, pred_probs=P)                  # doctest: +SKIP
    """
    return oof_run(X, y, cv=cv, C=C, loss=loss, loss_params=loss_params, n_partitions=n_partitions,
                   train_size=train_size, max_memory=max_memory, random_state=random_state,
                   n_jobs=n_jobs, tol=tol, max_iter=max_iter, groups=groups, column=column).proba
