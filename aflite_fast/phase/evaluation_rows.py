"""Evaluation rows: rows every partition model predicts and none trains on.

A dev or test split filtered "with the same models" as the training split (as the
multiple-choice benchmarks built by adversarial filtering were) must never be a training row:
otherwise a model would be scored on rows it saw.  ``eval_rows`` marks such rows.  In every
phase the partitions draw their training rows from the *training-eligible* active rows (the
active rows that are not evaluation rows) only, so every active evaluation row is held out by
all ``n_partitions`` models of the phase (``seen == n_partitions``).  ``train_size`` counts
training-eligible active rows (a fraction is a share of them).  Evaluation rows are scored as
any other row; they are removed by the same rule unless ``eval_only_score=True``.

Partitions are keyed by row (:mod:`aflite_fast.phase.partitions`): an eligible row has the key
it has in a run without evaluation rows, and without evaluation rows the draws are those of a
run without the argument.
"""
import numbers

import numpy as np

from aflite_fast.phase.partitions import TRAIN_PAD, partition_train_positions


def eval_mask(eval_rows, n_rows):
    """Boolean mask (N,) of the evaluation rows, from indices or a boolean mask (None: None).

    Raises
    ------
    ValueError
        For a mask of another length, indices out of range (negative ones included: they do
        not count from the end) or repeated, non-integer indices, or evaluation rows that
        leave fewer than two rows to train on.
    """
    if eval_rows is None:
        return None
    e = np.asarray(eval_rows)
    if e.ndim != 1:
        raise ValueError(f"eval_rows must be 1-D (row indices or a boolean mask), got shape {e.shape}")
    if e.dtype == bool:
        if e.shape[0] != n_rows:
            raise ValueError(f"eval_rows is a boolean mask of {e.shape[0]} entries but X has {n_rows} rows")
        mask = e.copy()
    else:
        if e.size and not (e.dtype.kind in "iu" or all(isinstance(v, numbers.Integral) for v in e.tolist())):
            raise ValueError(f"eval_rows must hold integer row indices or be a boolean mask, got dtype {e.dtype}")
        e = e.astype(np.int64)
        if e.size and e.min() < 0:
            raise ValueError(f"eval_rows holds the negative index {int(e.min())}; row indices count from 0 (a "
                             "negative one does not count from the end here): give indices in [0, "
                             f"{n_rows - 1}]")
        if e.size and e.max() >= n_rows:
            raise ValueError(f"eval_rows holds index {int(e.max())}, out of range for {n_rows} rows")
        if np.unique(e).size != e.size:
            _refuse_repeats(e, n_rows)
        mask = np.zeros(n_rows, dtype=bool)
        mask[e] = True
    if n_rows - int(mask.sum()) < 2:
        raise ValueError(f"eval_rows marks {int(mask.sum())} of {n_rows} rows: fewer than two rows are left "
                         "to train on")
    return mask


def _refuse_repeats(e, n_rows):
    """Raise for row indices ``e`` that name a row more than once, saying so in the words of a
    mask when ``e`` looks like one (only 0s and 1s, one per row)."""
    if e.size == n_rows and np.isin(e, (0, 1)).all():
        raise ValueError(f"eval_rows holds {n_rows} values of 0 and 1, one per row: a mask of integers, read as "
                         "row indices naming rows 0 and 1 more than once; give the mask as booleans "
                         "(mask.astype(bool))")
    values, counts = np.unique(e, return_counts=True)
    raise ValueError(f"eval_rows holds row index {int(values[counts > 1][0])} more than once")


def eligible_positions(active, is_eval):
    """Positions (in the active set) of the training-eligible active rows (all without
    evaluation rows)."""
    if is_eval is None:
        return np.arange(active.size, dtype=np.int64)
    return np.flatnonzero(~is_eval[active]).astype(np.int64)


def train_positions(entropy, phase, active, is_eval, train_size, n_partitions, groups=None, n_threads=1):
    """Training positions (in the active set) of every partition of a phase, drawn among the
    training-eligible active rows only (:func:`aflite_fast.phase.partitions.partition_train_positions`
    over them, mapped back to active positions: still sorted, padded with ``TRAIN_PAD``).

    ``active`` holds the active rows' indices in X (their ids: their keys do not depend on which
    other rows are active or eligible), ``groups`` the group code of every active position;
    ``n_threads`` threads draw the partitions (the same positions whatever the number)."""
    if is_eval is None:
        return partition_train_positions(entropy, phase, active.size, train_size, n_partitions, groups=groups,
                                         row_ids=active, n_threads=n_threads)
    eligible = eligible_positions(active, is_eval)
    pos = partition_train_positions(entropy, phase, eligible.size, train_size, n_partitions,
                                    groups=None if groups is None else groups[eligible], row_ids=active[eligible],
                                    n_threads=n_threads)
    out = np.full(pos.shape, TRAIN_PAD, dtype=np.int64)
    taken = pos != TRAIN_PAD
    out[taken] = eligible[pos[taken]]
    return out


def fingerprint(mask):
    """What a checkpoint records of the evaluation rows: their count and a SHA-256 of the mask."""
    import hashlib

    return {"n_eval": int(mask.sum()), "sha256": hashlib.sha256(np.packbits(mask).tobytes()).hexdigest()}
