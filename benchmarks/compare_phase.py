"""Time aflite_fast against the plain scikit-learn implementation in ONE run; print a markdown table.

The one-phase comparison: one filtering phase at N=20000, d=768, C=3, m=64, t=10000 on skewed,
embedding-like data (``skewed_data.py``), against one ``sklearn.linear_model.LogisticRegression``
per partition in a Python loop (``baseline.py``), on exactly the same partitions (the package's
own sampler); and a full multi-phase run (the package warm-starts each phase from the last).

The machine is shared and noisy, so both sides are measured in the same process, interleaved
(ours, baseline, ours, baseline, ...) with ``--repeat`` rounds; the table gives the median of
each side and the ratio of the medians. BLAS threads are capped at ``--threads`` for the
baseline (scikit-learn's lbfgs uses NumPy/SciPy BLAS) and the package gets ``n_jobs=--threads``.

The one-phase comparison also times "scikit-learn tuned" (``baseline.tuned_phase``: what a
skilled user sets up: float32 rows, ``--threads`` worker processes started once before timing
(``peers.PeerPool``, X in shared memory) fitting all m partitions in parallel, one BLAS thread
each), interleaved with the other two, and gives ours / floor
(the floor: per model and evaluation two products of t x (d+1) x C, plus prediction
N x (d+1) x (m C), at the best GEMM rate measured in the same run: NumPy's float32 matmul,
i.e. OpenBLAS sgemm, or the package's GEMM).

The baseline's full run costs one cold phase (minutes) per phase. ``--baseline-phases P`` runs
only its first P phases (on its own trajectory, same sampler); the table then says so, gives
the measured seconds for those P phases, and an *estimate* of the full baseline run as the mean
measured seconds per baseline phase times the number of phases the package's run took (a cold
phase costs about the same whatever |S|, as t is fixed). Agreement is then reported for those P
phases only.

Examples::

    python benchmarks/compare_phase.py --phases-only --repeat 3
    python benchmarks/compare_phase.py --full --baseline-phases 2
    python benchmarks/compare_phase.py --n 4000 --d 128 --m 16 --t 2000 --target-size 2400 \\
        --slice-size 200            # a quick smoke run
"""

import argparse
import inspect
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))

from baseline import baseline_aflite, baseline_phase, package_partition_sampler, tuned_phase  # noqa: E402
from skewed_data import make_skewed_embeddings  # noqa: E402


def _parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--phases-only", action="store_true", help="only the one-phase comparison")
    g.add_argument("--full", action="store_true", help="only the multi-phase comparison")
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--classes", type=int, default=3)
    p.add_argument("--m", type=int, default=64, help="partitions")
    p.add_argument("--t", type=int, default=10000, help="training-set size")
    p.add_argument("--C", type=float, default=1.0)
    p.add_argument("--target-size", type=int, default=12000)
    p.add_argument("--slice-size", type=int, default=1000)
    p.add_argument("--tau", type=float, default=0.75)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=1, help="rounds; medians are reported")
    p.add_argument("--baseline-tol", type=float, default=1e-4)
    p.add_argument("--baseline-max-iter", type=int, default=1000)
    p.add_argument("--baseline-phases", type=int, default=None,
                   help="run only the first P phases of the baseline's full run")
    p.add_argument("--baseline-repeat", type=int, default=None,
                   help="rounds of the baseline's one-phase measurement (default: --repeat); "
                        "rounds after these time only the package")
    p.add_argument("--full-baseline-repeat", type=int, default=1,
                   help="rounds of the baseline's full run (default 1; ours runs --repeat rounds)")
    p.add_argument("--json", type=Path, default=None, help="also write raw numbers here")
    return p.parse_args(argv)


def _call(fn, *args, **kwargs):
    """Call fn, dropping keyword arguments it does not take (e.g. ``progress``)."""
    params = inspect.signature(fn).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return fn(*args, **kwargs)


def _ours_phase(X, y, a):
    import aflite_fast

    return _call(aflite_fast.predictability, X, y, n_partitions=a.m, train_size=a.t, C=a.C,
                 random_state=a.seed, n_jobs=a.threads, progress=False)


def _ours_full(X, y, a):
    import aflite_fast

    return _call(aflite_fast.aflite, X, y, target_size=a.target_size, n_partitions=a.m,
                 train_size=a.t, slice_size=a.slice_size, tau=a.tau, C=a.C,
                 random_state=a.seed, n_jobs=a.threads, progress=False)


