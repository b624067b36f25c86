"""Inputs on which no linear model can learn anything, refused before (or as soon as) they are met.

On such inputs every partition's model is its intercept alone: it predicts the class prior for
every row, the majority class's rows all score 1, and AFLite would silently "filter by class
prior" (remove the majority class slice after slice).  Each case is a ValueError naming its cause:

a. X with no variance (:func:`check_scale`): every column constant, i.e. all rows identical.
b. X whose scale leaves the solver unable to move (:func:`check_scale`): when the largest
   ``|X - column mean|`` is at most the solver's tolerance ``tol``, every weight's gradient at
   the start (``mean((p - e_y) x)``, with ``|p - e_y| <= 1``) is already below ``tol``, so the
   solver stops with the weights where they started (rows multiplied by 1e-12, subnormal values).
   A sample of :data:`SAMPLE_ROWS` rows spread over X is looked at first; the full pass over X
   (:class:`aflite_fast.io.scale.DataScale`) is paid only when the sample is that flat.
c. A forward-correction matrix T that is not row-stochastic or is singular
   (:func:`check_transition`): ``T[i, j] = P(noisy label j | true label i)`` must have
   non-negative rows summing to 1, and forward correction (Patrini et al., CVPR 2017) assumes T
   invertible: with a singular T two true classes give the same noisy-label distribution and
   cannot be told apart.  "Singular" means a smallest singular value at most
   :data:`SINGULAR_RTOL` times the largest.
d. Models whose weights never left their start, whatever the solver status says
   (:func:`check_moved`): a cold-started model (weights zero) that still has every weight
   exactly zero after training is an intercept-only model, even when the solver reports it
   "converged".  The solver's stopping test leaves zero only where the gradient there is
   exactly zero (a cold start stops once its largest gradient entry is at most
   ``min(tol, START_RTOL * its value at zero)``, :class:`aflite_fast.core.solver.SolverOptions`),
   so such a model is refused, with its cause: its training rows vary by at most ``tol`` (X
   constant, or nearly, on those rows), or they vary but the labels cancel exactly on them
   (every row repeated with the other label, twins of opposite labels; the classes' column
   sums equal).  Either way every held-out row would be a tie of the classes, and the tie
   rule, not the data, would decide what is removed.  Only the unmoved models' rows are read,
   so the check costs nothing on ordinary data.  Warm-started models are not checked: their
   start is itself a trained model.
"""
import numpy as np

from aflite_fast.io.scale import DataScale

#: Rows of X looked at by the cheap first look of :func:`check_scale`.
SAMPLE_ROWS = 2048


_PRIOR = ("so every model would predict the class prior alone and filtering would only remove "
          "rows of the majority class")


def check_scale(X, center, tol):
    """Raise ValueError when X has no variance or a scale the solver cannot move on (a, b).

    Parameters
    ----------
    X : ndarray or memmap (N, d)
        Validated embeddings (:func:`aflite_fast.io.inputs.open_embeddings`).
    center : ndarray (d,)
        Column means (from :func:`aflite_fast.io.inputs.scan_rows`).
    tol : float
        The solver's tolerance on the largest gradient component.
    """
    n = X.shape[0]
    center64 = np.asarray(center, dtype=np.float64)
    sparse = hasattr(X, "tocsr")  # scipy sparse: the full pass reads column extremes, nothing densified
    if not sparse:
        sample = np.unique(np.linspace(0, n - 1, min(n, SAMPLE_ROWS)).astype(np.int64))
        rows = np.asarray(X[sample], dtype=np.float64)
        if np.abs(rows - center64).max() > tol:
            return

    value, col = DataScale(X, center).largest()
    if value == 0.0:
        raise ValueError(f"X has no variance: every column is constant (all {n} rows are identical), {_PRIOR}; "
                         "pass embeddings that differ between rows")
    if value <= tol:
        raise ValueError(
            f"X's scale leaves the solver unable to move: the largest |X - column mean| is {value:.3g} "
            f"(column {col}), at or below the solver's tolerance tol={tol:g}: every weight's gradient "
            f"is below tol at the start, {_PRIOR}; standardize X's columns (or multiply X by a constant)")


def unmoved_weights(coef, start=None):
    """True for each model whose weights (all rows of ``coef`` but the last, the intercept) equal
    ``start``'s (zeros when None) exactly."""
    coef = np.asarray(coef)
    weights = coef[:, :-1, :]
    ref = 0.0 if start is None else np.asarray(start)[:, :-1, :]
    return np.all(weights == ref, axis=(1, 2))


def check_moved(coef, status=None, *, X, center=None, train_rows, tol, what="model"):
    """Raise ValueError when a cold-started model's weights are all still zero (d), whatever
    ``status`` (solver status codes, used only to name them) says; the message names the cause
    (training rows that vary by at most ``tol``, or labels that cancel exactly on them).

    Parameters
    ----------
    coef : ndarray (m, d + 1, C)
        The trained models, started from zero.
    X : ndarray or memmap (N, d)
    center : ndarray (d,), optional
        Subtracted from the rows before they are looked at (only their spread counts).
    train_rows : callable
        ``train_rows(j)``: row indices of X that model j trained on.
    tol : float
        The solver's tolerance.
    """
    stuck = np.flatnonzero(unmoved_weights(coef))
    if stuck.size == 0:
        return
    flat = []
    for j in stuck:
        rows = np.sort(np.asarray(train_rows(j), dtype=np.int64))
        if hasattr(X, "tocsr"):  # scipy sparse: the rows' largest column range, nothing densified
            from aflite_fast.io.sparse import column_stats

            if rows.size == 0 or column_stats(X[rows])[1] <= tol:
                flat.append(j)
            continue
        block = np.asarray(X[rows], dtype=np.float64)
        if center is not None:
            block = block - np.asarray(center, dtype=np.float64)
        if block.size == 0 or np.abs(block - block.mean(axis=0)).max() <= tol:
            flat.append(j)
    detail = ""
    if status is not None:
        from aflite_fast.core.solver_status import status_counts

        counts = status_counts(np.asarray(status)[stuck])
        detail = " (solver status: " + ", ".join(f"{k}: {v}" for k, v in counts.items() if v) + ")"
    head = f"{stuck.size} of {len(coef)} {what}(s) ended with every weight still at its starting value of zero{detail}"
    if flat:
        raise ValueError(f"{head}, on training rows whose values vary by at most tol={tol:g}: they are "
                         f"intercept-only models, {_PRIOR}; X gives them nothing to learn from: standardize X's "
                         "columns, or check that the embeddings differ between rows")
    raise ValueError(f"{head}: their training rows vary, but the gradient at zero weights is exactly zero on them, "
                     "so the labels cancel exactly (e.g. every row repeated with the other label, twins of "
                     "opposite labels): every prediction would be a tie of the classes (in a filter, the tie "
                     "rule, not the data, would decide what is removed); drop or merge the repeated rows, or give "
                     "rows that differ where their labels do")
