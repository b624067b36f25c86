"""The tie rule's effect on what a run removes: the paper's synthetic rings with a planted bias
(``aflite_fast.synthetic.make_biased_circles``, the settings of ``aflite-fast synthetic``), each
tie rule, several seeds.

Printed per separation and rule (mean over seeds): the biased share of the kept rows (0.75
before filtering; lower is better) and the 5-fold accuracy of a logistic regression on the kept
rows (lower: less left for a linear model to read).

    PYTHONPATH=. python benchmarks/studies/tie_rule.py [--seeds 3] [--n 5000]
"""
import argparse

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score

from aflite_fast import aflite
from aflite_fast.experiments.synthetic_data import make_biased_circles, separation_levels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--n", type=int, default=5000)
    args = ap.parse_args()
    print("| separation | tie rule | biased share after | LR accuracy after (5-fold) | phases |")
    print("|---:|---|---:|---:|---:|")
    for sep in separation_levels():
        for rule in ("label_prob", "random"):
            share, acc, phases = [], [], []
            for seed in range(args.seeds):
                data = make_biased_circles(args.n, separation=sep, random_state=seed)
                n = data.X.shape[0]
                res = aflite(data.X, data.y, target_size=n // 4, train_size=n // 5, slice_size=n // 50,
                             n_partitions=64, tau=0.75, random_state=seed, progress=False,
                             chance_check=False, tie_break=rule)
                share.append(data.is_biased[res.keep].mean())
                acc.append(cross_val_score(LogisticRegression(), data.X[res.keep], data.y[res.keep], cv=5).mean())
                phases.append(len(res.history))
            print(f"| {sep} | {rule} | {np.mean(share):.3f} | {np.mean(acc):.3f} | {np.mean(phases):.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