def _scores(correct, seen):
    correct = np.asarray(correct, dtype=np.float64)
    seen = np.asarray(seen)
    return np.where(seen > 0, correct / np.maximum(seen, 1), np.nan)


def _med(xs):
    return statistics.median(xs)


def compare_phase(X, y, a, out):
    sampler = package_partition_sampler(a.seed, a.m)
    active = np.arange(X.shape[0])
    t_ours, t_base, t_tuned, ratios = [], [], [], []
    n_base_rounds = a.repeat if a.baseline_repeat is None else min(a.repeat, a.baseline_repeat)
    for r in range(a.repeat):
        t0 = time.perf_counter()
        ours = _ours_phase(X, y, a)
        t_ours.append(time.perf_counter() - t0)
        if r >= n_base_rounds:
            print(f"  phase round {r + 1}/{a.repeat}: ours {t_ours[-1]:.2f} s", flush=True)
            continue
        with threadpool_limits(limits=a.threads):
            t0 = time.perf_counter()
            correct, seen, prob, n_iter = baseline_phase(
                X, y, active, sampler, n_partitions=a.m, train_size=a.t, C=a.C,
                max_iter=a.baseline_max_iter, tol=a.baseline_tol, return_n_iter=True,
            )
            t_base.append(time.perf_counter() - t0)
        ratios.append(t_base[-1] / t_ours[-1])
        t0 = time.perf_counter()
        tuned_phase(X, y, active, sampler, n_partitions=a.m, train_size=a.t, C=a.C, max_iter=a.baseline_max_iter,
                    tol=a.baseline_tol, n_jobs=a.threads, pool=out["_pool"])
        t_tuned.append(time.perf_counter() - t0)
        print(f"  phase round {r + 1}/{a.repeat}: ours {t_ours[-1]:.2f} s, baseline "
              f"{t_base[-1]:.1f} s, ratio {ratios[-1]:.1f}x, tuned {t_tuned[-1]:.1f} s", flush=True)
    o_correct, o_seen = np.asarray(ours.correct), np.asarray(ours.seen)
    s_o, s_b = _scores(o_correct, o_seen), _scores(correct, seen)
    both = (o_seen > 0) & (seen > 0)
    # PredictabilityResult.prob_label is the MEAN held-out probability of the label
    o_prob = np.asarray(ours.prob_label, dtype=np.float64)
    mean_prob_diff = np.abs(o_prob[both] - prob[both] / seen[both])
    o_iter = np.asarray(getattr(ours, "n_iter", [np.nan]), dtype=np.float64)
    # the floor: L-BFGS evaluations are about iterations + 1 per model
    from compare_scale import gemm_rate

    ours_rate, blas_rate = gemm_rate(min(X.shape[0], 50000), a.d + 1, a.m * a.classes, a.threads)
    rate = {"ours": ours_rate, "blas": blas_rate}
    evals = float(np.sum(o_iter + 1))
    floor_flops = evals * 4.0 * a.t * (a.d + 1) * a.classes + 2.0 * X.shape[0] * (a.d + 1) * a.m * a.classes
    floor_s = floor_flops / (max(rate.values()) * 1e9)
    res = dict(
        ours_s=t_ours, baseline_s=t_base, ratios=ratios, tuned_s=t_tuned,
        tuned_median_s=_med(t_tuned), tuned_ratio=_med(t_tuned) / _med(t_ours),
        floor_s=floor_s, gemm_rate=rate, ours_over_floor=_med(t_ours) / floor_s,
        ours_median_s=_med(t_ours), baseline_median_s=_med(t_base),
        ratio_of_medians=_med(t_base) / _med(t_ours),
        seen_equal=float(np.mean(o_seen == seen)),
        correct_agree=float(np.mean(o_correct == correct)),
        max_abs_score_diff=float(np.nanmax(np.abs(s_o[both] - s_b[both]))),
        max_abs_mean_prob_diff=float(mean_prob_diff.max()),
        pass_tau_ours=int(np.sum(s_o >= a.tau)), pass_tau_baseline=int(np.sum(s_b >= a.tau)),
        baseline_n_iter_mean=float(np.mean(n_iter)), baseline_n_iter_min=int(min(n_iter)),
        baseline_n_iter_max=int(max(n_iter)),
        ours_n_iter_mean=float(np.mean(o_iter)), ours_n_iter_max=float(np.max(o_iter)),
    )
    out["phase"] = res
    # phase 0 of the baseline's full run is this same computation: let compare_full reuse it
    out["_baseline_phase0"] = (correct, seen, prob, n_iter, t_base[-1])
    return res


