"""Make docs/figure_report.png: ``aflite-fast filter --plot`` on scikit-learn's digits.

The digits (1797 images of 8 x 8 pixels, 10 classes; shipped with scikit-learn, no download)
stand in for embeddings: the pixel values, scaled to [0, 1], are the features.  Run from the
repository root::

    python docs/examples/report_figure.py [OUT_DIR]

It writes OUT_DIR (default ``digits_report``) with keep.npy, scores.npy, report.json and
report.png, and copies report.png to docs/figure_report.png.
"""
import os
import shutil
import sys

import numpy as np
from sklearn.datasets import load_digits

from aflite_fast.cli import main


def make_report(out_dir):
    digits = load_digits()
    os.makedirs(out_dir, exist_ok=True)
    emb, labels = os.path.join(out_dir, "digits_emb.npy"), os.path.join(out_dir, "digits_labels.npy")
    np.save(emb, (digits.data / 16.0).astype(np.float32))
    np.save(labels, digits.target)
    code = main(["filter", emb, labels, "--out", out_dir, "--target-size", "600", "--train-size", "0.5",
                 "--partitions", "32", "--slice-size", "150", "--tau", "0.75", "--seed", "0", "--plot", "--quiet"])
    if code:
        raise SystemExit(code)
    return os.path.join(out_dir, "report.png")


if __name__ == "__main__":
    png = make_report(sys.argv[1] if len(sys.argv) > 1 else "digits_report")
    shutil.copyfile(png, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "figure_report.png"))
    print(f"wrote {png} and docs/figure_report.png")
