"""Property-based tests (hypothesis): bad input never gives a traceback (issue 13).

a. Command line: generated embedding files (dtypes, byte orders, shapes, Fortran order, NaN
   and inf, overflowing values, truncation, empty and garbage files, .npz archives), label
   files (.npy and text: blanks, headers with and without --labels-header, column choices,
   a BOM, mismatched counts, one class) and parameter values run through
   ``aflite_fast.cli.main`` in-process.  It returns 0 or 2, never raises; on 2 it printed
   exactly one line on stderr (argparse's refusals too) and left nothing in --out (not even
   the output set's ``.aflite`` folder); on 0, keep.npy, scores.npy and report.json agree
   with each other and with the input, and --out holds them (links into ``.aflite``) and
   nothing else.
b. Python API: the entry points get valid input with at most one fault injected (in X, y or
   one parameter).  Without a fault the call succeeds; with one it raises ValueError or
   TypeError (MemoryError for a too-small max_memory) whose message names the faulty
   argument, never anything from deeper down.

The search is bounded for CI: derandomized (the same examples on every run, no example
database), small shapes, 4 x 25 command-line and 5 x 4 x 8 API examples.  The deadline per example
is generous (10 s, for a loaded 2-core runner); it catches hangs, not slowness.
"""
import contextlib
import io
import json
import os
import re
import tempfile

import numpy as np
import pytest
import scipy.sparse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aflite_fast import AFLite, RobustLogisticRegression, aflite, oof_predict_proba, predictability
from aflite_fast.cli import main
from aflite_fast.core.losses import LOSS_NAMES

