"""The measured example of docs/text.md: a CSV of texts filtered by one command, two text columns as views.

a. Builds ``texts.csv`` (``--rows`` rows, default 6,000; nothing downloaded): a ``premise`` of
   8-14 words and a ``hypothesis`` of 5-9 words drawn from the same 600-word vocabulary, and a
   label of three classes (``entailment``, ``neutral``, ``contradiction``), uniform.  Two
   lexical cues are planted, each in its own tenth of the rows and visible in one column only:
   - cue A, in the premise: one word a class (``indeed``, ``perhaps``, ``never``) added at a
     random place;
   - cue B, in the hypothesis: one word a class (``outdoors``, ``tall``, ``nobody``) added at a
     random place (the kind of word hypothesis-only baselines find in NLI sets).
   Outside the cue rows no word says anything of the label.
b. Runs ``aflite-fast filter texts.csv --text-column premise --text-column hypothesis
   --labels-column label ...`` (``python -m aflite_fast``, the same function) ``--repeat``
   times and times each run; then once with each column alone, for comparison.
c. Prints a Markdown table: for each run its seconds, the rows removed, and the cue A, cue B
   and other rows removed; and the files the two-view run wrote.

Run from a clone (a few minutes on a 2-core machine; ``--repeat 3`` for the median of three)::

    python benchmarks/text_example.py --out /tmp/text_example
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

LABELS = ["entailment", "neutral", "contradiction"]
CUE_A = {"entailment": "indeed", "neutral": "perhaps", "contradiction": "never"}
CUE_B = {"entailment": "outdoors", "neutral": "tall", "contradiction": "nobody"}


def vocabulary(size=600, seed=1):
    """``size`` distinct made-up lowercase words of 3-8 letters (none a cue word)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words, taken = [], set(CUE_A.values()) | set(CUE_B.values())
    while len(words) < size:
        w = "".join(rng.choice(letters, rng.integers(3, 9)))
        if w not in taken:
            taken.add(w)
            words.append(w)
    return np.array(words)


def build(n, seed=0):
    """(rows of (premise, hypothesis, label), cue A row numbers, cue B row numbers)."""
    rng = np.random.default_rng(seed)
    words = vocabulary()
    labels = rng.integers(0, 3, n)
    order = rng.permutation(n)
    cue_a, cue_b = np.sort(order[:n // 10]), np.sort(order[n // 10:n // 5])
    in_a, in_b = np.zeros(n, bool), np.zeros(n, bool)
    in_a[cue_a], in_b[cue_b] = True, True
    rows = []
    for i in range(n):
        premise = list(rng.choice(words, rng.integers(8, 15)))
        hypothesis = list(rng.choice(words, rng.integers(5, 10)))
        name = LABELS[labels[i]]
        if in_a[i]:
            premise.insert(rng.integers(0, len(premise) + 1), CUE_A[name])
        if in_b[i]:
            hypothesis.insert(rng.integers(0, len(hypothesis) + 1), CUE_B[name])
        rows.append((" ".join(premise), " ".join(hypothesis), name))
    return rows, cue_a, cue_b


def filter_command(table, out, columns, args):
    return ["filter", table, *[a for c in columns for a in ("--text-column", c)], "--labels-column", "label",
            "--target-size", str(args.target_size), "--train-size", str(args.train_size),
            "--slice-size", str(args.slice_size), "--seed", "0", "--plot", "--quiet", "--out", out]


def run(argv):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "aflite_fast", *argv], check=True, env=env, cwd=HERE)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=6000)
    ap.add_argument("--out", default=os.path.join(HERE, "_text_example"))
    ap.add_argument("--target-size", type=int, default=3600)
    ap.add_argument("--train-size", default="0.5")
    ap.add_argument("--slice-size", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=1, help="runs of the two-view command (their median time)")
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    table = os.path.join(args.out, "texts.csv")
    rows, cue_a, cue_b = build(args.rows)
    with open(table, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["premise", "hypothesis", "label"])
        writer.writerows(rows)
    other = np.setdiff1d(np.arange(args.rows), np.concatenate([cue_a, cue_b]))
    print(f"{table}: {args.rows} rows, cue A (premise) in {cue_a.size}, cue B (hypothesis) in {cue_b.size}")

    results = []
    for columns, repeat in ((["premise", "hypothesis"], args.repeat), (["premise"], 1), (["hypothesis"], 1)):
        out = os.path.join(args.out, "filtered" if len(columns) == 2 else f"filtered-{columns[0]}")
        argv = filter_command(table, out, columns, args)
        seconds = [run(argv) for _ in range(repeat)]
        keep = np.load(os.path.join(out, "keep.npy"))
        removed = np.setdiff1d(np.arange(args.rows), keep)
        report = json.load(open(os.path.join(out, "report.json")))
        results.append(dict(columns=columns, seconds=seconds, median=statistics.median(seconds),
                            removed=int(removed.size), cue_a=int(np.isin(cue_a, removed).sum()),
                            cue_b=int(np.isin(cue_b, removed).sum()), other=int(np.isin(other, removed).sum()),
                            phases=len(report["history"]), stop_reason=report.get("stop_reason"),
                            files=sorted(os.listdir(out)), argv=argv))

    print(f"\nload average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} at the end\n")
    print(f"| text columns (views) | seconds (median of runs) | phases | rows removed | cue A rows removed "
          f"(of {cue_a.size}) | cue B rows removed (of {cue_b.size}) | other rows removed (of {other.size}) |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        runs = ", ".join(f"{s:.1f}" for s in r["seconds"])
        print(f"| {' + '.join(r['columns'])} | {r['median']:.1f} ({runs}) | {r['phases']} | {r['removed']} | "
              f"{r['cue_a']} | {r['cue_b']} | {r['other']} |")
    print(f"\nstop reasons: {[r['stop_reason'] for r in results]}")
    print(f"two-view command: aflite-fast {' '.join(results[0]['argv'])}")
    print(f"files of the two-view run: {', '.join(results[0]['files'])}")
    json.dump(results, open(os.path.join(args.out, "results.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
