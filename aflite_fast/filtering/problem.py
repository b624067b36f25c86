"""The problem step every entry point shares, and the checked phase call.

``aflite``, ``predictability``, ``oof_predict_proba``, ``evaluate_filter`` and the estimators
all go through :class:`Problem`, so they accept and refuse the same inputs with the same
messages:

a. :meth:`Problem.open`: X opened by the backend (:mod:`aflite_fast.phase.backends`; 2-D, or
   3-D multiple choice where the caller takes it), its labels encoded (classes 0..K-1 for
   multiple choice), the evaluation rows, the loss resolved and checked against the shape.
   Cheap: nothing reads the rows yet, so the caller checks its settings
   (:func:`validate_settings`) and the memory of a phase before the scan.
b. :meth:`Problem.scan`: one pass over the rows (finite values, column means, optionally the
   content fingerprint of a checkpoint), then the scale check of degenerate inputs (no
   variance, or a scale at or below ``tol``: :mod:`aflite_fast.core.degenerate`).
c. :meth:`Problem.train_positions`: each partition's training positions of a phase, whole
   groups where given, never an evaluation row (:mod:`aflite_fast.phase.evaluation_rows`).
d. :meth:`Problem.score`: a phase through the backend, then the guards on its models: none
   reported that did not train or never left its start (:meth:`Problem.check_models`:
   :func:`~aflite_fast.core.solver_status.check_trained`,
   :func:`~aflite_fast.core.degenerate.check_moved`).
"""
import numbers
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from aflite_fast.core.degenerate import check_moved
from aflite_fast.core.losses import MC_FORWARD_MESSAGE, resolve_loss
from aflite_fast.core.solver import TOL_MANY_ROWS, SolverOptions, check_tol, phase_tol
from aflite_fast.core.solver_status import check_trained
from aflite_fast.io.fingerprint import ContentHash
from aflite_fast.io.inputs import Labels, encode_labels
from aflite_fast.io.scale import DataScale
from aflite_fast.io.sparse import is_sparse
from aflite_fast.io.watch import InputWatch
from aflite_fast.phase.evaluation_rows import eval_mask, train_positions
from aflite_fast.phase.multiple_choice import check_shape, encode_choices
from aflite_fast.phase.plan import phase_shape


@dataclass
class Settings:
    """AFLite's hyperparameters, checked against the data size (:func:`validate_settings`)."""

    n_rows: int
    target_size: int
    n_partitions: int
    train_size: float
    slice_size: int
    tau: float
    C: float

    def train_rows(self, n_active):
        """t of a phase with ``n_active`` (training-eligible) rows."""
        if isinstance(self.train_size, numbers.Integral):
            return int(self.train_size)
        return max(1, int(round(self.train_size * n_active)))


def _check_int(name, value, low, high=None):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return int(value)


def check_C(C):
    """``C`` as a float; ValueError unless it is a positive finite number."""
    if isinstance(C, bool) or not isinstance(C, numbers.Real) or not C > 0 or not np.isfinite(C):
        raise ValueError(f"C must be a positive number, got {C!r}")
    return float(C)


def validate_settings(n_rows, *, target_size=0, n_partitions, train_size, slice_size=1, tau=0.5, C=1.0, n_eval=0):
    """Check the hyperparameters against the data size; raise ValueError naming the problem.

    ``n_rows`` counts the rows a partition may train on; ``n_eval`` the evaluation rows left out
    of them (the messages say so)."""
    target_size = _check_int("target_size", target_size, 0)
    n_partitions = _check_int("n_partitions", n_partitions, 1)
    slice_size = _check_int("slice_size", slice_size, 1)
    if isinstance(tau, bool) or not isinstance(tau, numbers.Real) or not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must be in [0, 1], got {tau!r}")
    C = check_C(C)
    if isinstance(train_size, bool) or not isinstance(train_size, numbers.Real):
        raise ValueError(f"train_size must be an int or a fraction in (0, 1), got {train_size!r}")
    # with evaluation rows, n_rows counts the rows left to train on: say so
    rows = (f"{n_rows} rows" if not n_eval else
            f"the {n_rows} rows to train on ({n_rows + n_eval} rows less the {n_eval} of eval_rows)")
    if isinstance(train_size, numbers.Integral):
        if train_size < 1:
            raise ValueError(f"train_size must be >= 1, got {train_size}")
        if train_size >= n_rows:
            bound = f"the number of rows ({n_rows})" if not n_eval else rows
            raise ValueError(f"train_size ({train_size}) must be smaller than {bound}: every partition needs "
                             "held-out rows")
        train_size = int(train_size)
    elif not 0.0 < train_size < 1.0:
        raise ValueError(f"a fractional train_size must be in (0, 1), got {train_size}")
    elif int(round(train_size * n_rows)) >= n_rows:
        raise ValueError(f"train_size={train_size} of {rows} leaves no held-out rows")
    return Settings(n_rows, target_size, n_partitions, train_size, slice_size, float(tau), C)