BOUNDED = settings(derandomize=True, database=None, deadline=10_000,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
OUTPUTS = ("keep.npy", "scores.npy", "report.json")


# ============================================================================ command line

VALID_DTYPES = ["<f4", "<f4", ">f4", "<f2", ">f2", "<f8", ">f8", "<i2", ">i4", "u1", "?"]
#: Embedding faults: each makes ``filter`` exit 2.
EMB_FAULTS = ["empty", "garbage", "missing", "truncated", "npz_two", "<c8", "<U3", "O", "1d", "4d",
              "no_rows", "no_features", "nan", "inf", "beyond_float32"]
#: Label faults, each exits 2: counts, classes, blank lines, header and column choices.
LABEL_FAULTS = ["longer", "shorter", "one_class", "class_of_one", "inner_blank", "header_without_flag",
                "two_columns_no_choice", "column_out_of_range", "name_without_header", "flag_on_npy"]
#: Parameter faults, each exits 2 (one flag and value).
PARAM_FAULTS = [("--partitions", "0"), ("--train-size", "0"), ("--train-size", "1.0"),
                ("--train-size", "1.5"), ("--train-size", "-3"), ("--train-size", "N"),
                ("--slice-size", "0"), ("--tau", "-0.5"), ("--tau", "1.5"), ("--tau", "nan"),
                ("--C", "0"), ("--C", "-1"), ("--C", "inf"), ("--C", "nan"), ("--max-memory", "abc"),
                ("--max-memory", "0"), ("--max-memory", "1KB"), ("--threads", "0"), ("--threads", "-1"),
                ("--target-size", "-1"), ("--target-size", "N"), ("--loss", "forward"), ("--n-null", "0"),
                ("--stop", "null"), ("--remove", "group")]


def as_dtype(values, dtype):
    """Float values as ``dtype``: integers from their magnitude x 10, booleans from their sign."""
    if np.dtype(dtype).kind in "iu":
        return np.round(np.abs(values) * 10).astype(dtype)
    if dtype == "?":
        return values > 0
    return values.astype(dtype)


@st.composite
def embedding_files(draw, fault):
    """(writer, n_rows): ``writer(directory)`` makes the file and returns its path spec.

    Valid files vary in container (.npy, .npz, FILE.npz:KEY, compressed), dtype and byte
    order, Fortran order and scale; ``fault`` (one of EMB_FAULTS or None) breaks one thing.
    """
    kind = draw(st.sampled_from(["npy", "npy", "npz", "npz_key", "npz_compressed"]))
    dtype = draw(st.sampled_from(VALID_DTYPES))
    n, d = draw(st.integers(20, 60)), draw(st.integers(1, 5))
    # integers at 1e-3 round to all zeros: X with no variance, an input error (aflite_fast.degenerate)
    small = [] if np.dtype(dtype).kind in "iu" else [1e-3]
    scale = 1.0 if dtype in ("<f2", ">f2") else draw(st.sampled_from([1.0, 1e4, *small]))
    where = draw(st.floats(0, 1, exclude_max=True))
    fortran = draw(st.booleans())
    cut = draw(st.integers(1, 64))
    seed = draw(st.integers(0, 2**16))
    shape = {"1d": (n,), "4d": (n, d, 2, 1), "no_rows": (0, d), "no_features": (n, 0)}.get(fault, (n, d))
    if fault in ("<c8", "<U3", "O"):
        dtype = fault
    elif fault in ("nan", "inf") and np.dtype(dtype).kind != "f":
        dtype = "<f4"
    elif fault == "beyond_float32":
        dtype = draw(st.sampled_from(["<f8", ">f8"]))

    def write(directory):
        path = os.path.join(directory, "emb.npy")
        rng = np.random.default_rng(seed)
        values = rng.standard_normal(shape) * scale
        if fault in ("nan", "inf", "beyond_float32"):
            values.flat[int(where * values.size)] = {"nan": np.nan, "inf": -np.inf, "beyond_float32": 1e39}[fault]
        X = as_dtype(values, dtype)
        if fortran:
            X = np.asfortranarray(X)
        if fault == "missing":
            return os.path.join(directory, "absent.npy")
        if fault == "empty":
            open(path, "wb").close()
            return path
        if fault == "garbage":
            with open(path, "wb") as fh:
                fh.write(rng.bytes(cut))
            return path
        spec = path
        if fault == "npz_two" or kind.startswith("npz"):
            path = spec = os.path.join(directory, "emb.npz")
            save = np.savez_compressed if kind == "npz_compressed" else np.savez
            save(path, emb=X, **({"other": np.zeros(2)} if fault == "npz_two" or kind == "npz_key" else {}))
            if kind == "npz_key" and fault != "npz_two":
                spec = f"{path}:emb"
        else:
            np.save(path, X, allow_pickle=X.dtype == object)
        if fault == "truncated":
            size = os.path.getsize(path)
            with open(path, "r+b") as fh:
                fh.truncate(max(0, size - cut))
        return spec

    return write, shape[0]


@st.composite
def label_files(draw, n, fault):
    """``writer(directory) -> (path, flags)``: a label file for ``n`` rows and its flags.

    Valid files vary in format (.npy; text with int, float, mixed or word spellings; id,label
    CSV or TSV with a column chosen by name or index), header (with its flag), BOM and
    trailing blank lines; ``fault`` (one of LABEL_FAULTS or None) breaks one thing.
    """
    fmt = draw(st.sampled_from(["npy", "txt", "txt", "csv2", "tsv"]))
    if fault in ("two_columns_no_choice", "column_out_of_range", "name_without_header"):
        fmt = draw(st.sampled_from(["csv2", "tsv"]))
    elif fault == "flag_on_npy":
        fmt = "npy"
    elif fault in ("inner_blank", "header_without_flag") and fmt == "npy":
        fmt = "txt"
    n_classes = draw(st.sampled_from([2, 3]))
    spelling = draw(st.sampled_from(["int", "float", "mixed", "word"]))
    if fault == "header_without_flag":
        spelling = draw(st.sampled_from(["int", "float", "mixed"]))
    header = fault == "header_without_flag" or (fault != "name_without_header" and draw(st.booleans()))
    by_name = header and draw(st.booleans())
    trailing = draw(st.booleans())
    bom = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))

    def write(directory):
        rng = np.random.default_rng(seed)
        codes = rng.permutation(np.arange(n) % n_classes)  # every class >= 2 rows for n >= 6
        if fault == "longer":
            codes = np.append(codes, codes[:1])
        elif fault == "shorter":
            codes = codes[:-1]
        elif fault == "one_class":
            codes = np.zeros_like(codes)
        elif fault == "class_of_one":
            codes = codes.copy()
            codes[n // 2] = n_classes
        if fmt == "npy":
            path = os.path.join(directory, "labels.npy")
            np.save(path, codes)
            return path, (["--labels-column", "0"] if fault == "flag_on_npy" else [])
        spell = {"int": str, "float": lambda c: f"{c}.0", "mixed": lambda c: (str(c), f"{c}.0", f"0{c}")[c % 3],
                 "word": lambda c: f"class {c}"}[spelling]
        texts = [spell(int(c)) for c in codes]
        sep = "\t" if fmt == "tsv" else ","
        flags = []
        if fmt in ("csv2", "tsv"):
            texts = [f"{1000 + i}{sep}{t}" for i, t in enumerate(texts)]
            column = {"column_out_of_range": "7", "name_without_header": "label"}.get(
                fault, "label" if by_name else "1")
            flags = [] if fault == "two_columns_no_choice" else ["--labels-column", column]
        if header:
            texts = [f"id{sep}label" if fmt in ("csv2", "tsv") else "label"] + texts
            if fault != "header_without_flag":
                flags.append("--labels-header")
        if fault == "inner_blank":
            texts.insert(len(texts) // 2, "")
        body = "\n".join(texts) + ("\n\n \n" if trailing else "\n")
        path = os.path.join(directory, "labels.tsv" if fmt == "tsv" else "labels.txt")
        with open(path, "wb") as fh:
            fh.write((("\ufeff" if bom else "") + body).encode("utf-8"))
        return path, flags

    return write


@st.composite
def filter_parameters(draw, n, fault):
    """Valid ``filter`` flags for ``n`` rows, with one PARAM_FAULTS entry when ``fault``."""
    values = {
        # below the rows: filter refuses a target it cannot filter down to (exit 2, a PARAM_FAULT)
        "--target-size": str(draw(st.integers(0, n - 1))),
        "--partitions": str(draw(st.integers(1, 4))),
        "--train-size": draw(st.sampled_from(["0.5", "0.3", "0.8"]) | st.integers(1, n - 1).map(str)),
        "--slice-size": str(draw(st.integers(1, n))),
        "--tau": draw(st.sampled_from(["0", "0.5", "0.6", "0.75", "1"])),
        "--C": draw(st.sampled_from(["1.0", "0.1", "10"])),
        "--loss": draw(st.sampled_from([name for name in LOSS_NAMES if name != "forward"])),
        "--seed": str(draw(st.integers(0, 3))),
        "--threads": draw(st.sampled_from(["1", "1", "2"])),  # a positive count (-1 is a PARAM_FAULT)
    }
    memory = draw(st.sampled_from([None, None, "64MB", "1GiB"]))
    if memory is not None:
        values["--max-memory"] = memory
    if fault:
        flag, value = draw(st.sampled_from(PARAM_FAULTS))
        values[flag] = str(n) if value == "N" else value
    return [token for item in values.items() for token in item] + ["--quiet"]


def check_outputs(out, n_rows, args):
    """keep.npy, scores.npy and report.json of a successful run agree."""
    keep, scores = np.load(os.path.join(out, "keep.npy")), np.load(os.path.join(out, "scores.npy"))
    with open(os.path.join(out, "report.json"), encoding="utf-8") as fh:
        report = json.load(fh)
    target = int(args[args.index("--target-size") + 1])
    tau = float(args[args.index("--tau") + 1])
    assert keep.dtype == np.int64 and np.all(np.diff(keep) > 0)
    assert keep.size == 0 or (keep[0] >= 0 and keep[-1] < n_rows)
    assert scores.shape == (n_rows,) and scores.dtype == np.float64
    assert report["n_rows"] == n_rows and report["n_kept"] == keep.size
    assert report["n_removed"] == n_rows - keep.size
    assert sum(h["n_removed"] for h in report["history"]) == report["n_removed"]
    assert keep.size >= min(target, n_rows)
    removed = np.setdiff1d(np.arange(n_rows), keep)
    assert np.all(scores[removed] >= tau)  # a removed row's last score is the one that removed it
    finite = scores[np.isfinite(scores)]
    assert np.all((finite >= 0) & (finite <= 1))


@pytest.mark.filterwarnings("ignore")  # warnings are not errors here; exit codes and files are
@pytest.mark.parametrize("where", ["none", "embeddings", "labels", "parameters"])
@settings(BOUNDED, max_examples=25)
@given(data=st.data())
def test_filter_exits_0_or_2(where, data):
    """Valid input exits 0 with consistent outputs; one fault exits 2 with one line."""
    pick = (lambda faults: data.draw(st.sampled_from(faults))) if where != "none" else (lambda faults: None)
    write_emb, n = data.draw(embedding_files(pick(EMB_FAULTS) if where == "embeddings" else None))
    write_labels = data.draw(label_files(max(n, 20), pick(LABEL_FAULTS) if where == "labels" else None))
    params = data.draw(filter_parameters(max(n, 20), where == "parameters"))
    with tempfile.TemporaryDirectory() as tmp:
        spec = write_emb(tmp)
        labels, label_flags = write_labels(tmp)
        out = os.path.join(tmp, "out")
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            code = main(["filter", spec, labels, "--out", out, *label_flags, *params])
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        if where == "none":
            # --quiet prints nothing but the chance check's warning, which random labels may earn
            warned = [line for line in lines if line.startswith("aflite-fast filter: warning: chance check: ")]
            assert code == 0 and lines == warned and len(warned) <= 1, lines
            check_outputs(out, n, params)
            assert sorted(os.listdir(out)) == [".aflite", *sorted(OUTPUTS)]  # the set's links, nothing staged
        else:
            # argparse's refusals too: one line (cli._args.ArgumentParser), no usage block
            assert code == 2 and len(lines) == 1, (code, lines)
            assert lines[0].startswith("aflite-fast filter: error: "), lines
            assert not os.path.exists(out) or os.listdir(out) == []  # a failed first run leaves no .aflite
        assert not [p for p in os.listdir(tmp) if p.startswith(".aflite")]  # nothing staged beside --out


# ============================================================================ Python API

#: Faults by argument: (argument, bad value, pattern the message must hold).  Values that
#: depend on the data are made by ``_fault_value``.
PARAMETER_FAULTS = {
    "train_size": [0, -3, 1.0, 1.5, "half", True, float("nan"), "n_rows"],
    "n_partitions": [0, -1, 2.5, "4", True],
    "target_size": [-1, 2.5, "10", None],
    "slice_size": [0, -2, 1.5],
    "tau": [-0.1, 1.1, float("nan"), "0.5", None],
    "C": [0, -1.0, float("nan"), float("inf"), "1", None, True],
    "loss": ["hinge", 3, None],
    "loss_params": [[("q", 0.5)], {"zz": 1.0}, {"q": "x"}],
    "max_memory": ["abc", -1, 0, "2 XB", "1KB"],
    "random_state": [-1, "seed", 1.5],
    "n_jobs": [0, 1.5, "2"],
    "tol": [-1.0, float("nan"), "x", float("inf")],
    "max_iter": [-1, 2.5, "x", None],
    "cv": [1, 0, "x", 1000],
    "q": [0.0, 1.5, "x"],
}
NAME_PATTERN = {"loss_params": r"loss_params|zz|\bq\b", "max_memory": r"max_memory|memory size",
                "C": r"\bC\b", "X": r"\bX\b", "y": r"\by\b|class"}
X_FAULTS = ["nan", "inf", "beyond_float32", "1d", "4d", "no_rows", "no_features", "complex", "strings",
            "sparse", "ragged", "none"]
Y_FAULTS = ["longer", "shorter", "one_class", "nan", "2d", "none"]

ENTRY_POINTS = {
    "aflite": ["target_size", "n_partitions", "train_size", "slice_size", "tau", "C", "loss",
               "loss_params", "max_memory", "random_state", "n_jobs", "tol", "max_iter"],
    "predictability": ["n_partitions", "train_size", "C", "loss", "loss_params", "max_memory",
                       "random_state", "n_jobs", "tol", "max_iter"],
    "oof_predict_proba": ["cv", "C", "loss", "loss_params", "max_memory", "random_state", "n_jobs",
                          "tol", "max_iter"],
    "AFLite.fit_resample": ["target_size", "n_partitions", "train_size", "slice_size", "tau", "C",
                            "loss", "loss_params", "max_memory", "random_state", "n_jobs", "tol", "max_iter"],
    "RobustLogisticRegression.fit": ["C", "loss", "loss_params", "n_jobs", "tol", "max_iter", "q"],
}


@st.composite
def valid_problems(draw):
    n_classes = draw(st.sampled_from([2, 3]))
    n = draw(st.integers(max(12, 4 * n_classes), 40))
    d = draw(st.integers(1, 4))
    dtype = draw(st.sampled_from(["<f4", "<f4", ">f4", "<f2", "<f8", ">f8", "<i2", "u1", "?"]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % n_classes)  # every class >= 4 rows
    values = rng.standard_normal((n, d)) + y[:, None]
    X = as_dtype(values, dtype)
    labels = draw(st.sampled_from(["int", "str", "float"]))
    y = {"int": y, "str": np.array(["a", "b", "c"])[y], "float": y.astype(np.float64)}[labels]
    return X, y, n_classes


def _valid_parameters(draw, entry, n, n_classes):
    loss = draw(st.sampled_from(["ce", "ce", "gce", "mae", "sce", "gce_trunc", "forward"]))
    # an invertible row-stochastic T (a uniform one is singular, refused: aflite_fast.degenerate)
    noise = 0.2 / max(1, n_classes - 1)
    T = np.full((n_classes, n_classes), noise) + np.eye(n_classes) * (0.8 - noise)
    loss_params = {"gce": {"q": 0.5}, "forward": {"T": T}}.get(loss)
    common = dict(C=draw(st.sampled_from([0.1, 1.0, 10.0])), loss=loss, loss_params=loss_params,
                  n_jobs=draw(st.sampled_from([1, 1, 2, -1, None])), tol=1e-4,
                  max_iter=draw(st.sampled_from([50, 1000])))
    if entry == "RobustLogisticRegression.fit":
        return common
    common.update(max_memory=draw(st.sampled_from([None, "64MB", 1 << 26])),
                  random_state=draw(st.sampled_from([0, 1, None, np.random.default_rng(5)])))
    if entry == "oof_predict_proba":
        return dict(common, cv=draw(st.sampled_from([2, 3])))
    common.update(n_partitions=draw(st.integers(1, 4)),
                  train_size=draw(st.sampled_from([0.5, 0.3]) | st.integers(2, n - 2)))
    if entry == "predictability":
        return common
    return dict(common, target_size=draw(st.integers(0, n)), slice_size=draw(st.integers(1, n)),
                tau=draw(st.sampled_from([0.0, 0.5, 0.75, 1.0])))


def _fault_X(kind, X):
    n, d = X.shape
    if kind in ("nan", "inf", "beyond_float32"):
        X = np.array(X, dtype=np.float64 if kind == "beyond_float32" else np.result_type(X.dtype, np.float16))
        X[n // 2, d - 1] = {"nan": np.nan, "inf": -np.inf, "beyond_float32": 1e39}[kind]
        return X
    return {"1d": lambda: X[:, 0], "4d": lambda: X[:, :, None, None], "no_rows": lambda: X[:0],
            "no_features": lambda: X[:, :0], "complex": lambda: X.astype(np.complex64),
            "strings": lambda: X.astype("<U8"), "sparse": lambda: scipy.sparse.csr_matrix(X.astype(np.float32)),
            "ragged": lambda: [list(r) for r in X[:-1]] + [[1.0] * (d + 1)], "none": lambda: None}[kind]()


def _fault_y(kind, y):
    return {"longer": lambda: np.concatenate([y, y[:1]]), "shorter": lambda: y[:-1],
            "one_class": lambda: np.full(y.shape, y[0]), "nan": lambda: np.where(np.arange(y.size) == 3, np.nan, 1.0 * (np.arange(y.size) % 2)),
            "2d": lambda: np.stack([y, y], axis=1), "none": lambda: None}[kind]()


def _call(entry, X, y, params):
    if entry == "aflite":
        return aflite(X, y, progress=False, **params)
    if entry == "predictability":
        return predictability(X, y, **params)
    if entry == "oof_predict_proba":
        return oof_predict_proba(X, y, **params)
    if entry == "AFLite.fit_resample":
        return AFLite(**params).fit_resample(X, y)
    q = params.pop("q", None)
    if q is not None:
        params["loss"], params["loss_params"] = "gce", None
    return RobustLogisticRegression(q=q, **params).fit(X, y)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("where", ["none", "X", "y", "parameter"])
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@settings(BOUNDED, max_examples=8)
@given(data=st.data())
def test_api_errors_name_the_argument(entry, where, data):
    """Valid calls succeed; one fault raises ValueError/TypeError naming the faulty argument."""
    X, y, n_classes = data.draw(valid_problems())
    params = _valid_parameters(data.draw, entry, X.shape[0], n_classes)
    if where == "X":
        X = _fault_X(data.draw(st.sampled_from(X_FAULTS)), X)
    elif where == "y":
        y = _fault_y(data.draw(st.sampled_from(Y_FAULTS)), y)
    elif where == "parameter":
        where, value = data.draw(st.sampled_from(
            [(name, value) for name in ENTRY_POINTS[entry] for value in PARAMETER_FAULTS[name]]))
        params[where] = X.shape[0] if value == "n_rows" else value
        if where == "loss_params":  # a loss the valid part of the call fits: gce for q, else ce
            params["loss"] = "gce" if isinstance(value, dict) and "q" in value else "ce"
    if where == "none":
        _call(entry, X, y, params)
        return
    allowed = (ValueError, TypeError, MemoryError) if where == "max_memory" else (ValueError, TypeError)
    with pytest.raises(allowed) as info:
        _call(entry, X, y, params)
    pattern = NAME_PATTERN.get(where, rf"\b{where}\b")
    assert re.search(pattern, str(info.value)), (where, str(info.value))
