"""scikit-learn / imbalanced-learn style estimators on the compiled kernel."""

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from aflite_fast.core import layout, prediction, solver
from aflite_fast.core.losses import PARAMETER_NAMES, resolve_loss
from aflite_fast.core.reference_class import centered
from aflite_fast.core.solver_status import status_counts, warn_not_converged
from aflite_fast.filtering.loop import aflite
from aflite_fast.filtering.problem import Problem, check_C
from aflite_fast.io.inputs import open_embeddings, scan_rows
from aflite_fast.io.sparse import is_sparse
from aflite_fast.phase.backends import LocalBackend
from aflite_fast.phase.plan import kernel_C
from aflite_fast.runtime.threads import effective_n_threads


class AFLite(BaseEstimator):
    """AFLite as a row-removing estimator in the style of imbalanced-learn.

    Parameters
    ----------
    target_size, n_partitions, train_size, slice_size, tau, C, loss, loss_params, max_memory,
    random_state, n_jobs, progress, tol, max_iter, remove, checkpoint, null, n_null, stop, chance_check, tie_break
        As in :func:`aflite_fast.aflite`; the groups are given to :meth:`fit_resample`.

    Attributes
    ----------
    sample_indices_ : ndarray of int64
        Sorted indices of the kept rows.
    predictability_ : ndarray of float64
        Each row's last predictability score (NaN where never scored).
    history_ : list of PhaseRecord
    result_ : AFLiteResult

    Examples
    --------
    >>> from aflite_fast import AFLite
    >>> X_kept, y_kept = AFLite(target_size=500, train_size=0.5).fit_resample(X, y)  # doctest: +SKIP
    """

    def __init__(self, *, target_size, n_partitions=64, train_size=0.5, slice_size=500, tau=0.75,
                 C=1.0, loss="ce", loss_params=None, max_memory=None, random_state=None, n_jobs=None,
                 progress=False, tol="auto", max_iter=1000, remove="row", checkpoint=None, null=None,
                 n_null=1, stop="paper", chance_check=True, tie_break="label_prob"):
        self.target_size = target_size
        self.n_partitions = n_partitions
        self.train_size = train_size
        self.slice_size = slice_size
        self.tau = tau
        self.C = C
        self.loss = loss
        self.loss_params = loss_params
        self.max_memory = max_memory
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.progress = progress
        self.tol = tol
        self.max_iter = max_iter
        self.remove = remove
        self.checkpoint = checkpoint
        self.null = null
        self.n_null = n_null
        self.stop = stop
        self.chance_check = chance_check
        self.tie_break = tie_break

    def fit(self, X, y, groups=None):
        """Run AFLite on (X, y) and store the kept rows' indices; ``groups`` as in
        :func:`aflite_fast.aflite` (a group id per row: partitions train on whole groups)."""
        self.result_ = aflite(
            X, y, target_size=self.target_size, n_partitions=self.n_partitions,
            train_size=self.train_size, slice_size=self.slice_size, tau=self.tau, C=self.C,
            loss=self.loss, loss_params=self.loss_params, max_memory=self.max_memory,
            random_state=self.random_state, n_jobs=self.n_jobs, progress=self.progress,
            tol=self.tol, max_iter=self.max_iter, groups=groups, remove=self.remove,
            checkpoint=self.checkpoint, null=self.null, n_null=self.n_null, stop=self.stop,
            chance_check=self.chance_check, tie_break=self.tie_break)
        self.sample_indices_ = self.result_.keep
        self.predictability_ = self.result_.scores
        self.history_ = self.result_.history
        return self

    def fit_resample(self, X, y, groups=None):
        """Fit and return the kept rows ``(X[sample_indices_], y[sample_indices_])``.

        A pandas DataFrame or Series comes back as one, its columns, dtypes and index (the
        kept rows' labels) kept, so a later step that selects columns by name still finds
        them; arrays, memory maps and paths come back as arrays.
        """
        self.fit(X, y, groups=groups)
        keep = self.sample_indices_
        return _take_rows(X, keep, lambda: open_embeddings(X)), _take_rows(y, keep, lambda: np.asarray(y))


def _take_rows(data, rows, as_array):
    """``data``'s rows ``rows``: a DataFrame or Series (anything with ``iloc``, recognised as
    scikit-learn recognises them, so pandas is never imported here) through ``iloc``; anything
    else through ``as_array()``, as a NumPy array."""
    if hasattr(data, "iloc"):
        return data.iloc[rows]
    taken = as_array()[rows]
    return taken if is_sparse(taken) else np.asarray(taken)  # sparse X comes back as CSR