def problem_labels(X, y, position_bias=False, min_per_class=2):
    """The labels of X (classes 0..K-1 for multiple choice: the right candidate of each item)
    and whether X (any object with ``ndim`` and ``shape``) is multiple choice."""
    if X.ndim == 3:
        n_rows, K, _ = check_shape(X)
        return Labels(classes=np.arange(K), codes=encode_choices(y, n_rows, K)), True
    if position_bias:
        raise ValueError("position_bias applies to multiple-choice X (items x candidates x features) only")
    return encode_labels(y, X.shape[0], min_per_class=min_per_class), False


def check_multiple_choice_loss(spec, multiple_choice):
    """Refuse a loss that does not apply to multiple choice (:mod:`aflite_fast.phase.multiple_choice`, c)."""
    if multiple_choice and spec.name == "forward":
        raise ValueError(MC_FORWARD_MESSAGE)


@dataclass
class Problem:
    """Validated inputs of a run, and what the scan learned about them.

    Attributes
    ----------
    X : the opened input (array, memory map, row source, or the Dask backend's rows), (N, d) or
        (N, K, d) for multiple choice
    rows : the (rows, d) view scans read (multiple choice: the N x K candidate rows)
    labels : :class:`~aflite_fast.io.inputs.Labels`
    multiple_choice : bool
    loss : :class:`~aflite_fast.core.losses.LossSpec`
    is_eval : bool mask of the evaluation rows, or None
    backend : the backend that opened X (:mod:`aflite_fast.phase.backends`)
    tol : the solver's tolerance, a number or ``"auto"`` (each phase's from its sizes:
        :func:`~aflite_fast.core.solver.phase_tol`; the scale check uses the largest, 3e-4)
    position_bias : bool, multiple choice only
    watch : the files behind X, checked for changes (:mod:`aflite_fast.io.watch`)
    center : float32 column means, after :meth:`scan`
    scale : :class:`~aflite_fast.io.scale.DataScale`, after :meth:`scan`
    content_digest : the content fingerprint of X's rows (``scan(fingerprint=True)``), or None
    """

    X: object
    rows: object
    labels: Labels
    multiple_choice: bool
    loss: object
    is_eval: Optional[np.ndarray]
    backend: object
    tol: object
    position_bias: bool = False
    watch: Optional[InputWatch] = None
    center: Optional[np.ndarray] = None
    scale: Optional[DataScale] = None
    content_digest: Optional[str] = None
    solver: dict = field(default_factory=dict)

    @classmethod
    def open(cls, X, y, *, backend, loss="ce", loss_params=None, tol=1e-4, position_bias=False, column=None,
             eval_rows=None, items=True, min_per_class=2, loss_resolver=None):
        """Open X through ``backend``, encode y, the evaluation rows and the loss (a of the
        module docstring).  ``items=False`` refuses 3-D (multiple-choice) X as
        :func:`~aflite_fast.io.inputs.open_embeddings` does; ``loss_resolver(n_classes)``, when
        given, resolves the loss instead of ``loss`` and ``loss_params`` (the estimators' parameters)."""
        watch = InputWatch([("X", X)])
        X, rows = backend.open(X, column, items=items)
        labels, multiple_choice = problem_labels(X, y, position_bias, min_per_class)
        is_eval = eval_mask(eval_rows, X.shape[0])
        spec = (resolve_loss(loss, loss_params, labels.n_classes) if loss_resolver is None
                else loss_resolver(labels.n_classes))
        check_multiple_choice_loss(spec, multiple_choice)
        return cls(X=X, rows=rows, labels=labels, multiple_choice=multiple_choice, loss=spec, is_eval=is_eval,
                   backend=backend, tol=check_tol(tol), position_bias=bool(position_bias) and multiple_choice,
                   watch=watch)

    @property
    def n_rows(self):
        return int(self.X.shape[0])

    @property
    def n_features(self):
        return int(self.X.shape[-1])

    @property
    def n_trainable(self):
        """Rows that may be drawn into a training set (all but the evaluation rows)."""
        return self.n_rows if self.is_eval is None else self.n_rows - int(self.is_eval.sum())

    def check_phase_memory(self, n_partitions, train_size, budget, with_proba=False):
        """Refuse a phase on every row that ``budget`` cannot hold, before the scan (local backend;
        a sparse phase plans its groups of models itself: :mod:`aflite_fast.phase.sparse_local`)."""
        if is_sparse(self.X):
            return
        _, D, n_out = phase_shape(self.X, self.labels.n_classes, self.position_bias)
        self.backend.check_memory(self.n_rows, self.n_rows, n_partitions, train_size, D - 1, n_out, budget,
                                  with_proba)

    def scan(self, *, fingerprint=False, progress=None):
        """Scan the rows and check their scale (b of the module docstring); returns self."""
        row_shape = (int(np.prod(self.X.shape[:-1])), self.n_features)
        sparse = is_sparse(self.X)  # sparse X has its own fingerprint (io.sparse.sparse_digest)
        with (ContentHash(row_shape, self.X.dtype, self.backend.n_threads) if fingerprint and not sparse
              else nullcontext()) as content:
            self.center = self.backend.scan(self.rows, fingerprint=content, progress=progress).astype(np.float32)
        self.content_digest = None if content is None else content.hexdigest()
        if sparse and fingerprint:
            from aflite_fast.io.sparse import sparse_digest

            self.content_digest = sparse_digest(self.X)
        self.backend.check_scale(self.rows, self.center, TOL_MANY_ROWS if self.tol == "auto" else self.tol)
        # the scale is read (once) only when a model fails, to name the likely cause
        self.scale = DataScale(self.rows if self.backend.reads_rows else None, self.center)
        self.watch.check()
        return self

    def solver_arguments(self, *, C, max_iter, max_memory):
        """The solver's keyword arguments of every phase of this problem (set as :attr:`solver`)."""
        # the tolerance is each phase's (score() sets it: phase_tol)
        self.solver = dict(n_classes=self.labels.n_classes, C=C, loss=self.loss,
                           options=SolverOptions(max_iter=max_iter), max_memory=max_memory)
        if self.multiple_choice:
            self.solver["position_bias"] = self.position_bias
        return self.solver

    def train_positions(self, entropy, phase, active, train_size, n_partitions, groups=None):
        """Each partition's sorted training positions in ``active`` (c of the module docstring),
        drawn on the backend's threads (the same positions whatever their number)."""
        n_threads = getattr(self.backend, "n_threads", None)
        return train_positions(entropy, phase, active, self.is_eval, train_size, n_partitions, groups=groups,
                               n_threads=n_threads or 1)

    def score(self, codes, active, train_pos, *, warm_coef=None, proba_sum=None, what="partition model"):
        """One phase through the backend with the guards on its models (d of the module docstring).

        ``codes`` are the labels scored (the problem's, or a permutation of them); a phase with
        ``warm_coef`` None starts cold and must move its weights.
        """
        tol = self.phase_tol(train_pos.shape[1])
        solver = dict(self.solver, options=replace(self.solver["options"], tol=tol))
        res = self.backend.score_phase(self.X, codes, active, self.center, train_pos, warm_coef=warm_coef,
                                       proba_sum=proba_sum, **solver)
        self.check_models(res.coef, res.n_iter, res.status, lambda j: active[train_pos[j][train_pos[j] >= 0]],
                          what=what, cold=warm_coef is None, tol=tol)
        return res

    def phase_tol(self, train_size):
        """The solver's tolerance of a phase whose models train on ``train_size`` rows (items)."""
        return phase_tol(self.tol, train_size, phase_shape(self.X, self.labels.n_classes, self.position_bias)[1])

    def check_models(self, coef, n_iter, status, train_rows, *, what="model", cold=True, tol=None):
        """Refuse models that did not train (:func:`~aflite_fast.core.solver_status.check_trained`)
        and, when they started from zero and the backend can read rows, models whose weights never
        moved on rows with nothing to learn (:func:`~aflite_fast.core.degenerate.check_moved`;
        ``train_rows(j)``: the rows of X model j trained on; ``tol``: theirs, default the
        problem's for models on all rows)."""
        check_trained(n_iter, status, self.scale, what=what)
        if cold and self.backend.reads_rows:
            check_moved(coef, status, X=self.X, center=self.center, train_rows=train_rows,
                        tol=self.phase_tol(self.n_rows) if tol is None else tol, what=what)
