"""Bit identity of results: SHA-256 hashes of the outputs of fixed small runs, against stored ones.

Every public entry point is run on small fixed data (built here with numpy's ``default_rng``)
and each of its outputs (kept and removed rows, removal phases, scores, probabilities,
coefficients, intercepts, the history without its timings) is hashed: the array made
C-contiguous in a fixed little-endian dtype (float64 for floats, int64 for integers, bool for
masks), its dtype and shape hashed with its bytes.  The hashes are compared with those stored
in ``tests/data/bit_identity.json``, one test case per run, and a failure names the run and
every output that changed.  A change of the code that keeps every result bit for bit passes;
one that changes any bit of any output fails.

Runs: dense ``aflite`` (with the chance check), with ``groups=``, with fewer training rows than
columns (the row-space solver), with the permutation null
and ``stop="null"``, with ``eval_rows=``; ``predictability`` and ``RobustLogisticRegression``
with every loss of ``LOSS_NAMES`` (default loss parameters; ``forward`` needs its T) and with a
user loss; multiple-choice X; a run stopped after two phases with ``checkpoint=`` and resumed;
``oof_predict_proba`` by folds and by partitions; ``AFLite(...).fit_resample``;
``evaluate_filter``; ``aflite(..., backend="dask")`` on a two-process ``LocalCluster``.
Only public entry points are used (``aflite_fast``'s names and ``aflite_fast.synthetic``).

The filtering runs' outputs are discrete (rows, phases, counts, scores that are ratios of
counts), so a change of the models by a few ulps seldom shows in them; the models' own bits
show in the checkpoint's warm start (the mean model of a phase), ``prob_label``,
probabilities and coefficients, which change with one float32 ulp of the preconditioner.

Where the stored hashes hold
    Results depend on the inputs and ``random_state`` only, not on the thread count (these
    runs use ``N_JOBS`` threads; the generator's ``--n-jobs`` changes it).  The kernel's
    results are reproducible per instruction set, not across them (docs/ARCHITECTURE.md,
    "Determinism"): the floating-point outputs (coefficients, probabilities, ``prob_label``,
    the checkpoint's warm start) differ between its AVX-512, AVX2 and baseline paths.  So
    hashes are stored per instruction set, ``x86_64-avx512``, ``x86_64-avx2`` and
    ``x86_64-generic`` (``--write`` computes each, forcing it with ``AFLITE_FAST_ISA``), and a
    test compares with those of the instruction set the kernel uses here (:func:`kernel_isa`),
    or skips naming it when none are stored.
    The BLAS/LAPACK calls on these paths are the preconditioner's inverse
    (``numpy.linalg.inv``, float64, rounded to float32 before use) and the row-space solver's
    eigenvectors (``numpy.linalg.qr``/``eigh`` and float64 products, one thread).  Its float64 result differs
    between OpenBLAS kernels (``OPENBLAS_CORETYPE``), but no stored hash changed with
    ``OPENBLAS_CORETYPE=Haswell``, ``SkylakeX``, ``Sandybridge`` or ``Prescott``: the float32
    rounding absorbed the difference on these problems.  numpy's own dispatched kernels
    (``NPY_DISABLE_CPU_FEATURES`` down to its baseline) changed none either.  The user loss is
    compiled by Numba for the host CPU.

Regenerate the stored hashes (only when a change of results is intended, and say why in the
commit), from the repository's root with the kernel built in place::

    python tests/test_bit_identity.py --write

Compare without writing (prints each changed output; exit status 1 if any)::

    python tests/test_bit_identity.py [--n-jobs N] [--run NAME ...]

pytest never writes the file.
"""
import hashlib
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__" and any(f.startswith("_kernel.")
                                  for f in os.listdir(os.path.join(HERE, os.pardir, "aflite_fast"))):
    # run as a script: test the source tree when its kernel is built in place (as the root
    # conftest.py decides)
    sys.path.insert(0, os.path.dirname(HERE))
STORED = os.path.join(HERE, "data", "bit_identity.json")
#: Threads of every run (results do not depend on it; the generator's --n-jobs sets it).
N_JOBS = 2
#: History fields that measure the run rather than its result (time, memory blocks, traffic, the
#: Dask workers lost and the calls asked again because of them).
UNSTABLE_FIELDS = ("seconds", "null_seconds", "n_blocks", "bytes_moved", "workers_lost", "rounds_repeated")