def _check_feature_names(estimator, X, reset):
    """scikit-learn's feature-name bookkeeping: sets ``feature_names_in_`` at fit for input with
    string column names (a DataFrame), and at predict refuses other or reordered names and
    warns when names appear or disappear between fit and predict."""
    try:
        from sklearn.utils.validation import _check_feature_names as check  # scikit-learn >= 1.6
    except ImportError:  # older releases: a method of BaseEstimator
        return estimator._check_feature_names(X, reset=reset)
    return check(estimator, X, reset=reset)


class RobustLogisticRegression(ClassifierMixin, BaseEstimator):
    """Multinomial logistic regression with L2 penalty and noise-robust losses.

    With ``loss="ce"`` it reaches the optimum of
    ``sklearn.linear_model.LogisticRegression(C=C)`` (lbfgs); other losses train the same
    linear model with a loss that does not chase wrong labels.

    Parameters
    ----------
    loss : str or UserLoss, default="ce"
        One of :data:`aflite_fast.core.losses.LOSS_NAMES`, or a user loss
        (:class:`aflite_fast.core.user_losses.UserLoss`).
    C : float, default=1.0
        Inverse L2 strength (scikit-learn's meaning; the intercept is not penalized).
    tol : float or "auto", default=1e-4
        Stop when max |gradient| <= tol (the objective is mean loss + L2 term); ``"auto"`` as in
        :func:`aflite_fast.aflite` (:func:`aflite_fast.core.solver.phase_tol`).
    max_iter : int, default=1000
    n_jobs : int, optional
        Threads; results do not depend on it.
    q, k, alpha, beta, A, T : optional
        Parameters of the loss (:data:`aflite_fast.core.losses.LOSS_PARAMETERS` lists which loss
        takes which, and their defaults): ``q`` for "gce" and "gce_trunc", ``k`` for
        "gce_trunc", ``alpha``, ``beta``, ``A`` for "sce", the transition matrix ``T``
        (C x C) for "forward".  None (the default) means the loss's default; a parameter the
        loss does not take is an error at fit.
    loss_params : dict, optional
        Parameters under other names (a user loss's own); a name may not be given both here
        and above.

    Attributes
    ----------
    classes_ : ndarray (n_classes,)
    coef_ : ndarray (n_classes, n_features), or (1, n_features) for two classes
    intercept_ : ndarray (n_classes,), or (1,) for two classes
    n_features_in_ : int
    feature_names_in_ : ndarray (n_features_in_,) of str
        Column names of a DataFrame given to :meth:`fit` (only then); a DataFrame given later
        must have the same names in the same order.
    n_iter_ : ndarray (1,)
    """

    def __init__(self, loss="ce", C=1.0, tol=1e-4, max_iter=1000, n_jobs=None, *, q=None, k=None,
                 alpha=None, beta=None, A=None, T=None, loss_params=None):
        self.loss = loss
        self.C = C
        self.tol = tol
        self.max_iter = max_iter
        self.n_jobs = n_jobs
        self.q = q
        self.k = k
        self.alpha = alpha
        self.beta = beta
        self.A = A
        self.T = T
        self.loss_params = loss_params

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # CSR rows (other formats converted once): docs/sparse.md
        return tags

    def _loss_spec(self, n_classes):
        """The loss resolved by the registry from the parameters that are set."""
        if self.loss_params is not None and not isinstance(self.loss_params, dict):
            raise TypeError(f"loss_params must be a dict or None, got {self.loss_params!r}")
        params = dict(self.loss_params or {})
        for name in PARAMETER_NAMES:
            value = getattr(self, name)
            if value is not None:
                if name in params:
                    raise ValueError(f"loss parameter {name!r} is given twice: as {name}= and in loss_params")
                params[name] = value
        return resolve_loss(self.loss, params, n_classes)

    def _validate_X(self, X, *, reset):
        """X opened as :func:`aflite_fast.io.inputs.open_embeddings` does and its rows checked
        for the float32 kernel (prediction); returns (X, column means)."""
        _check_feature_names(self, X, reset=reset)
        X = open_embeddings(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input")
        return X, (None if is_sparse(X) else scan_rows(X))  # sparse values were checked when opened

    def fit(self, X, y):
        """Fit the model on (X, y).

        Parameters
        ----------
        X : array-like, numpy.memmap or path, shape (n_samples, n_features)
            Rows as :func:`aflite_fast.io.inputs.open_embeddings` takes them.
        y : array-like of shape (n_samples,)
            Class labels.

        Returns
        -------
        self
        """
        _check_feature_names(self, X, reset=True)
        y = column_or_1d(y, warn=True)
        # the problem step of every entry point: X opened and scanned, labels encoded (first: it
        # refuses NaN in y), the loss resolved, X with no variance or too small a scale refused
        problem = Problem.open(X, y, backend=LocalBackend(self.n_jobs), loss_resolver=self._loss_spec, tol=self.tol,
                               items=False, min_per_class=1)
        self.n_features_in_ = problem.n_features
        check_classification_targets(y)
        C = check_C(self.C)
        labels = problem.labels
        options = solver.SolverOptions(tol=problem.phase_tol(problem.n_rows), max_iter=self.max_iter)
        problem.scan()
        center = problem.center
        n_rows = problem.n_rows
        Ck = kernel_C(C, labels.n_classes)
        if is_sparse(problem.X):  # CSR rows, not centred: the sparse kernel (docs/sparse.md)
            from aflite_fast.core import sparse_solver

            coef, info = sparse_solver.train_sparse_models(
                sparse_solver.CSRRows(problem.X), labels.codes, [np.arange(n_rows, dtype=np.int64)],
                labels.n_classes, C=Ck, loss=problem.loss, options=options, n_threads=problem.backend.n_threads)
            center = None
        else:
            Xa = layout.augment_rows(np.asarray(problem.X), center)
            member = np.ones((n_rows, 1), dtype=np.uint8)
            coef, info = solver.train_models(
                Xa, labels.codes, member, labels.n_classes, C=Ck, loss=problem.loss,
                precond="auto", options=options, n_threads=problem.backend.n_threads)
        # never an untrained model (the guards of every phase), then the convergence warning
        problem.check_models(coef, info["n_iter"], info["status"], lambda j: np.arange(n_rows))
        warn_not_converged(status_counts(info["status"]), what="model")
        # the kernel's weights leave the last class at zero (the reference-class form): the
        # estimator holds the zero-mean weights of the symmetric optimum, as scikit-learn does
        self._coef_full = centered(coef[0] if center is None
                                   else layout.uncenter_coef(coef[0], center.astype(np.float64)))
        self.classes_ = labels.classes
        self.n_iter_ = info["n_iter"].astype(np.int64)
        W = self._coef_full
        if labels.n_classes == 2:
            self.coef_ = (W[:-1, 1] - W[:-1, 0])[None, :]
            self.intercept_ = np.array([W[-1, 1] - W[-1, 0]])
        else:
            self.coef_ = W[:-1].T.copy()
            self.intercept_ = W[-1].copy()
        return self

    def predict_proba(self, X):
        """Class probabilities, shape (n_samples, n_classes).

        Raises
        ------
        NotFittedError
            Before :meth:`fit`.
        ValueError
            If X has another number of features than at fit, or holds NaN or inf.
        """
        check_is_fitted(self)
        X, _ = self._validate_X(X, reset=False)
        if is_sparse(X):
            from aflite_fast.core.sparse_solver import CSRRows, predict_proba_sparse

            return predict_proba_sparse(CSRRows(X), self._coef_full, n_threads=effective_n_threads(self.n_jobs))
        Xa = layout.augment_rows(np.asarray(X))
        return prediction.predict_proba(Xa, self._coef_full, n_threads=effective_n_threads(self.n_jobs))

    def decision_function(self, X):
        """Logits (n_samples, n_classes), or the log-odds (n_samples,) for two classes."""
        check_is_fitted(self)
        X, _ = self._validate_X(X, reset=False)
        Z = (np.asarray(X.astype(np.float64) @ self._coef_full[:-1]) if is_sparse(X)
             else np.asarray(X, dtype=np.float64) @ self._coef_full[:-1]) + self._coef_full[-1]
        return Z[:, 1] - Z[:, 0] if Z.shape[1] == 2 else Z

    def predict(self, X):
        """Most probable class of each row."""
        proba = self.predict_proba(X)  # first: it raises NotFittedError before fit
        return self.classes_[np.argmax(proba, axis=1)]
