"""The shuffled-label experiment of docs/null.md: observed vs permutation-null counts per phase.

Data a user can make without a download:

a. scikit-learn's digits (1797 rows, the 64 pixels scaled to [0, 1] as features) as two
   classes (digit < 5 or not), the labels shuffled: nothing is predictable;
b. the synthetic circles of :mod:`aflite_fast.synthetic` with their labels shuffled;
c. the same circles with their labels, whose planted bias (75% of the rows carry spurious
   features that give their label away) AFLite should remove.

For each, five seeds run AFLite with the paper's stop rule and with ``stop="null"``
(``n_null=3``).  Run from the repository root (a minute or two on 2 cores)::

    python docs/examples/null_experiment.py [--figure docs/figure_null.png]

It prints the markdown tables of docs/null.md and, with ``--figure``, draws the filtering
curves of two runs (needs matplotlib).
"""
import argparse

import numpy as np
from sklearn.datasets import load_digits

from aflite_fast import aflite
from aflite_fast.report import filtering_curve, require_matplotlib
from aflite_fast.synthetic import make_biased_circles

SEEDS = range(5)
N_NULL = 3
DIGITS = dict(target_size=600, train_size=0.5, n_partitions=32, slice_size=150, tau=0.75)
CIRCLES = dict(target_size=500, train_size=0.2, n_partitions=32, slice_size=40, tau=0.75)


def digits_shuffled(seed):
    d = load_digits()
    y = np.random.default_rng([seed, 15]).permutation((d.target < 5).astype(np.int64))
    return (d.data / 16.0).astype(np.float32), y, None


def circles(seed, shuffle):
    d = make_biased_circles(2000, random_state=seed)
    y = np.random.default_rng([seed, 15]).permutation(d.y) if shuffle else d.y
    return d.X, y, d.is_biased


def run(X, y, seed, params, stop):
    return aflite(X, y, random_state=seed, null="permutation", n_null=N_NULL, stop=stop, progress=False,
                  n_jobs=2, **params)


def seed_table(name, make, params):
    print(f"\n#### {name}\n")
    print("| seed | phase 0: rows >= tau | null (mean ± sd of 3) | paper: removed (phases) | "
          "stop='null': removed (phases) | biased share kept: paper / null |")
    print("|---:|---:|---:|---:|---:|---:|")
    runs = {}
    for seed in SEEDS:
        X, y, biased = make(seed)
        paper, null = run(X, y, seed, params, "paper"), run(X, y, seed, params, "null")
        h = paper.history[0]
        share = "-" if biased is None else f"{biased[paper.keep].mean():.3f} / {biased[null.keep].mean():.3f}"
        print(f"| {seed} | {h.n_above_tau} | {h.null_mean:.0f} ± {h.null_std:.0f} | "
              f"{paper.removed.size} ({len(paper.history)}) | {null.removed.size} ({len(null.history)}) | {share} |")
        runs[seed] = (paper, null)
    return runs


def phase_table(name, result):
    print(f"\n#### {name}: per phase (paper's rule, null recorded)\n")
    print("| phase | active | rows >= tau | null mean | null sd | null share | excess | margin | removed |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for h in result.history:
        print(f"| {h.phase} | {h.n_active} | {h.n_above_tau} | {h.null_mean:.0f} | {h.null_std:.0f} | "
              f"{h.null_share:.3f} | {h.null_excess:+.0f} | {h.null_margin:.0f} | {h.n_removed} |")


def as_report(result, params, n_rows):
    return {"history": [h.as_dict() for h in result.history], "n_kept": int(result.keep.size),
            "n_rows": n_rows, "parameters": dict(params, n_null=N_NULL)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--figure", default=None, help="write the two filtering curves to this PNG")
    args = p.parse_args()
    digits = seed_table("digits (two classes), labels shuffled", digits_shuffled, DIGITS)
    seed_table("circles, labels shuffled", lambda s: circles(s, True), CIRCLES)
    biased = seed_table("circles with their planted bias", lambda s: circles(s, False), CIRCLES)
    phase_table("digits, labels shuffled, seed 0", digits[0][0])
    if args.figure:
        plt = require_matplotlib()
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        filtering_curve(axes[0], as_report(digits[0][0], DIGITS, 1797))
        axes[0].set_title("digits, labels shuffled: stop='paper'")
        filtering_curve(axes[1], as_report(biased[0][1], CIRCLES, 2000))
        axes[1].set_title("biased circles: stop='null'")
        fig.tight_layout()
        fig.savefig(args.figure, dpi=110)
        plt.close(fig)
        print(f"\nwrote {args.figure}")


if __name__ == "__main__":
    main()