# ---------------------------------------------------------------- hashing


def _array_hash(value):
    """SHA-256 of an array: dtype kind fixed (float64, int64 or bool, little-endian), C order,
    with its dtype and shape."""
    a = np.asarray(value)
    if a.dtype.kind == "f":
        a = a.astype("<f8")
    elif a.dtype.kind in "iu":
        a = a.astype("<i8")
    elif a.dtype.kind == "b":
        a = a.astype("|b1")
    else:
        raise TypeError(f"cannot hash an array of dtype {a.dtype}")
    a = np.ascontiguousarray(a)
    h = hashlib.sha256()
    h.update(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def _json_hash(value):
    """SHA-256 of a JSON document (sorted keys; floats written exactly by ``repr``)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=_plain).encode()).hexdigest()


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot hash {type(value).__name__}")


def _history(history):
    """The history's records (dicts) without the fields of :data:`UNSTABLE_FIELDS`."""
    out = []
    for h in history:
        record = {k: v for k, v in (h if isinstance(h, dict) else h.as_dict()).items() if k not in UNSTABLE_FIELDS}
        if record.get("chance"):
            record["chance"] = {k: v for k, v in record["chance"].items() if k not in UNSTABLE_FIELDS}
        out.append(record)
    return out


def _result(res):
    """The outputs of an AFLiteResult."""
    return dict(keep=res.keep, removed=res.removed, removed_phase=res.removed_phase, scores=res.scores,
                kept_per_class=res.kept_per_class, removed_per_class=res.removed_per_class,
                history=_history(res.history), stop_reason=res.stop_reason)


def _scores(res):
    """The outputs of a PredictabilityResult."""
    out = dict(scores=res.scores, prob_label=res.prob_label, correct=res.correct, seen=res.seen,
               n_iter=res.n_iter, status=res.status)
    if res.null_scores is not None:
        out["null_scores"] = res.null_scores
    return out


def _classifier(clf, X):
    """The outputs of a fitted RobustLogisticRegression, and its probabilities on X."""
    return dict(coef=clf.coef_, intercept=clf.intercept_, n_iter=clf.n_iter_, predict_proba=clf.predict_proba(X))


def hashes(outputs):
    """{output name: SHA-256} of one run's outputs (arrays; JSON for lists, dicts, strings)."""
    return {name: _json_hash(v) if isinstance(v, (list, dict, str)) else _array_hash(v)
            for name, v in sorted(outputs.items())}


# ---------------------------------------------------------------- data


def make_problem(seed, n, d, n_classes, signal=0.2):
    """Overlapping classes, feature variances falling like 1/k, a shared offset (embedding-like)."""
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % n_classes)
    scale = (1.0 + np.arange(d)) ** -0.5
    means = signal * rng.standard_normal((n_classes, d))
    X = (means[y] + rng.standard_normal((n, d))) * scale + 2.0 * rng.uniform(0.5, 1.5, size=d)
    return X.astype(np.float32), y.astype(np.int64)


def make_groups(seed, n, n_groups):
    return np.random.default_rng(seed).integers(0, n_groups, size=n)


# a user loss: generalized cross entropy L = (1 - p_y^q) / q, w = p_y^q
def _user_gce(p_y, params, w_out):
    q = params[0]
    pq = p_y ** q
    w_out[0] = pq
    return (1.0 - pq) / q


_USER_LOSS = None


def user_gce():
    """The user loss, compiled once (Numba) on first use."""
    global _USER_LOSS
    if _USER_LOSS is None:
        from aflite_fast import user_loss

        _USER_LOSS = user_loss(params={"q": 0.7}, name="user_gce")(_user_gce)
    return _USER_LOSS


#: Transition matrix of the "forward" loss on three classes (it has no default).
T3 = [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]
#: The parameters each built-in loss is run with beyond its defaults.
LOSS_PARAMS = {"forward": {"T": T3}}


# ---------------------------------------------------------------- runs

# aflite on 2400 rows of 32 features, 3 classes: 4 or more phases
AFLITE = dict(target_size=1200, n_partitions=12, train_size=0.5, slice_size=150, tau=0.75, progress=False)


def run_aflite_dense(ctx):
    from aflite_fast import aflite

    X, y = make_problem(10, 2400, 32, 3)
    return _result(aflite(X, y, random_state=11, n_jobs=ctx["n_jobs"], **AFLITE))


