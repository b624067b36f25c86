"""The numbers of docs/evaluation.md: the two traps of judging a filtered set, the chance check's
hit rates, and the figure.

a. Independent labels (Gaussian X, 8000 x 32, labels drawn independently with P(y=1) = 0.4; a
   second representation: 16 more Gaussian columns of the same rows): the paper's stop with
   t = 0.5, k = 400, target 3000, then ``evaluate_filter`` with and without the run's result;
   the same run with ``null="permutation", n_null=3, stop="null"``.
b. Planted bias (the paper's section-3 circles, 8000 rows; second representation a noisy random
   projection of the ring and spurious columns): the same settings.
c. Hit rates of the chance check over ``--seeds`` data seeds (1200 x 16, m = 16, t = 0.5,
   k = 100, target 400): independent labels at priors 0.5 and 0.6 (a warning is a hit), and the
   paper's circles (no warning is a hit), with the verdicts ``evaluate_filter`` gives from the
   run's result alone, with a second representation (independent labels: 8 more Gaussian
   columns; circles: a noisy random projection, as in b), and from the second representation
   without the run's result (then its label-permuted control decides).

    PYTHONPATH=. python benchmarks/evaluation_traps.py [--seeds 20] [--figure docs/figure_evaluation.png] [--json out.json]
"""
import argparse
import json
import platform
import sys
import time
import warnings
from collections import Counter

import numpy as np

from aflite_fast import aflite, evaluate_filter
from aflite_fast.filtering.chance import ChanceWarning
from aflite_fast.experiments.synthetic_data import make_biased_circles

SETTINGS = dict(target_size=3000, train_size=0.5, slice_size=400, progress=False)


def independent(seed, n=8000, d=32, prior=0.4):
    rng = np.random.default_rng([seed, 1])
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = (rng.random(n) < prior).astype(np.int64)
    F = rng.standard_normal((n, 16)).astype(np.float32)
    return X, y, F


def planted(seed, n=8000):
    data = make_biased_circles(n, random_state=seed)
    rng = np.random.default_rng([seed, 2])
    F = data.X @ rng.standard_normal((data.X.shape[1], 5)) + 0.5 * rng.standard_normal((n, 5))
    return data.X, data.y, F.astype(np.float32)


def one_case(name, X, y, F, seed):
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ChanceWarning)
        res = aflite(X, y, random_state=seed, **SETTINGS)
    run_s = time.perf_counter() - t0
    null = aflite(X, y, random_state=seed, null="permutation", n_null=3, stop="null", **SETTINGS)
    t0 = time.perf_counter()
    ev = evaluate_filter(X, y, res.keep, result=res, features=F, random_state=seed)
    eval_s = time.perf_counter() - t0
    share = lambda counts: float(np.asarray(counts)[1] / np.sum(counts))  # noqa: E731
    return dict(
        name=name, n_rows=int(y.size), n_kept=int(res.keep.size), stop_reason=res.stop_reason,
        chance=res.chance.as_dict(), warned=any(w.category is ChanceWarning for w in caught),
        class1_share_full=share(np.bincount(y)), class1_share_kept=share(res.kept_per_class),
        null_stop_removed=int(null.removed.size), run_seconds=run_s, evaluate_seconds=eval_s,
        evaluation=ev.to_dict(),
        **dict(zip(("verdict_without_result", "reason_without_result"),
                   (lambda ev: (ev.verdict, ev.reason))(evaluate_filter(X, y, res.keep, random_state=seed)))))


def hit_rates(n_seeds):
    rows = []
    run = dict(target_size=400, n_partitions=16, train_size=0.5, slice_size=100, progress=False)
    for kind in ("independent, prior 0.5", "independent, prior 0.6", "planted (circles)"):
        warned, verdicts, with_f, f_only, null_removed, excess = 0, Counter(), Counter(), Counter(), 0, []
        for s in range(n_seeds):
            if kind.startswith("planted"):
                X, y, F = planted(1000 + s, 1200)
            else:
                prior = float(kind[-3:])
                rng = np.random.default_rng([s, int(prior * 10), 3])
                X = rng.standard_normal((1200, 16)).astype(np.float32)
                y = (rng.random(1200) < prior).astype(np.int64)
                F = rng.standard_normal((1200, 8)).astype(np.float32)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ChanceWarning)
                res = aflite(X, y, random_state=s, **run)
            warned += any(w.category is ChanceWarning for w in caught)
            excess.append((res.chance.n_above_tau - res.chance.null_mean) / res.chance.margin)
            verdicts[evaluate_filter(X, y, res.keep, result=res, random_state=s).verdict] += 1
            with_f[evaluate_filter(X, y, res.keep, result=res, features=F, random_state=s).verdict] += 1
            f_only[evaluate_filter(X, y, res.keep, features=F, random_state=s).verdict] += 1
            null_removed += aflite(X, y, random_state=s, null="permutation", n_null=3, stop="null",
                                   **run).removed.size > 0
        rows.append(dict(kind=kind, seeds=n_seeds, warned=warned, verdicts=dict(verdicts),
                         verdicts_with_features=dict(with_f), verdicts_features_only=dict(f_only),
                         null_stop_removed_any=null_removed,
                         excess_in_margins=sorted(excess)))
    return rows