def compare_full(X, y, a, out):
    sampler = package_partition_sampler(a.seed, a.m)
    t_ours, t_base = [], []
    base = None
    for r in range(a.repeat):
        t0 = time.perf_counter()
        ours = _ours_full(X, y, a)
        t_ours.append(time.perf_counter() - t0)
        print(f"  full round {r + 1}/{a.repeat}: ours {t_ours[-1]:.2f} s, "
              f"{len(ours.history)} phases, kept {len(ours.keep)}", flush=True)
        if r >= a.full_baseline_repeat:
            continue
        with threadpool_limits(limits=a.threads):
            base = baseline_aflite(
                X, y, sampler, target_size=a.target_size, n_partitions=a.m, train_size=a.t,
                slice_size=a.slice_size, tau=a.tau, C=a.C, max_iter=a.baseline_max_iter,
                tol=a.baseline_tol, max_phases=a.baseline_phases, verbose=True,
                first_phase=out.get("_baseline_phase0") if r == 0 else None,
            )
        # sum of per-phase seconds: includes phase 0's measured time when it was reused
        t_base.append(float(sum(h["seconds"] for h in base["history"])))
        print(f"  full round {r + 1}/{a.full_baseline_repeat}: baseline {t_base[-1]:.1f} s, "
              f"{len(base['history'])} phases ({base['stopped']})", flush=True)
    n_phases_ours = len(ours.history)
    n_phases_base = len(base["history"])
    complete = base["stopped"] != "max_phases"
    res = dict(
        ours_s=t_ours, baseline_s=t_base, ours_median_s=_med(t_ours),
        baseline_median_s=_med(t_base), phases_ours=n_phases_ours,
        phases_baseline=n_phases_base, baseline_complete=complete,
        baseline_history=base["history"],
        ours_history=[_plain(h) for h in ours.history],
        kept_ours=int(len(ours.keep)), kept_baseline=int(len(base["keep"])),
    )
    removed_o = np.asarray(ours.removed)
    phase_o = np.asarray(ours.removed_phase)
    if complete:
        res["baseline_full_s"] = res["baseline_median_s"]
        res["baseline_full_estimated"] = False
        keep_o, keep_b = set(np.asarray(ours.keep).tolist()), set(base["keep"].tolist())
        res["keep_jaccard"] = len(keep_o & keep_b) / max(1, len(keep_o | keep_b))
        res["same_status_share"] = 1.0 - len(keep_o ^ keep_b) / X.shape[0]
    else:
        per_phase = [h["seconds"] for h in base["history"]]
        res["baseline_full_s"] = float(np.mean(per_phase)) * n_phases_ours
        res["baseline_full_estimated"] = True
        # agreement over the phases both ran
        mask_o = phase_o < n_phases_base
        set_o = set(removed_o[mask_o].tolist())
        set_b = set(base["removed"].tolist())
        res["removed_jaccard_first_phases"] = len(set_o & set_b) / max(1, len(set_o | set_b))
    res["ratio"] = res["baseline_full_s"] / res["ours_median_s"]
    out["full"] = res
    return res


def _plain(h):
    if isinstance(h, dict):
        return {k: (v.item() if hasattr(v, "item") else v) for k, v in h.items()}
    if hasattr(h, "_asdict"):
        return _plain(h._asdict())
    if hasattr(h, "__dict__"):
        return _plain(vars(h))
    return str(h)