def run_aflite_groups(ctx):
    from aflite_fast import aflite

    X, y = make_problem(20, 2400, 32, 3)
    groups = make_groups(21, 2400, 900)
    return _result(aflite(X, y, groups=groups, random_state=22, n_jobs=ctx["n_jobs"], chance_check=False,
                          **AFLITE))


def run_aflite_null(ctx):
    from aflite_fast import aflite

    X, y = make_problem(30, 2400, 32, 3)
    return _result(aflite(X, y, null="permutation", n_null=3, stop="null", random_state=31, n_jobs=ctx["n_jobs"],
                          **AFLITE))


def run_aflite_eval_rows(ctx):
    from aflite_fast import aflite

    X, y = make_problem(40, 2400, 32, 3)
    dev = np.arange(2000, 2400)
    return _result(aflite(X, y, eval_rows=dev, eval_only_score=True, random_state=41, n_jobs=ctx["n_jobs"],
                          chance_check=False, **dict(AFLITE, target_size=1000)))


def run_aflite_float64_sce(ctx):
    """float64 X converted by the package, a robust loss and the random tie-break in the loop."""
    from aflite_fast import aflite

    X, y = make_problem(50, 2000, 16, 4)
    return _result(aflite(X.astype(np.float64), y, loss="sce", tie_break="random", random_state=51,
                          n_jobs=ctx["n_jobs"], chance_check=False, **dict(AFLITE, target_size=1000)))


def run_multiple_choice(ctx):
    from aflite_fast import aflite
    from aflite_fast.synthetic import make_multiple_choice

    data = make_multiple_choice(1600, n_candidates=4, n_spurious=6, random_state=60)
    res = aflite(data.X, data.y, target_size=800, n_partitions=12, train_size=0.5, slice_size=100, tau=0.75,
                 progress=False, random_state=61, n_jobs=ctx["n_jobs"], chance_check=False)
    return _result(res)


def run_multiple_choice_position_bias(ctx):
    from aflite_fast import predictability
    from aflite_fast.synthetic import make_multiple_choice

    data = make_multiple_choice(1600, n_candidates=4, n_spurious=6, random_state=62)
    return _scores(predictability(data.X, data.y, n_partitions=12, train_size=0.5, position_bias=True,
                                  random_state=63, n_jobs=ctx["n_jobs"]))


def run_checkpoint_resume(ctx):
    """A run stopped when its third phase ends (before that phase is saved) and resumed: the
    saved state of two phases and the resumed result.

    The run is stopped through its progress bar (``progress=True`` shows a tqdm bar, advanced
    once per phase): ``tqdm.update`` raises KeyboardInterrupt on its third call, as a Ctrl-C
    there would."""
    import tqdm.std

    from aflite_fast import aflite

    X, y = make_problem(70, 2400, 32, 3)
    path = os.path.join(ctx["tmp"], "bit_identity.ckpt.npz")
    if os.path.exists(path):
        os.remove(path)
    run = dict(AFLITE, progress=True, random_state=71, chance_check=False)
    calls = []

    def update(self, n=1):
        calls.append(n)
        if len(calls) == 3:
            raise KeyboardInterrupt

    original = tqdm.std.tqdm.update
    tqdm.std.tqdm.update = update
    try:
        aflite(X, y, checkpoint=path, n_jobs=ctx["n_jobs"], **run)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the run was not stopped: its progress bar did not advance once per phase")
    finally:
        tqdm.std.tqdm.update = original
    # the checkpoint (docs/curation.md): an .npz of the loop's arrays and a JSON header
    with np.load(path, allow_pickle=False) as saved:
        header = json.loads(saved["header"].tobytes().decode("utf-8"))
        state = {f"saved_{k}": saved[k] for k in ("active", "removed", "removed_phase", "scores", "warm_mean")}
    assert header["phase"] == 2, header["phase"]
    # resumed with another thread count, which never changes results
    resumed = aflite(X, y, checkpoint=path, n_jobs=1 if ctx["n_jobs"] != 1 else 2, **dict(run, progress=False))
    assert resumed.resumed_from == 2 and len(resumed.history) > 3, (resumed.resumed_from, len(resumed.history))
    return dict(_result(resumed), **state, saved_history=_history(header["history"]))


