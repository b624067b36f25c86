"""The AFLite filtering loop (Le Bras et al., ICML 2020, Algorithm 1).

While more than ``target_size`` rows remain, each phase trains ``n_partitions`` linear
models on random training sets of ``train_size`` active rows and predicts every other
active row.  A row's predictability score is (correct held-out predictions) / (held-out
predictions).  Up to ``slice_size`` rows with the highest scores among those scoring at
least ``tau`` are removed; if fewer than ``slice_size`` rows reach ``tau``, those are removed
and filtering stops (Algorithm 1).  It never removes below ``target_size``.

With ``groups`` every partition trains on whole groups (see :mod:`aflite_fast.phase.groups`), and
``remove="group"`` removes a group together when its mean score reaches ``tau``.  With
``checkpoint`` the loop's state is saved after every phase and a run given the same
checkpoint continues from it (see :mod:`aflite_fast.filtering.checkpoint`).  With
``null="permutation"`` every phase also scores its partitions with the labels permuted
``n_null`` times and records how many rows reach tau by chance; ``stop="null"`` stops when
the observed count does not exceed that (see :mod:`aflite_fast.filtering.null`).
"""
import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
from tqdm.auto import tqdm

from aflite_fast.core.solver import check_tol
from aflite_fast.core.solver_status import status_counts, total_status, warn_not_converged
from aflite_fast.filtering.chance import N_PERMUTATIONS, ChanceCheck, warn_if_chance
from aflite_fast.filtering.checkpoint import Checkpoint, LoopState, data_fingerprint
from aflite_fast.filtering.curation import (
    DEFAULT_MARGIN,
    SeedEnsemble,
    apply_quotas,
    chance_verdict,
    check_curation_args,
    probe,
)
from aflite_fast.filtering.modes import REMOVE_MODES, TIE_BREAKS
from aflite_fast.filtering.null import check_null_args, null_counts, summarize
from aflite_fast.filtering.problem import Problem, validate_settings
from aflite_fast.filtering.selection import phase_selection, tie_key
from aflite_fast.filtering.views import ViewSet, view_record
from aflite_fast.io.watch import describe
from aflite_fast.phase.backends import ClusterLost, make_backend
from aflite_fast.phase.evaluation_rows import eligible_positions
from aflite_fast.phase.evaluation_rows import fingerprint as eval_fingerprint
from aflite_fast.phase.groups import check_group_train_size, partition_groups
from aflite_fast.phase.partitions import seed_entropy
from aflite_fast.runtime.memory import parse_memory

#: Equal-width bins over [0, 1] of the per-phase score histogram (``PhaseRecord.score_hist``).
SCORE_BINS = 20


@dataclass
class PhaseRecord:
    """What one phase did.

    ``n_above_tau`` counts the rows that could be removed (with ``remove="group"``: the rows
    of the groups whose mean score reaches tau).  ``score_hist`` counts this phase's scores
    (rows held out at least once) in :data:`SCORE_BINS` equal bins over [0, 1] (the last bin
    holds 1.0).  ``class_active`` and ``class_removed`` count rows per class (in the order of
    ``AFLiteResult.classes``) active at the start of the phase and removed by it.

    With ``null="permutation"`` (else empty or None): ``null_above_tau`` holds the rows at or
    above tau (counted as ``n_above_tau`` is) under each of the ``n_null`` label permutations,
    ``null_mean`` and ``null_std`` their mean and standard deviation (None for one
    permutation), ``null_share`` the mean's share of ``n_active``, ``null_excess`` the observed
    ``n_above_tau`` minus ``null_mean``, ``null_margin`` the excess ``stop="null"`` asks for
    (:func:`aflite_fast.filtering.null.summarize`) and ``null_seconds`` the part of ``seconds`` spent on
    the null.

    ``solver_status`` counts the phase's (observed) partition models by solver status
    (``kernel.STATUS_NAMES``), every name present.

    ``bytes_moved``: bytes sent between processes by the phase (null passes included):
    ``backend="dask"`` counts the arrays it sends each way (docs/dask.md), the local engine 0.
    ``chance`` (phase 0 only, with the chance check on): :meth:`aflite_fast.filtering.chance.ChanceCheck.as_dict`.

    With ``stop="chance"``: ``probe``, the phase's models' held-out balanced accuracy on its
    active rows, chance and the margin (:func:`aflite_fast.filtering.curation.probe`), and
    ``n_put_back``, the rows of the phase before put back because the probe fell below chance by
    more than the margin.  With ``sources``: ``source_removed``, rows of each source removed.
    With ``views``: ``views``, each view's own record of the phase ({name: {n_above_tau, n_scored,
    mean_iterations, solver_status, score_hist}, plus null_above_tau, null_mean, null_std and
    null_margin with the null, and chance in phase 0}: :mod:`aflite_fast.filtering.views`).  These four are left out of :meth:`as_dict`
    when not recorded.

    ``workers_lost`` and ``rounds_repeated`` (``backend="dask"``; 0 for the local engine): the
    cluster's workers lost during the phase (null passes included), whose rows went to the other
    workers, and the calls to the workers (solver rounds, predictions, preconditioners) asked
    again because of it; the phase's results are those of an uninterrupted run (docs/dask.md).
    """

    phase: int
    n_active: int
    train_size: int
    n_scored: int
    n_above_tau: int
    n_removed: int
    n_blocks: int
    mean_iterations: float
    seconds: float
    score_hist: List[int] = field(default_factory=list)
    class_active: List[int] = field(default_factory=list)
    class_removed: List[int] = field(default_factory=list)
    null_above_tau: List[int] = field(default_factory=list)
    null_mean: Optional[float] = None
    null_std: Optional[float] = None
    null_share: Optional[float] = None
    null_excess: Optional[float] = None
    null_margin: Optional[float] = None
    null_seconds: float = 0.0
    solver_status: dict = field(default_factory=dict)
    bytes_moved: int = 0
    chance: Optional[dict] = None
    probe: Optional[dict] = None
    n_put_back: int = 0
    source_removed: List[int] = field(default_factory=list)
    workers_lost: int = 0
    rounds_repeated: int = 0
    views: dict = field(default_factory=dict)

    def as_dict(self):
        out = dict(self.__dict__)
        for name in _OPTIONAL_FIELDS:  # absent when not recorded: the history of other runs is unchanged
            if not out[name]:
                del out[name]
        return out


