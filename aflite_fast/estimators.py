"""scikit-learn / imbalanced-learn style estimators on the compiled kernel."""
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from . import kernel
from ._solver_status import check_solver_result
from ._threads import effective_n_threads
from .algorithm import aflite
from .data import encode_labels, open_embeddings, scan_rows
from .engine import kernel_C
from .losses import resolve_loss


class AFLite(BaseEstimator):
    """AFLite as a row-removing estimator in the style of imbalanced-learn.

    Parameters
    ----------
    target_size, n_partitions, train_size, slice_size, tau, C, loss, loss_params, max_memory,
    random_state, n_jobs, progress, tol, max_iter, remove, checkpoint, null, n_null, stop
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
                 progress=False, tol=1e-4, max_iter=1000, remove="row", checkpoint=None, null=None,
                 n_null=1, stop="paper"):
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

    def fit(self, X, y, groups=None):
        """Run AFLite on (X, y) and store the kept rows' indices; ``groups`` as in
        :func:`aflite_fast.aflite` (a group id per row: partitions train on whole groups)."""
        self.result_ = aflite(
            X, y, target_size=self.target_size, n_partitions=self.n_partitions,
            train_size=self.train_size, slice_size=self.slice_size, tau=self.tau, C=self.C,
            loss=self.loss, loss_params=self.loss_params, max_memory=self.max_memory,
            random_state=self.random_state, n_jobs=self.n_jobs, progress=self.progress,
            tol=self.tol, max_iter=self.max_iter, groups=groups, remove=self.remove,
            checkpoint=self.checkpoint, null=self.null, n_null=self.n_null, stop=self.stop)
        self.sample_indices_ = self.result_.keep
        self.predictability_ = self.result_.scores
        self.history_ = self.result_.history
        return self

    def fit_resample(self, X, y, groups=None):
        """Fit and return the kept rows ``(X[sample_indices_], y[sample_indices_])``."""
        self.fit(X, y, groups=groups)
        X_arr = open_embeddings(X)
        return np.asarray(X_arr[self.sample_indices_]), np.asarray(y)[self.sample_indices_]


class RobustLogisticRegression(ClassifierMixin, BaseEstimator):
    """Multinomial logistic regression with L2 penalty and noise-robust losses.

    With ``loss="ce"`` it reaches the optimum of
    ``sklearn.linear_model.LogisticRegression(C=C)`` (lbfgs); other losses train the same
    linear model with a loss that does not chase wrong labels.

    Parameters
    ----------
    loss : str, default="ce"
        One of :data:`aflite_fast.losses.LOSS_NAMES`.
    C : float, default=1.0
        Inverse L2 strength (scikit-learn's meaning; the intercept is not penalized).
    tol : float, default=1e-4
        Stop when max |gradient| <= tol (the objective is mean loss + L2 term).
    max_iter : int, default=1000
    n_jobs : int, optional
        Threads; results do not depend on it.
    **loss_params
        Parameters of the loss, e.g. ``q=0.7`` for "gce", ``T=...`` for "forward".

    Attributes
    ----------
    classes_ : ndarray (n_classes,)
    coef_ : ndarray (n_classes, n_features), or (1, n_features) for two classes
    intercept_ : ndarray (n_classes,), or (1,) for two classes
    n_iter_ : ndarray (1,)
    """

    def __init__(self, loss="ce", C=1.0, tol=1e-4, max_iter=1000, n_jobs=None, **loss_params):
        self.loss = loss
        self.C = C
        self.tol = tol
        self.max_iter = max_iter
        self.n_jobs = n_jobs
        self.loss_params = loss_params
        for key, value in loss_params.items():
            setattr(self, key, value)

    def get_params(self, deep=True):
        params = {"loss": self.loss, "C": self.C, "tol": self.tol, "max_iter": self.max_iter,
                  "n_jobs": self.n_jobs}
        params.update({k: getattr(self, k) for k in self.loss_params})
        return params

    def set_params(self, **params):
        for key, value in params.items():
            if key not in ("loss", "C", "tol", "max_iter", "n_jobs"):
                self.loss_params[key] = value
            setattr(self, key, value)
        return self

    def fit(self, X, y):
        """Fit the model on (X, y)."""
        X = open_embeddings(X)
        labels = encode_labels(y, X.shape[0], min_per_class=1)
        C = self.C
        if isinstance(C, bool) or not np.isscalar(C) or not C > 0:
            raise ValueError(f"C must be a positive number, got {C!r}")
        spec = resolve_loss(self.loss, self.loss_params, labels.n_classes)
        center = scan_rows(X)
        Xa = kernel.augment_rows(np.asarray(X), center.astype(np.float32))
        member = np.ones((X.shape[0], 1), dtype=np.uint8)
        coef, info = kernel.train_models(
            Xa, labels.codes, member, labels.n_classes, C=kernel_C(C, labels.n_classes), loss=spec,
            options=kernel.SolverOptions(tol=self.tol, max_iter=self.max_iter),
            n_threads=effective_n_threads(self.n_jobs))
        check_solver_result(info["n_iter"], info["status"], X, center)  # never an untrained model
        self._coef_full = kernel.uncenter_coef(coef[0], center.astype(np.float32).astype(np.float64))
        self.classes_ = labels.classes
        self.n_features_in_ = X.shape[1]
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
        """Class probabilities, shape (n_samples, n_classes)."""
        check_is_fitted(self, "_coef_full")
        X = open_embeddings(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, the model was fitted with {self.n_features_in_}")
        Xa = kernel.augment_rows(np.asarray(X))
        return kernel.predict_proba(Xa, self._coef_full, n_threads=effective_n_threads(self.n_jobs))

    def decision_function(self, X):
        """Logits (n_samples, n_classes), or the log-odds (n_samples,) for two classes."""
        check_is_fitted(self, "_coef_full")
        X = np.asarray(open_embeddings(X), dtype=np.float64)
        Z = X @ self._coef_full[:-1] + self._coef_full[-1]
        return Z[:, 1] - Z[:, 0] if Z.shape[1] == 2 else Z

    def predict(self, X):
        """Most probable class of each row."""
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]