def run_predictability_groups_null(ctx):
    from aflite_fast import predictability

    X, y = make_problem(80, 2000, 24, 3)
    groups = make_groups(81, 2000, 700)
    return _scores(predictability(X, y, n_partitions=12, train_size=0.5, groups=groups, null="permutation",
                                  n_null=2, random_state=82, n_jobs=ctx["n_jobs"]))


def run_predictability_eval_rows(ctx):
    from aflite_fast import predictability

    X, y = make_problem(83, 2000, 24, 2)
    return _scores(predictability(X, y, n_partitions=12, train_size=600, eval_rows=np.arange(0, 2000, 5),
                                  random_state=84, n_jobs=ctx["n_jobs"]))


def _predictability_loss(loss):
    def run(ctx):
        from aflite_fast import predictability

        X, y = make_problem(90, 1500, 16, 3)
        loss_params = None if loss == "user" else LOSS_PARAMS.get(loss)
        return _scores(predictability(X, y, n_partitions=8, train_size=0.5,
                                      loss=user_gce() if loss == "user" else loss, loss_params=loss_params,
                                      random_state=91, n_jobs=ctx["n_jobs"]))
    return run


def _classifier_loss(loss):
    def run(ctx):
        from aflite_fast import RobustLogisticRegression

        X, y = make_problem(92, 1500, 16, 3)
        params = {} if loss == "user" else LOSS_PARAMS.get(loss, {})
        clf = RobustLogisticRegression(loss=user_gce() if loss == "user" else loss, n_jobs=ctx["n_jobs"],
                                       **params).fit(X[:1000], y[:1000])
        return _classifier(clf, X[1000:])
    return run


def run_classifier_binary(ctx):
    from aflite_fast import RobustLogisticRegression

    X, y = make_problem(93, 1500, 48, 2, signal=0.4)
    labels = np.array(["neg", "pos"])[y]
    clf = RobustLogisticRegression(C=0.5, n_jobs=ctx["n_jobs"]).fit(X[:1000], labels[:1000])
    return _classifier(clf, X[1000:])


def run_oof_folds(ctx):
    from aflite_fast import oof_predict_proba

    X, y = make_problem(100, 2000, 32, 4)
    return dict(proba=oof_predict_proba(X, y, cv=5, random_state=101, n_jobs=ctx["n_jobs"]))


def run_oof_partitions_groups(ctx):
    from aflite_fast import oof_predict_proba

    X, y = make_problem(102, 2000, 32, 3)
    groups = make_groups(103, 2000, 800)
    return dict(proba=oof_predict_proba(X, y, n_partitions=16, train_size=0.5, groups=groups, random_state=104,
                                        n_jobs=ctx["n_jobs"]))


def run_estimator_fit_resample(ctx):
    from aflite_fast import AFLite

    X, y = make_problem(110, 2400, 32, 3)
    groups = make_groups(111, 2400, 900)
    est = AFLite(target_size=1200, n_partitions=12, train_size=0.5, slice_size=150, tau=0.6, remove="group",
                 random_state=112, n_jobs=ctx["n_jobs"], chance_check=False)
    X_kept, y_kept = est.fit_resample(X, y, groups=groups)
    return dict(sample_indices=est.sample_indices_, predictability=est.predictability_, X_kept=X_kept,
                y_kept=y_kept, history=_history(est.history_))


def run_evaluate_filter(ctx):
    from aflite_fast import aflite, evaluate_filter

    X, y = make_problem(120, 1500, 16, 3)
    res = aflite(X, y, target_size=900, n_partitions=8, train_size=0.5, slice_size=150, tau=0.6, progress=False,
                 random_state=121, n_jobs=ctx["n_jobs"])
    ev = evaluate_filter(X, y, res.keep, result=res, features=X[:, ::-2] ** 2, cv=3, n_random=2,
                         random_state=122, n_jobs=ctx["n_jobs"])
    fields = ("full_balanced_accuracy", "kept_balanced_accuracy", "random_balanced_accuracy",
              "random_balanced_accuracy_std", "full_accuracy", "kept_accuracy", "random_accuracy",
              "random_accuracy_std", "full_majority_rate", "kept_majority_rate", "random_majority_rate", "drop")
    return dict(keep=res.keep,
                figures=np.array([getattr(ev, f) for f in fields]),
                features_figures=np.array([getattr(ev.features, f) for f in fields]),
                decision=dict(clear_drop=bool(ev.clear_drop), features_clear_drop=bool(ev.features.clear_drop),
                              verdict=ev.verdict, class_counts=ev.class_counts, n_rows=ev.n_rows, n_kept=ev.n_kept,
                              chance={k: v for k, v in (ev.chance or {}).items() if k not in UNSTABLE_FIELDS}))