#: Fields of PhaseRecord that only some runs record (``stop="chance"``, ``sources``, ``views``).
_OPTIONAL_FIELDS = ("probe", "n_put_back", "source_removed", "views")


@dataclass
class AFLiteResult:
    """Result of :func:`aflite`.

    Attributes
    ----------
    keep : ndarray of int64
        Sorted indices of the rows kept.
    removed : ndarray of int64
        Indices of the removed rows, in removal order (most predictable first in each phase).
    removed_phase : ndarray of int64
        Phase (0-based) in which each entry of ``removed`` was removed.
    scores : ndarray of float64
        Each row's predictability in the last phase it took part in; NaN where never scored.
    history : list of PhaseRecord
        One record per phase.
    classes : ndarray
        The distinct labels, in the order of the label codes.
    stop_reason : str
        Why filtering stopped.
    kept_per_class, removed_per_class : ndarray of int64
        Rows of each class (in the order of ``classes``) kept and removed.
    resumed_from : int
        Phase the run continued from when it resumed a checkpoint (0 for a fresh run).
    chance : ChanceCheck or None
        Phase 0's rows at or above tau against label permutations (:mod:`aflite_fast.filtering.chance`);
        None with ``chance_check=False``.
    fingerprint : str or None
        SHA-256 fingerprint of X's content (64 hex digits, :class:`aflite_fast.io.fingerprint.
        ContentHash`): the same for the same values in any format, byte order or chunking, so
        that what was filtered can be recognised later (``aflite-fast evaluate`` compares it).
    sources : ndarray or None
        With ``sources``: the distinct source ids, in the order of ``kept_per_source`` and
        ``removed_per_source`` (rows of each source kept and removed).
    ensemble : SeedEnsemble or None
        With ``n_seeds`` > 1: the runs of every seed (this result is the first's), their kept
        sets' pairwise Jaccard index, each row's removal frequency and the consensus keep
        (:class:`aflite_fast.filtering.curation.SeedEnsemble`).
    views : list of str or None
        With ``views``: the views' names, in order (``scores`` is then the combined score).
    view_scores : dict or None
        With ``views``: {name: each row's score from that view alone in the last phase it took
        part in (NaN where never scored)}.
    view_chance : dict or None
        With ``views`` and the chance check: {name: that view's :class:`ChanceCheck` of phase 0}.
    combine : str or None
        With ``views``: how the views' scores were combined (``"max"`` or ``"mean"``).
    """

    keep: np.ndarray
    removed: np.ndarray
    removed_phase: np.ndarray
    scores: np.ndarray
    history: List[PhaseRecord] = field(default_factory=list)
    classes: np.ndarray = None
    stop_reason: str = ""
    kept_per_class: np.ndarray = None
    removed_per_class: np.ndarray = None
    resumed_from: int = 0
    chance: Optional[ChanceCheck] = None
    fingerprint: Optional[str] = None
    sources: Optional[np.ndarray] = None
    kept_per_source: Optional[np.ndarray] = None
    removed_per_source: Optional[np.ndarray] = None
    ensemble: Optional[SeedEnsemble] = None
    views: Optional[List[str]] = None
    view_scores: Optional[dict] = None
    view_chance: Optional[dict] = None
    combine: Optional[str] = None

    def view_history(self, name):
        """The per-phase records of view ``name`` (``history[p].views[name]`` of every phase)."""
        if not self.views or name not in self.views:
            raise ValueError(f"no view named {name!r}; the run's views are {self.views}")
        return [h.views[name] for h in self.history]

    @property
    def keep_mask(self):
        """Boolean mask over all rows, True where kept."""
        mask = np.zeros(self.scores.shape[0], dtype=bool)
        mask[self.keep] = True
        return mask

    def keep_at(self, n):
        """The rows kept at size ``n``, read off the removal order: every row but the first
        N - n of ``removed``.

        For ``n`` between ``keep.size`` and the input's rows.  Rows leave in ``removed``'s
        order, so with the row rule and no quotas this is the ``keep`` of the same run given
        ``target_size=n`` (its phases are these up to the one that reaches n, which takes the
        first rows of this run's ranking).

        Returns
        -------
        ndarray of int64
            Sorted row indices.
        """
        n_rows = self.scores.shape[0]
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not self.keep.size <= n <= n_rows:
            raise ValueError(f"keep_at: n must be an integer in [{self.keep.size}, {n_rows}] (the kept rows "
                             f"and the input's), got {n!r}")
        mask = np.ones(n_rows, dtype=bool)
        mask[self.removed[:n_rows - int(n)]] = False
        return np.flatnonzero(mask).astype(np.int64)


def _run_parameters(settings, spec, entropy, tol, max_iter, remove, null, n_null, stop, is_eval=None,
                    eval_only_score=False, position_bias=None, tie_break="label_prob", curation=None):
    """What a checkpoint must agree on: every setting that changes the result (the null's and the
    evaluation rows' only when given, so checkpoints of runs without them stay valid)."""
    params = dict(target_size=settings.target_size, n_partitions=settings.n_partitions,
                  train_size=settings.train_size, slice_size=settings.slice_size, tau=settings.tau,
                  C=settings.C, loss=spec.name, loss_code=int(spec.code), loss_params=spec.params.tolist(),
                  tol=check_tol(tol), max_iter=int(max_iter), seed=int(entropy), remove=remove)
    if null is not None:
        params.update(null=null, n_null=int(n_null), stop=stop)
    if is_eval is not None:
        params.update(eval_rows=eval_fingerprint(is_eval), eval_only_score=bool(eval_only_score))
    if position_bias is not None:  # multiple choice
        params.update(position_bias=bool(position_bias))
    params.update(tie_break=tie_break)
    if curation is not None:
        params.update(curation.parameters())
    return params