def figure(cases, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    noise, bias = cases
    fig, axes = plt.subplots(1, 3, figsize=(13.5, 3.9))
    ev = noise["evaluation"]
    ax = axes[0]
    labels = ["plain accuracy", "majority rate", "balanced accuracy"]
    kept = [ev["kept_accuracy"], ev["kept_majority_rate"], ev["kept_balanced_accuracy"]]
    rand = [ev["random_accuracy"], ev["random_majority_rate"], ev["random_balanced_accuracy"]]
    x = np.arange(3)
    ax.bar(x - 0.2, rand, 0.4, label="random subsets", color="C0")
    ax.bar(x + 0.2, kept, 0.4, label="kept rows", color="C3")
    ax.set_xticks(x, labels)
    ax.set_ylim(0, 1)
    ax.set_title("trap 1: labels carry nothing,\nthe filter shifts the class balance", fontsize="medium")
    ax.legend(fontsize="small", loc="upper right")
    for ax, case, title in ((axes[1], noise, "trap 2: labels carry nothing"),
                            (axes[2], bias, "planted bias (paper's circles)")):
        e = case["evaluation"]
        reps = [e, e["features"]]
        x = np.arange(2)
        ax.bar(x - 0.2, [r["random_balanced_accuracy"] for r in reps], 0.4,
               yerr=[r["random_balanced_accuracy_std"] for r in reps], label="random subsets", color="C0")
        ax.bar(x + 0.2, [r["kept_balanced_accuracy"] for r in reps], 0.4, label="kept rows", color="C3")
        ax.axhline(0.5, color="k", ls=":", lw=1)
        ax.set_xticks(x, ["filtering representation", "second representation"])
        ax.set_ylim(0, 1)
        ax.set_ylabel("balanced accuracy (out of fold)")
        ax.set_title(f"{title}\nverdict: {e['verdict']}", fontsize="medium")
        ax.legend(fontsize="small", loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--figure", default=None)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = open("/proc/loadavg").read().split()[:3] if sys.platform.startswith("linux") else []
    cases = [one_case("independent labels, prior 0.4", *independent(0), seed=0),
             one_case("planted bias (paper's circles)", *planted(0), seed=0)]
    rates = hit_rates(a.seeds)
    out = dict(started=started, machine=platform.processor() or platform.machine(), load_before=load,
               cases=cases, hit_rates=rates)
    for c in cases:
        e, f = c["evaluation"], c["evaluation"]["features"]
        print(f"\n### {c['name']}: kept {c['n_kept']} of {c['n_rows']} ({c['stop_reason']}); "
              f"stop='null' removed {c['null_stop_removed']}; run {c['run_seconds']:.1f} s, evaluation "
              f"{c['evaluate_seconds']:.1f} s")
        ch = c["chance"]
        print(f"chance check: {ch['n_above_tau']} rows >= tau, permuted {ch['null_above_tau']} (mean "
              f"{ch['null_mean']:.0f}, margin {ch['margin']:.0f}), by_chance={ch['by_chance']}, warned={c['warned']}")
        print(f"class 1 share: all rows {c['class1_share_full']:.3f}, kept {c['class1_share_kept']:.3f}")
        print("| set | balanced accuracy | plain accuracy | majority rate | balanced accuracy, second representation |")
        print("|---|---:|---:|---:|---:|")
        for which in ("full", "kept", "random"):
            sd = lambda key, r: f" (sd {r[f'random_{key}_std']:.3f})" if which == "random" else ""  # noqa: E731
            print(f"| {which} | {e[f'{which}_balanced_accuracy']:.3f}{sd('balanced_accuracy', e)} | "
                  f"{e[f'{which}_accuracy']:.3f}{sd('accuracy', e)} | {e[f'{which}_majority_rate']:.3f} | "
                  f"{f[f'{which}_balanced_accuracy']:.3f}{sd('balanced_accuracy', f)} |")
        print(f"verdict: {e['verdict']} ({e['reason']}); without the result or features: {c['verdict_without_result']}"
              f" ({c['reason_without_result']})")
    print("\n| data | seeds | chance warning | verdicts (result only) | verdicts (result and features) "
          "| verdicts (features, no result) | runs where stop='null' removed rows |")
    print("|---|---:|---:|---|---|---|---:|")
    join = lambda d: ", ".join(f"{k}: {v}" for k, v in sorted(d.items()))  # noqa: E731
    for r in rates:
        print(f"| {r['kind']} | {r['seeds']} | {r['warned']} | {join(r['verdicts'])} | "
              f"{join(r['verdicts_with_features'])} | {join(r['verdicts_features_only'])} | "
              f"{r['null_stop_removed_any']} |")
    print("\n(observed - permuted mean) / margin of phase 0, the five lowest and the five highest:")
    for r in rates:
        e = r["excess_in_margins"]
        print(f"- {r['kind']}: lowest {', '.join(f'{v:.2f}' for v in e[:5])}; highest {', '.join(f'{v:.2f}' for v in e[-5:])}")
    if a.figure:
        figure(cases, a.figure)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