def run_dask(ctx):
    """``aflite(..., backend="dask")`` on a LocalCluster of two worker processes, X in uneven
    chunks: the problem and parameters of ``aflite_dense``, so its hashes are that run's (the
    Dask backend gives the local result bit for bit)."""
    import dask.array as da

    from aflite_fast import aflite

    X, y = make_problem(10, 2400, 32, 3)
    res = aflite(da.from_array(X, chunks=(700, 32)), y, backend="dask", client=ctx["client"](), random_state=11,
                 n_jobs=1, **AFLITE)
    return _result(res)


def run_aflite_row_space(ctx):
    """Fewer training rows than columns (t = 200 down to 125 < d + 1 = 301): the row-space
    solver, whole pairs as groups."""
    from aflite_fast import aflite

    X, y = make_problem(60, 400, 300, 2)
    return _result(aflite(X, y, groups=np.arange(400) // 2, random_state=61, n_jobs=ctx["n_jobs"],
                          chance_check=False, **dict(AFLITE, target_size=250, slice_size=25, tau=0.0)))


def run_predictability_row_space(ctx):
    """The row-space solver's models, through their held-out probabilities (prob_label)."""
    from aflite_fast import predictability

    X, y = make_problem(62, 400, 300, 3)
    return _scores(predictability(X, y, n_partitions=12, train_size=0.5, random_state=63, n_jobs=ctx["n_jobs"]))


def _runs():
    from aflite_fast import LOSS_NAMES

    runs = {
        "aflite_dense": run_aflite_dense,
        "aflite_groups": run_aflite_groups,
        "aflite_null_stop": run_aflite_null,
        "aflite_eval_rows": run_aflite_eval_rows,
        "aflite_float64_sce_random_ties": run_aflite_float64_sce,
        "aflite_row_space": run_aflite_row_space,
        "predictability_row_space": run_predictability_row_space,
        "multiple_choice": run_multiple_choice,
        "multiple_choice_position_bias": run_multiple_choice_position_bias,
        "checkpoint_resume": run_checkpoint_resume,
        "predictability_groups_null": run_predictability_groups_null,
        "predictability_eval_rows": run_predictability_eval_rows,
    }
    for loss in (*LOSS_NAMES, "user"):
        runs[f"predictability_loss_{loss}"] = _predictability_loss(loss)
    for loss in (*LOSS_NAMES, "user"):
        runs[f"classifier_loss_{loss}"] = _classifier_loss(loss)
    runs.update({
        "classifier_binary": run_classifier_binary,
        "oof_folds": run_oof_folds,
        "oof_partitions_groups": run_oof_partitions_groups,
        "estimator_fit_resample": run_estimator_fit_resample,
        "evaluate_filter": run_evaluate_filter,
        "dask_local_cluster": run_dask,
    })
    return runs


RUNS = _runs()


def load_stored():
    with open(STORED, encoding="utf-8") as fh:
        return json.load(fh)


def kernel_isa():
    """The kernel's instruction set here, as ``machine-isa`` (e.g. ``x86_64-avx512``), or None
    when it cannot be told.

    The kernel picks it when first used (``csrc/afl_gemm.c``): on x86-64, AVX-512 when the CPU
    has AVX-512F and AVX-512VL, else AVX2 when it has AVX2 and FMA, else the baseline
    ("generic"); ``AFLITE_FAST_ISA`` starting with "g" forces the baseline, and "avx2" (an "a"
    with a "2" fourth) rules out AVX-512.  This applies that rule to the CPU flags of
    ``/proc/cpuinfo``.  Other machines run the baseline, compiled for them, whose results are
    their own."""
    import platform

    machine = platform.machine().lower()
    machine = {"amd64": "x86_64"}.get(machine, machine)
    if machine != "x86_64":
        return f"{machine}-generic"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            flags = next(set(line.split(":", 1)[1].split()) for line in fh if line.startswith("flags"))
    except (OSError, StopIteration):
        return None
    force = os.environ.get("AFLITE_FAST_ISA", "")
    avx512 = {"avx512f", "avx512vl"} <= flags
    avx2 = {"avx2", "fma"} <= flags
    if force[:1] == "g":
        avx512 = avx2 = False
    if force[:1] == "a" and force[3:4] == "2":
        avx512 = False
    return f"{machine}-{'avx512' if avx512 else 'avx2' if avx2 else 'generic'}"


