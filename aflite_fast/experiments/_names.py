"""Names the experiments' command-line parsers need, importable without NumPy."""

#: Where the Debian package dataset-fashion-mnist installs the IDX files.
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
#: Datasets of the noise-robust experiment.
DATASETS = ("digits", "fashion-mnist")