@dataclass
class _Curation:
    """The curation keywords of a run, checked (:func:`aflite_fast.filtering.curation.check_curation_args`)."""

    margin: float = DEFAULT_MARGIN
    cap: Optional[int] = None
    class_quota: Optional[str] = None
    source_quota: Optional[float] = None
    sources: object = None  # SourceCodes
    stop: str = "paper"
    max_removed: object = None

    def parameters(self):
        """What a checkpoint records of them: only what is not the default."""
        out = {}
        if self.stop == "chance":
            out.update(stop="chance", margin=self.margin)
        if self.max_removed is not None:
            out.update(max_removed=self.max_removed)
        if self.class_quota is not None:
            out.update(class_quota=self.class_quota)
        if self.source_quota is not None:
            out.update(source_quota=float(self.source_quota))
        if self.sources is not None:
            out.update(sources=hashlib.sha256(np.ascontiguousarray(self.sources.codes, dtype="<i8").tobytes())
                       .hexdigest())
        return out


def aflite(X, y, *, target_size, n_partitions=64, train_size, slice_size=500, tau=0.75, C=1.0,
           loss="ce", loss_params=None, max_memory=None, random_state=None, n_jobs=None,
           progress=True, tol="auto", max_iter=1000, backend="local", client=None, groups=None,
           remove="row", checkpoint=None, null=None, n_null=1, stop="paper", eval_rows=None,
           eval_only_score=False, position_bias=False, chance_check=True, tie_break="label_prob",
           column=None, margin=DEFAULT_MARGIN, max_removed=None, class_quota=None, sources=None,
           source_quota=None, n_seeds=1, views=None, combine="max"):
    """Filter the most predictable rows of (X, y) with AFLite.

    Parameters
    ----------
    X : ndarray, numpy.memmap or path to a ``.npy``/``.npz`` file (``FILE.npz:KEY``), shape (N, d) or (N, K, d)
        Embeddings, float16/32/64 or integers, either byte order (see
        :func:`aflite_fast.io.inputs.open_embeddings`).  Memory maps are read in chunks, never copied whole.
        A 3-D X is multiple choice: N items of K candidate answers each (see
        :mod:`aflite_fast.phase.multiple_choice`); an item is a row of the algorithm, and each
        partition model a linear scorer of candidates trained with the softmax over an item's
        candidates.
    y : array-like of shape (N,)
        Labels of any sortable type; mapped to codes 0..C-1.  For multiple choice: the right
        candidate of each item, an integer in 0..K-1.
    target_size : int
        n: filtering never leaves fewer rows than this.
    n_partitions : int, default=64
        m: random partitions (linear models) per phase.
    train_size : int or float
        t: training rows per partition.  A float in (0, 1) is a fraction of the rows
        active in each phase.
    slice_size : int, default=500
        k: rows removed per phase at most.
    tau : float, default=0.75
        Early-stopping threshold on the predictability score, in [0, 1].
    C : float, default=1.0
        Inverse L2 strength of the linear models (scikit-learn's meaning).
    loss : str, default="ce"
        Training loss (see :data:`aflite_fast.core.losses.LOSS_NAMES`); ``loss_params`` its parameters.
    max_memory : int or str, optional
        Budget for training rows and prediction chunks, e.g. ``"2GB"``; default a quarter of
        physical memory.  It changes speed and memory, never results.
    random_state : None, int or numpy.random.Generator
        Seeds every partition; the result depends on inputs and this only.  With None and an
        existing ``checkpoint``, the checkpoint's seed is used.
    n_jobs : int, optional
        Threads (None: all cores).  Results do not depend on it.
    progress : bool, default=True
        Show a tqdm progress bar.
    tol : float or "auto", default="auto"
        Stopping rule of each model's L-BFGS: max |gradient| <= tol.  ``"auto"`` sets each
        phase's from its sizes (:func:`aflite_fast.core.solver.phase_tol`): 3e-4 where the
        models train on at least as many rows as X has columns (features and the ones column),
        1e-4 where on fewer (there a model separates its rows and its optimum is flat: at 3e-4
        0.4-1.2% of its held-out predictions differed from a tightly converged model's, at 1e-4
        0.04-0.4%; 1e-4 is scikit-learn's default).  3e-4 is the loosest tolerance that moved the kept set
        no further from that of ``tol=1e-6`` than a flipped label does (benchmarks/RESULTS.md,
        "Kept sets keyed by row" and "Agreement with tight fits"); 1e-3 moved it further.
    max_iter : int, default=1000
        Most L-BFGS iterations of a model.
    backend : {"local", "dask"} or a backend object, default="local"
        Where each phase is scored (:mod:`aflite_fast.phase.backends`).  ``"dask"`` scores
        each phase on a dask.distributed cluster (:class:`~aflite_fast.phase.backends.DaskBackend`,
        or one from ``DaskBackend.connect(address)``): X (a dask array, a ``.npy``/``.zarr``
        path, a list of ``.npy`` shards, a memmap, or a
        :class:`~aflite_fast.phase.dask_backend.DaskEmbeddings`) stays on the workers; the loop and
        the result are the same as with ``"local"``.  ``n_jobs`` is then the kernel threads
        per task (None: each worker's thread count).  See docs/dask.md.
    client : distributed.Client, optional
        The cluster of ``backend="dask"`` (default: the current client).
    groups : array-like of shape (N,), optional
        A group id per row (any sortable type).  Every partition then trains on whole groups,
        so the rows of a group are all trained on or all held out: groups in the order of a
        random key of (seed, phase, partition, group) are taken until the training set holds at least t rows,
        i.e. t to t + s - 1 rows for a last group of s rows.  Groups are those of the active
        rows in each phase.  Needs t <= (active rows) - (largest group); when a later phase
        breaks that, filtering stops.
    remove : {"row", "group"}, default="row"
        ``"group"`` (needs ``groups``) removes whole groups whose mean score reaches tau,
        most predictable first, as many as fit in the slice (see
        :func:`aflite_fast.phase.groups.select_groups`).
    checkpoint : str or os.PathLike, optional
        A file where the state is saved (atomically) after every phase.  If it exists, the run
        continues from it and gives the result of an uninterrupted run; a checkpoint of other
        parameters or data (a fingerprint of every row of X, computed by the validation scan) is
        a ValueError naming what differs, and is left untouched.  See docs/curation.md.
    null : {None, "permutation"}, default=None
        ``"permutation"``: every phase scores its own partitions ``n_null`` more times, each
        with the active rows' labels permuted (class counts kept; with ``groups``, groups of
        one size exchange their labels whole), and records in its PhaseRecord how many rows
        reach tau by chance (``null_above_tau``, ``null_mean``, ``null_std``, ``null_share``,
        ``null_excess``, ``null_margin``).  Each permutation costs about one more phase; the
        null models start cold, so the observed result (keep, removed, scores) is bitwise that
        of a run without the null unless ``stop`` uses it.  See docs/null.md and
        :mod:`aflite_fast.filtering.null`.
    n_null : int, default=1
        Permutations per phase.  The stop rule needs a spread: with one permutation only the
        Poisson floor ``sqrt(mean)`` is known, which real scores exceed (docs/null.md); use 3
        or more with ``stop="null"``.
    stop : {"paper", "null", "both", "chance"}, default="paper"
        ``"paper"``: stop after the first phase where fewer than ``slice_size`` rows reach tau
        (those are removed; Algorithm 1).  ``"null"`` (needs ``null``): stop at the first phase
        whose rows at or above tau do not exceed the null's mean by its margin
        (``3 * max(std, sqrt(mean)) * sqrt(1 + 1/n_null)``); that phase removes nothing, the
        "fewer than k" rule is not applied.  ``"both"``: whichever comes first.
        ``"chance"``: stop at the first phase whose models' held-out balanced accuracy on the
        active rows (from the phase's own predictions) is within ``margin`` of chance (1 / the
        classes); that phase removes nothing.  When it is below chance by more than ``margin``
        the run stops too and the slice of the phase before is put back.  The "fewer than k"
        rule is not applied; a phase where no row reaches tau ends the run.  Each phase records
        the probe (``history[p].probe``).  See :mod:`aflite_fast.filtering.curation`.
    eval_rows : array-like of int (row indices) or of bool (a mask of N), optional
        Evaluation rows (e.g. a dev or test split): never drawn into any partition's training
        set, so every model of every phase predicts each active one (``seen`` equals
        ``n_partitions``); they are scored as every row is.  ``train_size`` then counts the
        training-eligible active rows (the other active rows; a fraction is a share of them).
        See :mod:`aflite_fast.phase.evaluation_rows`.
    eval_only_score : bool, default=False
        With ``eval_rows``: score the evaluation rows but never remove them; ``target_size``
        and ``slice_size`` then count the other rows only.
    position_bias : bool, default=False
        Multiple choice only: each scorer also learns a bias per candidate position (not
        penalised), so that an answer-position artifact is learnable.
    column : str, optional
        When X is the path of a table (a Hugging Face dataset or ``.arrow`` file, a Parquet file
        or directory): its embedding column (see docs/formats.md and
        :func:`aflite_fast.io.inputs.open_embeddings`).
    chance_check : bool, default=True
        Score phase 0's partitions again under 3 label permutations (the null's, reused when
        ``null="permutation"`` already scores as many) and record in ``result.chance`` whether
        phase 0's rows at or above tau exceed the permuted count by the margin of
        ``stop="null"``; when they do not (and ``stop="paper"``), warn with
        :class:`aflite_fast.ChanceWarning`.  It costs about 3 cold-started phase-0 scorings and
        never changes what is removed (see :mod:`aflite_fast.filtering.chance`, docs/evaluation.md).
    tie_break : {"label_prob", "random"}, default="label_prob"
        The order of rows of equal score within a phase (which of them fit in the slice):
        ``"label_prob"``: higher mean held-out probability of the row's label first, then lower
        row position; ``"random"``: a random key of the row drawn from ``random_state``, the
        phase and the row's index in X (then lower position).  With ``remove="group"`` it
        orders groups of equal mean score the same way.  ``"label_prob"`` is the default: where
        many rows tie at the top score it takes the most confidently predicted first, the
        strongest cues, and so removed 99% of a planted cue before ``stop="chance"`` ended the
        run, against 25-29% in a random order; with ``stop="null"`` on the paper's synthetic
        rings it kept a biased share of 0.37-0.48 against 0.43-0.66.  The random order did
        better only with the paper's stop on those rings (0.33-0.34 against 0.37-0.38), and
        both rules moved the kept set alike under a change of the arithmetic
        (benchmarks/RESULTS.md, "Kept sets keyed by row").
    margin : float, default=0.02
        ``stop="chance"``: the distance from chance of a balanced accuracy that counts as chance.
    max_removed : int or float, optional
        A cap on the rows removed, whatever the stop rule: an int is a count, a float in (0, 1) a
        fraction of the input's rows (rounded down).  A phase's slice is cut to what is left.
    class_quota : {None, "prior"}, default=None
        ``"prior"``: every phase removes from each class in proportion, so that the active rows
        keep the input's label distribution (within a row per class): the most rows up to the
        slice for which each class has enough rows at or above tau, each class its own most
        predictable ones.  Row rule only.
    sources : array-like of shape (N,), optional
        A source id per row (any sortable type): the result and the report count rows kept and
        removed per source.
    source_quota : float in [0, 1], optional
        With ``sources``: no source loses more than this share of its input rows (rounded down);
        rows of a source at its cap are passed over.  Row rule only.
    n_seeds : int, default=1
        Run this many seeds on one scan of the input: ``random_state`` (an int s) and s + 1, ...,
        s + n_seeds - 1 (a Generator or None: one drawn seed and the ones after it).  The result
        is the first seed's; ``result.ensemble`` holds every run, the pairwise Jaccard index of
        their kept sets, each row's removal frequency and the consensus keep (rows kept by at
        least half).  Not with ``checkpoint``.
    views : dict {name: X}, optional
        Several representations of the same rows (each an array, a memory map, a path as X is,
        or ``(table path, column)``; all 2-D, or all multiple choice with the same candidates):
        every view's m models train on the same partitions of each phase, each row gets a score
        per view and a combined score (``combine``), and the loop selects on the combined one.
        X may then be None; when given it is the view ``"X"`` (with ``column``).  With one view
        the result is that of the run on its X alone.  ``result.view_scores``,
        ``result.view_history(name)`` and ``result.view_chance`` hold each view's own.  Not with
        ``checkpoint`` or ``stop="chance"``.  See :mod:`aflite_fast.filtering.views` and docs/text.md.
    combine : {"max", "mean"}, default="max"
        With ``views``: a row's combined score is the largest of its views' scores (predictable
        by any view) or their mean.

    Returns
    -------
    AFLiteResult

    Raises
    ------
    ValueError
        For inconsistent inputs: X not 2-D, NaN/inf in X, lengths differ, a single class,
        a class with fewer than two rows, ``train_size`` >= rows, ``tau`` outside [0, 1], bad
        ``groups`` (length, NaN, a single group, groups too large for ``train_size``), a
        checkpoint of another run, a file behind X that changed during the run (checked at every
        phase boundary: :mod:`aflite_fast.io.watch`; no checkpoint is saved for that phase), ...
        Also when a partition's model did not move from its starting point (no solver step
        and not converged), or did not converge on X whose values are too large for the
        float32 solver (e.g. float32 rows scaled by 1e12): the message names the likely
        cause; such models are never reported (null models included).  Degenerate inputs
        (:mod:`aflite_fast.degenerate`): X with no variance, X whose largest deviation from its
        column means is at most ``tol`` (rows scaled by 1e-12, subnormal values), a singular or
        not row-stochastic forward-correction T, and cold-started models whose weights are all
        still zero after training whatever the solver status says: each would make the run
        filter by class prior.

    Warns
    -----
    aflite_fast.ChanceWarning
        When the chance check finds phase 0's rows at or above tau within what permuted labels
        give (see ``chance_check``).
    sklearn.exceptions.ConvergenceWarning
        When any partition's model stopped without converging (max_iter, a failed line
        search, a non-finite value); ``history[i].solver_status`` counts them per phase.
    """
    if views is None:
        if combine != "max":
            raise ValueError(f"combine={combine!r} applies to views; give views={{name: X, ...}}")
        backend = make_backend(backend, client, n_jobs)
        problem = Problem.open(X, y, backend=backend, loss=loss, loss_params=loss_params, tol=tol,
                               position_bias=position_bias, column=column, eval_rows=eval_rows)
    else:
        problem = _open_views(X, y, views, combine, backend=backend, client=client, n_jobs=n_jobs, loss=loss,
                              loss_params=loss_params, tol=tol, position_bias=position_bias, column=column,
                              eval_rows=eval_rows, checkpoint=checkpoint, stop=stop)
    if eval_only_score and problem.is_eval is None:
        raise ValueError("eval_only_score=True needs eval_rows")
    settings = validate_settings(problem.n_trainable, target_size=target_size, n_partitions=n_partitions,
                                 train_size=train_size, slice_size=slice_size, tau=tau, C=C,
                                 n_eval=problem.n_rows - problem.n_trainable)
    if remove not in REMOVE_MODES:
        raise ValueError(f"remove must be 'row' or 'group', got {remove!r}")
    if remove == "group" and groups is None:
        raise ValueError("remove='group' needs groups (a group id per row)")
    n_null = check_null_args(null, n_null, stop)
    margin, cap, source_codes = check_curation_args(stop, margin, max_removed, class_quota, source_quota, sources,
                                                    problem.n_rows, remove)
    curation = _Curation(margin=margin, cap=cap, class_quota=class_quota, source_quota=source_quota,
                         sources=source_codes, stop=stop, max_removed=max_removed)
    if isinstance(n_seeds, bool) or not isinstance(n_seeds, (int, np.integer)) or n_seeds < 1:
        raise ValueError(f"n_seeds must be an integer >= 1, got {n_seeds!r}")
    if n_seeds > 1 and checkpoint is not None:
        raise ValueError("n_seeds > 1 cannot be combined with checkpoint (one checkpoint holds one run)")
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"tie_break must be one of {', '.join(map(repr, TIE_BREAKS))}, got {tie_break!r}")
    group_codes = partition_groups(groups, problem.n_rows, settings.train_rows(problem.n_trainable), problem.is_eval)
    store = None if checkpoint is None else Checkpoint(checkpoint)
    if random_state is None and store is not None and store.saved_seed is not None:
        entropy = int(store.saved_seed)
    else:
        entropy = seed_entropy(random_state)
    problem.solver_arguments(C=settings.C, max_iter=max_iter, max_memory=max_memory)
    # fail early on a bad budget string, and on a phase the budget cannot hold (before allocating it)
    problem.check_phase_memory(settings.n_partitions, settings.train_rows(problem.n_rows), parse_memory(max_memory))
    # the fingerprint of every row (the result records it, a checkpoint checks it), computed by
    # the scan as it reads them
    problem.scan(fingerprint=True)
    if n_seeds > 1:  # the scan above serves every seed
        runs = [_Loop(problem, settings, entropy + i, group_codes, eval_only_score, remove, null, n_null, stop,
                      chance_check, tie_break, curation).run(_fresh_state(problem.n_rows), [], None, progress)
                for i in range(int(n_seeds))]
        runs[0].ensemble = SeedEnsemble.of([entropy + i for i in range(int(n_seeds))], runs, problem.n_rows)
        return runs[0]
    loop = _Loop(problem, settings, entropy, group_codes, eval_only_score, remove, null, n_null, stop, chance_check,
                 tie_break, curation)
    state = None
    if store is not None:
        state = store.start(_run_parameters(settings, problem.loss, entropy, tol, max_iter, remove, null, n_null,
                                            stop, problem.is_eval, eval_only_score,
                                            position_bias if problem.multiple_choice else None, tie_break,
                                            curation),
                            data_fingerprint(problem.X, problem.labels.codes, problem.labels.classes, group_codes,
                                             content=problem.content_digest),
                            x_source=f"X ({describe(problem.watch.files)})")
    if state is None:
        state = _fresh_state(problem.n_rows)
    try:
        history = [PhaseRecord(**record) for record in state.history]
    except TypeError as exc:  # a checkpoint of another version, whose records have other fields
        raise ValueError(f"checkpoint {os.fspath(checkpoint)!r}: its phase records do not fit this version "
                         f"of aflite_fast ({exc}); give another checkpoint path") from None
    return loop.run(state, history, store, progress)