def environment():
    """What the hashes were computed with (recorded in the stored file, for the reader)."""
    import platform

    from threadpoolctl import threadpool_info

    import aflite_fast

    blas = sorted({f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')}"
                   for i in threadpool_info() if i.get("user_api") == "blas"})
    return dict(aflite_fast=aflite_fast.__version__, numpy=np.__version__, python=platform.python_version(),
                blas=blas, kernel_isa=kernel_isa(), AFLITE_FAST_ISA=os.environ.get("AFLITE_FAST_ISA"))


def differences(stored, computed):
    """Lines naming each output whose hash differs (or that is new or gone)."""
    lines = []
    for name in sorted(set(stored) | set(computed)):
        if name not in computed:
            lines.append(f"{name}: stored, no longer computed")
        elif name not in stored:
            lines.append(f"{name}: computed, not stored")
        elif stored[name] != computed[name]:
            lines.append(f"{name}: {stored[name][:16]}... stored, {computed[name][:16]}... now")
    return lines


# ---------------------------------------------------------------- pytest


@pytest.fixture(scope="module")
def stored_hashes():
    """The stored hashes of the kernel's instruction set here (skips when none are stored)."""
    isa = kernel_isa()
    if isa is None:
        pytest.skip("cannot tell the kernel's instruction set on this machine (no /proc/cpuinfo flags)")
    by_isa = load_stored()["hashes"]
    if isa not in by_isa:
        pytest.skip(f"no hashes stored for the kernel's instruction set {isa} (stored: {', '.join(sorted(by_isa))}); "
                    "results are reproducible per instruction set")
    return by_isa[isa]


@pytest.fixture(scope="module")
def dask_cluster():
    distributed = pytest.importorskip("distributed")
    pytest.importorskip("dask.array")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        yield client


@pytest.mark.parametrize("name", sorted(RUNS))
def test_bit_identity(name, stored_hashes, request, tmp_path):
    assert name in stored_hashes, (f"run {name!r} has no stored hashes: regenerate {os.path.relpath(STORED)} "
                                   "with `python tests/test_bit_identity.py --write`")
    ctx = dict(n_jobs=N_JOBS, tmp=str(tmp_path), client=lambda: request.getfixturevalue("dask_cluster"))
    changed = differences(stored_hashes[name], hashes(RUNS[name](ctx)))
    assert not changed, f"run {name}: outputs not bit for bit the stored ones:\n  " + "\n  ".join(changed)


def test_stored_runs_are_these_runs():
    """Every instruction set's stored runs are this file's runs: none is left unchecked."""
    for isa, runs in load_stored()["hashes"].items():
        assert sorted(runs) == sorted(RUNS), isa


# ---------------------------------------------------------------- generator

#: ``AFLITE_FAST_ISA`` values ``--write`` runs under (None: the kernel's own choice).
WRITE_ISAS = (None, "avx2", "generic")


def compute(names, n_jobs):
    """{run: {output: hash}} of the runs ``names``, in this process (a LocalCluster for the
    Dask run, started when first needed)."""
    import tempfile
    import time

    cluster = {}

    def client():
        if "client" not in cluster:
            import distributed

            cluster["cluster"] = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                                          dashboard_address=None)
            cluster["client"] = distributed.Client(cluster["cluster"])
        return cluster["client"]

    computed = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name in names:
                start = time.perf_counter()
                computed[name] = hashes(RUNS[name](dict(n_jobs=n_jobs, tmp=tmp, client=client)))
                print(f"{name}: {time.perf_counter() - start:.2f} s", file=sys.stderr)
    finally:
        if cluster:
            cluster["client"].close()
            cluster["cluster"].close()
    return computed


def _own_report():
    """The kernel's own name of its instruction set, when the build exposes it (a check of
    :func:`kernel_isa` at write time only; None when it does not)."""
    try:
        from aflite_fast import _kernel

        return _kernel.gemm_isa()
    except (ImportError, AttributeError):
        return None