def main(argv=None):
    a = _parse(argv)
    import aflite_fast

    print(f"# compare_phase: N={a.n} d={a.d} C={a.classes} m={a.m} t={a.t} threads={a.threads} "
          f"repeat={a.repeat} seed={a.seed}", flush=True)
    X, y = make_skewed_embeddings(a.n, a.d, a.classes, random_state=a.seed)
    # warm-up outside the measurement (Numba JIT, thread pools, page faults)
    _call(aflite_fast.predictability, X[:600], y[:600], n_partitions=2, train_size=300,
          random_state=a.seed, n_jobs=a.threads, progress=False)
    from peers import PeerPool

    out = dict(args={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
               machine=dict(python=platform.python_version(), cpus=__import__("os").cpu_count()),
               aflite_fast_version=getattr(aflite_fast, "__version__", "?"))
    rows = []
    if not a.full:
        # scikit-learn tuned's workers are started once, with X in shared memory, before timing
        with PeerPool(X, y, n_workers=a.threads) as out["_pool"]:
            r = compare_phase(X, y, a, out)
        out.pop("_pool")
        rows.append(
            f"| one phase (N={a.n}, d={a.d}, C={a.classes}, m={a.m}, t={a.t}) "
            f"| {r['ours_median_s']:.2f} | {r['tuned_median_s']:.1f} | **{r['tuned_ratio']:.1f}x** "
            f"| {r['baseline_median_s']:.1f} | {r['ratio_of_medians']:.1f}x "
            f"| {r['floor_s']:.2f} s, ours / floor {r['ours_over_floor']:.2f} "
            f"| correct-count equal on {100 * r['correct_agree']:.2f}% of rows, "
            f"max abs score diff {r['max_abs_score_diff']:.3g} |")
    if not a.phases_only:
        r = compare_full(X, y, a, out)
        if r["baseline_full_estimated"]:
            base_cell = (f"{r['baseline_full_s']:.0f} (estimated: {r['phases_baseline']} phases "
                         f"measured, {r['baseline_median_s']:.0f} s, x {r['phases_ours']}/"
                         f"{r['phases_baseline']})")
            agree = (f"removed-row Jaccard over first {r['phases_baseline']} phase(s) "
                     f"{r['removed_jaccard_first_phases']:.4f}")
        else:
            base_cell = f"{r['baseline_full_s']:.0f}"
            agree = (f"keep-set Jaccard {r['keep_jaccard']:.4f}, same keep/remove status on "
                     f"{100 * r['same_status_share']:.2f}% of rows; baseline "
                     f"{r['phases_baseline']} phases, kept {r['kept_baseline']}")
        rows.append(
            f"| full run to target {a.target_size}, k={a.slice_size}, tau={a.tau} "
            f"({r['phases_ours']} phases, kept {r['kept_ours']}) "
            f"| {r['ours_median_s']:.2f} | - | - | {base_cell} | {r['ratio']:.1f}x | - | {agree} |")
    print()
    print(f"Skewed embedding-like data (`benchmarks/skewed_data.py`), seed {a.seed}, "
          f"{a.threads} threads, median of {a.repeat} round(s) of aflite_fast and "
          f"{a.repeat if a.baseline_repeat is None else min(a.repeat, a.baseline_repeat)} of the "
          f"one-phase baseline (interleaved, same process); baseline: one "
          f"`LogisticRegression(C={a.C}, tol={a.baseline_tol}, max_iter={a.baseline_max_iter})` "
          f"per partition on the package's partitions.")
    print()
    print("sklearn tuned: float32, one pre-started worker process per thread (X in shared memory) fitting "
          "partitions in parallel, one BLAS thread each; sklearn loop: the serial loop above, BLAS on all threads.")
    if "phase" in out:
        g = out["phase"]["gemm_rate"]
        print(f"Floor at the best GEMM rate measured in this run: NumPy sgemm {g['blas']:.0f} GF/s, "
              f"ours {g['ours']:.0f} GF/s.")
    print()
    print("| benchmark | aflite_fast (s) | sklearn tuned (s) | tuned / ours | sklearn loop (s) | loop / ours "
          "| floor | agreement (ours vs loop) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for row in rows:
        print(row)
    if "phase" in out:
        r = out["phase"]
        print()
        print(f"Phase details: per-round ratios {[round(x, 1) for x in r['ratios']]}; rows held "
              f"out equally often {100 * r['seen_equal']:.2f}%; rows with score >= tau: ours "
              f"{r['pass_tau_ours']}, baseline {r['pass_tau_baseline']}; max abs diff of mean "
              f"held-out p(label) {r['max_abs_mean_prob_diff']:.3g}; baseline lbfgs n_iter_ "
              f"mean {r['baseline_n_iter_mean']:.0f} (min {r['baseline_n_iter_min']}, max "
              f"{r['baseline_n_iter_max']}); aflite_fast L-BFGS iterations mean "
              f"{r['ours_n_iter_mean']:.0f} (max {r['ours_n_iter_max']:.0f}).")
    if "full" in out:
        r = out["full"]
        print()
        print("Full-run phases (ours): "
              + "; ".join(str(h) for h in r["ours_history"]))
        print("Full-run phases (baseline): " + "; ".join(
            f"phase {h['phase']}: active {h['active']}, passing {h['passing']}, removed "
            f"{h['removed']}, {h['seconds']:.0f} s, n_iter {h['mean_n_iter']:.0f}"
            for h in r["baseline_history"]))
    out.pop("_baseline_phase0", None)
    if a.json is not None:
        a.json.write_text(json.dumps(out, indent=1, default=_plain))


if __name__ == "__main__":
    main()