def _open_views(X, y, views, combine, *, backend, client, n_jobs, column, checkpoint, stop, **open_kwargs):
    """The :class:`~aflite_fast.filtering.views.ViewSet` of ``aflite(..., views=)``: every view
    opened and checked as X is, the same rows in each."""
    from aflite_fast.filtering.views import ViewSet, check_views, open_views

    views = check_views(X, views, combine)
    if column is not None and X is None:
        raise ValueError("column= is the table column of X; give a view's column as views={name: (path, column)}")
    if checkpoint is not None:
        raise ValueError("checkpoint cannot be combined with views (a checkpoint holds the models of one X)")
    if stop == "chance":
        raise ValueError("stop='chance' cannot be combined with views (its probe reads one view's predictions); "
                         "use stop='paper', 'null' or 'both'")
    problems = open_views(views, y, backend=backend, client=client, n_jobs=n_jobs,
                          columns=None if column is None else {"X": column}, **open_kwargs)
    return ViewSet(problems, combine)


def _fresh_state(n_rows):
    """The loop's state before its first phase."""
    return LoopState(phase=0, active=np.arange(n_rows, dtype=np.int64), removed=np.empty(0, dtype=np.int64),
                     removed_phase=np.empty(0, dtype=np.int64), scores=np.full(n_rows, np.nan))