def write(n_jobs):
    """Compute every run under each of :data:`WRITE_ISAS` (a child process each, since the
    kernel picks its instruction set once) and write :data:`STORED`."""
    import subprocess
    import tempfile

    by_isa, envs = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for force in WRITE_ISAS:
            env = {k: v for k, v in os.environ.items() if k != "AFLITE_FAST_ISA"}
            if force is not None:
                env["AFLITE_FAST_ISA"] = force
            out = os.path.join(tmp, f"{force}.json")
            subprocess.run([sys.executable, os.path.abspath(__file__), "--json", out, "--no-compare",
                            "--n-jobs", str(n_jobs)], env=env, check=True)
            with open(out, encoding="utf-8") as fh:
                child = json.load(fh)
            isa, own = child["environment"]["kernel_isa"], child["environment"].pop("kernel_reports")
            if isa is None:
                raise SystemExit("cannot tell the kernel's instruction set on this machine: nothing written")
            if own is not None and not isa.endswith(f"-{own}"):
                raise SystemExit(f"AFLITE_FAST_ISA={force}: the kernel reports {own}, the rule of kernel_isa() "
                                 f"gives {isa}: fix kernel_isa(); nothing written")
            if isa in by_isa and by_isa[isa] != child["hashes"]:
                raise SystemExit(f"two runs on {isa} gave different hashes: nothing written")
            by_isa[isa], envs[isa] = child["hashes"], child["environment"]
    machine = next(iter(by_isa)).split("-")[0]
    possible = [f"{machine}-{name}" for name in ("avx512", "avx2", "generic")] if machine == "x86_64" else []
    missing = sorted(set(possible) - set(by_isa))
    if missing:
        print(f"this machine cannot run {', '.join(missing)}: no hashes stored for it", file=sys.stderr)
    os.makedirs(os.path.dirname(STORED), exist_ok=True)
    with open(STORED, "w", encoding="utf-8") as fh:
        json.dump(dict(about="SHA-256 of the outputs of the runs of tests/test_bit_identity.py, per instruction set "
                             "of the kernel; regenerate with `python tests/test_bit_identity.py --write`",
                       environment=envs, hashes=by_isa), fh, indent=1, sort_keys=True)
        fh.write("\n")
    print(f"wrote {STORED}: {', '.join(sorted(by_isa))}", file=sys.stderr)


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description="Compute the bit-identity hashes and compare them with the "
                                                 "stored ones of this machine's instruction set, or (--write) "
                                                 "store them for every instruction set this machine runs.")
    parser.add_argument("--write", action="store_true", help=f"write {STORED}")
    parser.add_argument("--n-jobs", type=int, default=N_JOBS, help="threads of every run")
    parser.add_argument("--run", action="append", help="only this run (repeatable; not with --write)")
    parser.add_argument("--json", help="write the computed hashes and the environment to this file")
    parser.add_argument("--no-compare", action="store_true", help="do not compare with the stored hashes")
    args = parser.parse_args(argv)
    if args.write and (args.run or args.json or args.no_compare):
        parser.error("--write computes and stores every run: not with --run, --json or --no-compare")
    if args.write:
        write(args.n_jobs)
        return 0
    names = args.run or sorted(RUNS)
    unknown = sorted(set(names) - set(RUNS))
    if unknown:
        parser.error(f"unknown run(s) {unknown}; runs: {', '.join(sorted(RUNS))}")
    computed = compute(names, args.n_jobs)
    env = dict(environment(), n_jobs=args.n_jobs, kernel_reports=_own_report())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(dict(environment=env, hashes=computed), fh, indent=1, sort_keys=True)
    if args.no_compare:
        return 0
    isa = env["kernel_isa"]
    stored = load_stored()["hashes"].get(isa) if os.path.exists(STORED) else None
    if stored is None:
        print(f"no stored hashes for {isa}: nothing compared", file=sys.stderr)
        return 1
    status = 0
    for name in names:
        changed = differences(stored.get(name, {}), computed[name])
        print(f"{name}: {'same' if not changed else 'CHANGED'}")
        for line in changed:
            print(f"  {line}")
        status |= bool(changed)
    return status


if __name__ == "__main__":
    sys.exit(main())