class _Loop:
    """The phases of one run: each draws its partitions, scores them through the problem's
    backend, removes a slice and records what it did (:meth:`phase`); :meth:`run` repeats it
    until a stop rule ends the run, saving a checkpoint after every phase."""

    def __init__(self, problem, settings, entropy, group_codes, eval_only_score, remove, null, n_null, stop,
                 chance_check, tie_break, curation):
        self.problem, self.settings, self.entropy = problem, settings, entropy
        self.group_codes, self.eval_only_score = group_codes, eval_only_score
        self.remove, self.null, self.n_null, self.stop = remove, null, n_null, stop
        self.chance_check, self.tie_break = chance_check, tie_break
        self.curation = curation
        self.views = problem.names if isinstance(problem, ViewSet) else None
        self.view_scores = None
        codes = problem.labels.codes
        self.prior_counts = np.bincount(codes, minlength=problem.labels.n_classes)
        sources = curation.sources
        if curation.source_quota is not None:  # each source's cap on its removed rows
            self.source_cap = np.floor(curation.source_quota * sources.counts()).astype(np.int64)

    def removable_count(self, active):
        """Rows of ``active`` the loop may remove (``eval_only_score``: the evaluation rows stay)."""
        if not self.eval_only_score:
            return active.size
        return active.size - int(np.count_nonzero(self.problem.is_eval[active]))

    def run(self, state, history, store, progress):
        problem, settings = self.problem, self.settings
        active, scores, phase = state.active, state.scores, state.phase
        if self.views is not None:  # each view's own scores of the rows (NaN where never scored)
            self.view_scores = {name: np.full(problem.n_rows, np.nan) for name in self.views}
        removed, removed_phase = [state.removed], [state.removed_phase]
        # Next phase's partitions are new random subsets: every one of them starts from the mean
        # of the last phase's models (close to the full-data optimum), which took about 9% fewer
        # L-BFGS steps than starting partition j from its predecessor.
        warm_mean = state.warm_mean
        ended = state.stop_reason  # why the last phase ended the run, if it did
        stop_reason = ended or "target_size reached"
        bar = tqdm(total=max(0, problem.n_rows - settings.target_size), initial=int(state.removed.size),
                   disable=not progress, unit="row", desc="AFLite", leave=True)
        try:
            while ended is None and self.removable_count(active) > settings.target_size:
                eligible = eligible_positions(active, problem.is_eval)
                t = settings.train_rows(eligible.size)
                if t >= eligible.size:
                    which = "active rows" if problem.is_eval is None else "training-eligible active rows"
                    stop_reason = f"train_size ({t}) reached the number of {which} ({eligible.size})"
                    break
                active_groups = None if self.group_codes is None else self.group_codes[active]
                too_large = None if active_groups is None else check_group_train_size(active_groups[eligible], t)
                if too_large:
                    stop_reason = f"groups: {too_large}"
                    break
                cap = self.curation.cap
                if cap is not None and problem.n_rows - active.size >= cap:
                    stop_reason = f"max_removed: {cap} rows removed"
                    break
                try:
                    record, chosen, warm_mean, ended, n_eligible, null_mean, put_back = self.phase(
                        phase, active, eligible, t, active_groups, warm_mean, scores)
                except ClusterLost as exc:
                    raise ClusterLost(f"{exc}, in phase {phase}; {self._resume_note(store, phase)}") from None
                removed.append(active[chosen])
                removed_phase.append(np.full(chosen.size, phase, dtype=np.int64))
                keep_pos = np.ones(active.size, dtype=bool)
                keep_pos[chosen] = False
                active = active[keep_pos]
                bar.update(int(chosen.size))
                if put_back and phase > 0:  # stop="chance" below chance: the last slice goes back
                    all_removed, all_phases = np.concatenate(removed), np.concatenate(removed_phase)
                    last = all_phases == phase - 1
                    record.n_put_back = int(np.count_nonzero(last))
                    active = np.sort(np.concatenate([active, all_removed[last]]))
                    removed, removed_phase = [all_removed[~last]], [all_phases[~last]]
                    bar.update(-record.n_put_back)
                history.append(record)
                # strings: tqdm would print a round number of rows as 1e+4
                workers_lost = sum(h.workers_lost for h in history)
                bar.set_postfix(phase=str(phase), active=str(active.size), above_tau=str(n_eligible),
                                **({} if null_mean is None else {"null": f"{null_mean:.1f}"}),
                                # the cluster's workers lost so far (their rows moved to others)
                                **({"workers_lost": str(workers_lost)} if workers_lost else {}))
                phase += 1
                problem.watch.check()  # before a checkpoint keeps a phase that may have read changed rows
                if store is not None:
                    store.save(LoopState(phase=phase, active=active, removed=np.concatenate(removed),
                                         removed_phase=np.concatenate(removed_phase), scores=scores,
                                         warm_mean=warm_mean, history=[h.as_dict() for h in history],
                                         stop_reason=ended))
                if ended is not None:
                    stop_reason = ended
        finally:
            bar.close()
        return self.result(active, np.concatenate(removed), np.concatenate(removed_phase), scores, history,
                           stop_reason, state.phase)

    @staticmethod
    def _resume_note(store, phase):
        """What a run stopped in ``phase`` keeps: how to resume it."""
        if store is None:
            return "no checkpoint was given, so a rerun starts from phase 0 (a checkpoint keeps finished phases)"
        if phase == 0:
            return f"checkpoint {os.fspath(store.path)!r} holds no finished phase yet; a rerun starts from phase 0"
        return (f"checkpoint {os.fspath(store.path)!r} holds phases 0..{phase - 1}: the same call with it resumes "
                f"from phase {phase}")

    def phase(self, phase, active, eligible, t, active_groups, warm_mean, scores):
        """One phase on ``active``: partitions, the checked scoring, the slice removed (within the
        cap and the quotas), the null, the chance check and the probe.  Writes the phase's scores
        into ``scores``; returns (record, chosen positions, the models' mean, why the run ends or
        None, rows at or above tau, the null's mean, whether the last slice is to be put back)."""
        problem, settings = self.problem, self.settings
        start = time.perf_counter()
        failures = problem.backend.failures()
        train_pos = problem.train_positions(self.entropy, phase, active, t, settings.n_partitions, active_groups)
        removable = eligible if self.eval_only_score else None
        warm = _warm_start(warm_mean, settings.n_partitions)
        # untrained models' votes are noise: never reported (ValueError naming the cause)
        res = problem.score(problem.labels.codes, active, train_pos, warm_coef=warm)
        warm_mean = res.mean_model()
        scores[active] = res.scores
        views = {}
        if self.views is not None:  # each view on its own, counted as the combined scores are
            for name, view in res.views.items():
                self.view_scores[name][active] = view.scores
                n_view = phase_selection(view, active_groups, self.remove, settings.tau, 0, removable)[1]
                views[name] = view_record(view, n_view, SCORE_BINS)
        budget = min(settings.slice_size, self.removable_count(active) - settings.target_size)
        curation, codes = self.curation, problem.labels.codes
        if curation.cap is not None:
            budget = min(budget, curation.cap - (problem.n_rows - active.size))
        key = tie_key(self.tie_break, self.entropy, phase, res.seen, active)
        quotas = curation.class_quota is not None or curation.source_quota is not None
        # with quotas: the whole ranking of the rows at or above tau, then the quotas take from it
        chosen, n_eligible = phase_selection(res, active_groups, self.remove, settings.tau,
                                             active.size if quotas else budget, removable, key)
        if quotas:
            chosen = self.quota_selection(chosen, active, budget)
        probe_record = None
        if self.stop == "chance":
            probe_record = probe(res.seen, res.correct, codes[active], problem.labels.n_classes, curation.margin)
        observed = dict(n_scored=int(np.count_nonzero(res.seen)), n_blocks=res.n_blocks,
                        mean_iterations=float(res.n_iter.mean()), solver_status=status_counts(res.status),
                        bytes_moved=problem.backend.bytes_moved(res),
                        score_hist=np.histogram(res.scores[res.seen > 0], bins=SCORE_BINS,
                                                range=(0.0, 1.0))[0].tolist())
        del res  # the null passes reuse the backend's memory budget
        null_record, by_chance, summary = {}, False, None
        view_null = {name: [] for name in views}  # each view's counts under the same permutations
        if self.null is not None:
            null_start = time.perf_counter()
            counts, null_bytes = null_counts(problem, active, train_pos, self.entropy, phase, self.n_null,
                                             active_groups, self.remove, settings.tau, removable,
                                             per_view=view_null)
            for name in views:
                view_summary = summarize(view_null[name])
                views[name].update(null_above_tau=view_summary.counts, null_mean=view_summary.mean,
                                   null_std=view_summary.std, null_margin=view_summary.margin)
            summary = summarize(counts)
            observed["bytes_moved"] += null_bytes
            null_record = dict(null_above_tau=summary.counts, null_mean=summary.mean, null_std=summary.std,
                               null_share=summary.mean / active.size, null_excess=n_eligible - summary.mean,
                               null_margin=summary.margin, null_seconds=time.perf_counter() - null_start)
            by_chance = self.stop in ("null", "both") and summary.within(n_eligible)
            if by_chance:  # no more rows reach tau than chance gives: none of them goes
                chosen = chosen[:0]
        if self.chance_check and phase == 0:  # aflite_fast.filtering.chance
            chance_start, counts = time.perf_counter(), list(summary.counts) if summary is not None else []
            if len(counts) < N_PERMUTATIONS:  # the null's first permutations are the check's
                more, more_bytes = null_counts(problem, active, train_pos, self.entropy, phase, N_PERMUTATIONS,
                                               active_groups, self.remove, settings.tau, removable,
                                               first=len(counts), per_view=view_null)
                counts += more
                observed["bytes_moved"] += more_bytes
            seconds = time.perf_counter() - chance_start
            null_record["chance"] = ChanceCheck.from_counts(active.size, settings.tau, n_eligible, counts,
                                                            seconds).as_dict()
            for name in views:
                views[name]["chance"] = ChanceCheck.from_counts(active.size, settings.tau, views[name]["n_above_tau"],
                                                                view_null[name], seconds).as_dict()
        verdict = None if probe_record is None else chance_verdict(probe_record)
        if verdict is not None:  # the probe is at chance (or below): nothing more goes
            chosen = chosen[:0]
        sources = curation.sources
        if sources is not None:
            null_record["source_removed"] = sources.counts(active[chosen]).tolist()
        after = problem.backend.failures()
        observed.update((key, after[key] - failures[key]) for key in ("workers_lost", "rounds_repeated"))
        record = PhaseRecord(
            phase=phase, n_active=int(active.size), train_size=t, n_above_tau=int(n_eligible),
            n_removed=int(chosen.size), seconds=time.perf_counter() - start, **observed,
            class_active=np.bincount(codes[active], minlength=problem.labels.n_classes).tolist(),
            class_removed=np.bincount(codes[active[chosen]], minlength=problem.labels.n_classes).tolist(),
            probe=probe_record, views=views, **null_record)
        ended = None
        if verdict is not None:
            where = "within" if verdict == "chance" else "below chance by more than"
            ended = (f"the phase's held-out balanced accuracy ({probe_record['balanced_accuracy']:.3f}) is {where} "
                     f"margin={curation.margin:g} of chance ({probe_record['chance']:.3f})"
                     + ("; the last slice was put back" if verdict == "below" and phase > 0 else ""))
        elif by_chance:
            ended = (f"the {n_eligible} rows at or above tau={settings.tau} do not exceed the permutation "
                     f"null ({summary.mean:.1f}, mean of {self.n_null}) by its margin ({summary.margin:.1f})")
        elif self.stop in ("paper", "both") and n_eligible < settings.slice_size:
            ended = f"fewer than slice_size={settings.slice_size} rows reached tau={settings.tau}"
        elif chosen.size == 0 and n_eligible == 0:  # stop="chance" or "null"
            ended = f"no row reached tau={settings.tau}"
        elif chosen.size == 0 and self.remove == "group":  # no eligible group fits in the budget
            ended = (f"the groups that reached tau={settings.tau} are all larger than the "
                     f"{budget} rows left to remove in this phase")
        elif chosen.size == 0:  # the quotas leave nothing of the rows that reached tau
            ended = (f"the quotas (class_quota={curation.class_quota!r}, source_quota={curation.source_quota!r}) "
                     f"leave none of the {n_eligible} rows at or above tau={settings.tau} to remove")
        return (record, chosen, warm_mean, ended, n_eligible, None if summary is None else summary.mean,
                verdict == "below")

    def quota_selection(self, ranking, active, budget):
        """The rows of ``ranking`` (positions, best first) the quotas let go, at most ``budget``
        (:func:`aflite_fast.filtering.curation.apply_quotas`)."""
        curation, codes = self.curation, self.problem.labels.codes
        kwargs = {}
        if curation.class_quota is not None:
            kwargs.update(class_codes=codes[active], prior_counts=self.prior_counts,
                          active_class_counts=np.bincount(codes[active], minlength=self.prior_counts.size))
        if curation.source_quota is not None:
            sources = curation.sources
            already = sources.counts() - sources.counts(active)  # removed so far, per source
            kwargs.update(source_codes=sources.codes[active], source_allowance=self.source_cap - already)
        return apply_quotas(ranking, budget, **kwargs)

    def result(self, active, removed, removed_phase, scores, history, stop_reason, resumed_from):
        labels = self.problem.labels
        # stacklevel: the warnings name the line that called aflite (result <- run <- aflite <- caller)
        warn_not_converged(total_status(h.solver_status for h in history), what="partition model", stacklevel=5)
        chance = ChanceCheck.from_dict(history[0].chance) if history else None
        warn_if_chance(chance, self.stop, stacklevel=5)
        sources = self.curation.sources
        per_source = {} if sources is None else dict(
            sources=sources.ids, kept_per_source=sources.counts(active).astype(np.int64),
            removed_per_source=sources.counts(removed).astype(np.int64))
        return AFLiteResult(
            keep=active, removed=removed, removed_phase=removed_phase, scores=scores,
            history=history, classes=labels.classes, stop_reason=stop_reason,
            kept_per_class=np.bincount(labels.codes[active], minlength=labels.n_classes).astype(np.int64),
            removed_per_class=np.bincount(labels.codes[removed], minlength=labels.n_classes).astype(np.int64),
            resumed_from=resumed_from, chance=chance, fingerprint=self.problem.content_digest, **per_source,
            **self.view_results(history))

    def view_results(self, history):
        """The result's fields of a run with views (none without)."""
        if self.views is None:
            return {}
        chance = {name: ChanceCheck.from_dict(history[0].views[name]["chance"]) for name in self.views
                  if history and "chance" in history[0].views.get(name, {})}
        return dict(views=list(self.views), view_scores=self.view_scores, view_chance=chance or None,
                    combine=self.problem.combine)


def _warm_start(warm_mean, n_partitions):
    """Every partition's starting weights: the last phase's mean model (one per view with views)."""
    if warm_mean is None:
        return None
    if isinstance(warm_mean, list):
        return [np.repeat(w[None], n_partitions, axis=0) for w in warm_mean]
    return np.repeat(warm_mean[None], n_partitions, axis=0)


