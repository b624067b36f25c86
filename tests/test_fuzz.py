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
c. File headers: every header a reader parses (.npy versions 1.0-3.0 in both byte orders, any
   shape, dtype and order; safetensors offsets, shapes, dtypes, header length and padding;
   Arrow and Parquet schemas, list types, batches, compression and metadata; label text) is
   generated well-formed and then broken one field or byte at a time.  A reference decoder
   (np.load, the safetensors specification, pyarrow) says what the file holds: the package reads
   exactly that, bitwise, or raises one ValueError naming the file (on the command line: the
   output of the well-formed .npy of the same values, or exit 2 with one line).  Never rows read
   from the wrong bytes, another exception or a warning.

The search is bounded for CI: derandomized (the same examples on every run, no example
database), small shapes, 4 x 25 command-line and 5 x 4 x 8 API examples, 520 header files
(under 10 s in all).  The deadline per example is generous (10 s, for a loaded 2-core
runner; none for the header files, whose examples are milliseconds); it catches hangs, not
slowness.
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
            "sparse_nan", "ragged", "none"]
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
            "strings": lambda: X.astype("<U8"), "sparse_nan": lambda: _sparse_nan(X),
            "ragged": lambda: [list(r) for r in X[:-1]] + [[1.0] * (d + 1)], "none": lambda: None}[kind]()


def _sparse_nan(X):
    """Sparse X (taken since sparse rows are supported) with a NaN value: refused."""
    S = scipy.sparse.csr_matrix(X.astype(np.float32))
    S.data[S.data.size // 2] = np.nan
    return S


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


# ============================================================================ file headers
#
# Every header a reader parses, generated well-formed and then broken one field (or byte) at a
# time.  The oracle is a reference decoder written from the format's specification (NumPy's own
# np.load for .npy, pyarrow for Arrow and Parquet): when it reads the file, the package's reader
# must give bitwise the same array; when it does not, the reader must raise one ValueError
# naming the file, never another exception, a warning or rows read from the wrong bytes.

HEADERS = settings(BOUNDED, deadline=None)


def _bits(a):
    """dtype, shape and bytes (C order) of an array: what 'bitwise the same' compares."""
    a = np.asarray(a)
    return a.dtype.str, a.shape, np.ascontiguousarray(a).tobytes()


def _read_or_refuse(read, path, reference):
    """Run ``read()``: equal to ``reference`` bitwise when that is not None, else one
    ValueError naming ``path``."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow or other warning on the way
        if reference is None:
            with pytest.raises(ValueError) as info:
                read()
            assert os.path.basename(str(path)) in str(info.value), str(info.value)
            assert "\n" not in str(info.value)
            return
        got = read()
    assert _bits(got) == _bits(reference)


# ---------------------------------------------------------------------------- .npy

NPY_DTYPES = ["<f4", ">f4", "<f2", ">f2", "<f8", ">f8", "<i8", ">i4", "<u2", "|u1", "|i1", "|b1"]
NPY_MUTATIONS = ["none", "shape_value", "shape_type", "descr", "fortran", "keys", "cut_text", "insert_char",
                 "length_field", "version", "truncate", "flip_byte", "extra_data"]


def npy_bytes(descr, fortran, shape, data, version, order=("descr", "fortran_order", "shape"), pad=0,
              shape_text=None):
    """A .npy file: magic, version, header length, the header dict literal (keys in ``order``),
    spaces and a newline to a 64-byte boundary (plus ``pad`` x 64), then ``data``."""
    import struct

    values = {"descr": repr(descr), "fortran_order": repr(fortran),
              "shape": shape_text if shape_text is not None else repr(tuple(shape))}
    text = ("{" + ", ".join(f"'{k}': {values[k]}" for k in order) + ", }").encode(
        "latin1" if version < (3, 0) else "utf-8")
    length_format = "<H" if version == (1, 0) else "<I"
    prefix = 8 + struct.calcsize(length_format)
    text += b" " * ((-(prefix + len(text) + 1)) % 64 + 64 * pad) + b"\n"
    return b"\x93NUMPY" + bytes(version) + struct.pack(length_format, len(text)) + text + data


def reference_npy(path):
    """The array NumPy reads from ``path`` (whole, no pickles), or None where it cannot or where
    the package's rules refuse it: a dimension that is a bool or negative (NumPy 2.4 reads
    ``(4, -2**62)`` as an empty (4, 0) array, as the product wraps to 0), a structured or object
    dtype, values of 0 bytes, a version other than 1.0-3.0, a header of Python 2 (NumPy warns)."""
    import ast
    import warnings

    raw = open(path, "rb").read()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            arr = np.load(path, allow_pickle=False)
        header = ast.literal_eval(raw[raw.index(b"{"):raw.index(b"}") + 1].decode("utf-8"))
    except Exception:  # noqa: BLE001 - whatever NumPy refuses
        return None
    if (raw[6:8] not in (b"\x01\x00", b"\x02\x00", b"\x03\x00")
            or any(type(s) is not int or s < 0 for s in header["shape"])  # noqa: E721
            or arr.dtype.names is not None or arr.dtype.hasobject or arr.dtype.itemsize == 0):
        return None
    return arr


@st.composite
def npy_files(draw):
    """(file bytes, mutation): a .npy file of random values, format version, byte order, shape
    and order, then one mutation of its header or data (``"none"``: left well-formed)."""
    dtype = np.dtype(draw(st.sampled_from(NPY_DTYPES)))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=3)))
    version = draw(st.sampled_from([(1, 0), (2, 0), (3, 0)]))
    fortran = draw(st.booleans())
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    values = as_dtype(rng.standard_normal(shape) * 5, dtype.str)
    data = np.asarray(values).tobytes(order="F" if fortran else "C")
    order = tuple(draw(st.permutations(["descr", "fortran_order", "shape"])))
    pad = draw(st.integers(0, 2))
    mutation = draw(st.sampled_from(NPY_MUTATIONS))
    descr, shape_text = dtype.str, None
    if mutation == "shape_value":
        bad = draw(st.sampled_from([-1, -(2**62), 2**62, 2**63, 2**70, 3 * 2**61]))
        dims = list(shape) or [0]
        dims[draw(st.integers(0, len(dims) - 1))] = bad
        shape_text = repr(tuple(dims))
    elif mutation == "shape_type":
        shape_text = draw(st.sampled_from(["(True, 2)", "(2.0,)", "[2, 3]", "'2x3'", "(2, None)", "(-0,)",
                                           "((2,),)", "2", "(1e3,)", "(0x2, 3)"]))
    elif mutation == "descr":
        descr = draw(st.sampled_from(["<f5", "O", "|O", "|V0", "|V8", "<U0", "<U2", "|S0", "xyz", "",
                                      "<M8[s]", "<m8[D]", "<c8", ">c16", "[('a', '<f4')]"]))
    text = npy_bytes(descr, fortran, shape, data, version, order, pad, shape_text)
    if mutation == "descr" and descr.startswith("["):
        text = text.replace(b"'[('a', '<f4')]'", b"[('a', '<f4')]")
    header_end = text.index(b"\n") + 1
    if mutation == "fortran":
        text = text.replace(b"'fortran_order': " + repr(fortran).encode(),
                            b"'fortran_order': " + draw(st.sampled_from([b"1", b"None", b"'False'", b"0"])))
    elif mutation == "keys":
        extra = draw(st.sampled_from([b"'extra': 1, ", b"", b"'descr': '<f8', "]))
        text = text.replace(b"{", b"{" + extra, 1) if extra else text.replace(b"'fortran_order'", b"'fortran'", 1)
    elif mutation == "cut_text":
        cut = draw(st.integers(11, header_end - 1))
        text = text[:cut] + b" " * (header_end - 1 - cut) + text[header_end - 1:]
    elif mutation == "insert_char":
        at = draw(st.integers(12, header_end - 2))
        char = draw(st.sampled_from([b"L", b"(", b")", b",", b"'", b"\\", b"\x00", b"\xff", b"-", b"9"]))
        text = text[:at] + char + text[at + 1:]
    elif mutation == "length_field":
        size = 2 if version == (1, 0) else 4
        length = int.from_bytes(text[8:8 + size], "little")
        new = length + draw(st.sampled_from([-64, -1, 1, 7, 64, 10_000, 2**15]))
        text = text[:8] + max(0, min(new, 256 ** size - 1)).to_bytes(size, "little") + text[8 + size:]
    elif mutation == "version":
        text = text[:6] + bytes(draw(st.sampled_from([(0, 0), (1, 1), (4, 0), (2, 1), (255, 255)]))) + text[8:]
    elif mutation == "truncate":
        text = text[:draw(st.integers(0, len(text) - 1))] if len(text) > header_end else text[:header_end - 5]
    elif mutation == "flip_byte":
        at = draw(st.integers(0, header_end - 1))
        text = text[:at] + bytes([text[at] ^ draw(st.integers(1, 255))]) + text[at + 1:]
    elif mutation == "extra_data":
        text += rng.bytes(draw(st.integers(1, 20)))  # trailing bytes: still the same array
    return text, mutation


@settings(HEADERS, max_examples=150)
@given(case=npy_files())
def test_npy_headers_read_as_numpy_or_refused(case):
    """A .npy file is read as NumPy reads it, bitwise (any version, byte order, order, padding,
    trailing bytes), or refused with one ValueError: never a shape or dtype that lies."""
    from aflite_fast.io.arrayfile import open_array_file

    text, mutation = case
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "a.npy")
        with open(path, "wb") as fh:
            fh.write(text)
        reference = reference_npy(path)
        if mutation in ("none", "extra_data"):
            assert reference is not None
        _read_or_refuse(lambda: np.array(open_array_file(path)), path, reference)
        # embeddings: 2-D numeric files through the row reader (positioned reads or a map)
        if reference is not None and reference.ndim == 2 and 0 not in reference.shape \
                and reference.dtype.kind in "fiub":
            from aflite_fast.io.inputs import open_embeddings

            _read_or_refuse(lambda: np.asarray(open_embeddings(path)[:]), path, reference)


# ---------------------------------------------------------------------------- safetensors

SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
                      "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?"}
SAFETENSORS_MUTATIONS = ["none", "none", "offsets", "offsets_type", "shape", "shape_type", "dtype", "entry",
                         "length_field", "truncate", "duplicate", "not_object", "bad_utf8"]


def reference_safetensors(raw, key):
    """The tensor ``key`` (None: the only one) of safetensors bytes ``raw``, decoded from the
    format's specification (header length, JSON header, dtype, shape, byte range after the
    header), or None where the specification or the package's rules (2-D, no empty axis, no
    key given twice) refuse it."""
    import json

    if len(raw) < 8:
        return None
    n = int.from_bytes(raw[:8], "little")
    if n > 100_000_000 or 8 + n > len(raw):
        return None

    def pairs(items):
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            raise ValueError("duplicate")
        return dict(items)

    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"), object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return None
    if not isinstance(header, dict):
        return None
    header.pop("__metadata__", None)
    if key is None:
        if len(header) != 1:
            return None
        key = next(iter(header))
    entry = header.get(key)
    if not isinstance(entry, dict) or not isinstance(entry.get("dtype"), str) \
            or entry["dtype"] not in SAFETENSORS_DTYPES:
        return None
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    is_count = lambda v: type(v) is int and v >= 0  # noqa: E721, E731
    if not (isinstance(shape, list) and len(shape) == 2 and all(map(is_count, shape)) and 0 not in shape):
        return None
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(is_count, offsets))
            and offsets[0] <= offsets[1]):
        return None
    dtype = np.dtype(SAFETENSORS_DTYPES[entry["dtype"]])
    begin, end = offsets
    if end - begin != shape[0] * shape[1] * dtype.itemsize or 8 + n + end > len(raw):
        return None
    return np.frombuffer(raw[8 + n + begin:8 + n + end], dtype=dtype).reshape(shape)


@st.composite
def safetensors_files(draw):
    """(file bytes, key or None, mutation): a safetensors file holding ``emb`` (and maybe
    another tensor before or after it, and ``__metadata__``), keys in any order, the header
    padded with spaces; then one mutation."""
    import json

    name = draw(st.sampled_from(sorted(SAFETENSORS_DTYPES)))
    dtype = np.dtype(SAFETENSORS_DTYPES[name])
    n, d = draw(st.integers(1, 6)), draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    emb = as_dtype(rng.standard_normal((n, d)) * 5, dtype.str)
    other = rng.standard_normal(draw(st.integers(0, 5))).astype("<f4") if draw(st.booleans()) else None
    other_first = draw(st.booleans())
    blobs = [("other", other, "F32"), ("emb", emb, name)] if other_first else [("emb", emb, name),
                                                                               ("other", other, "F32")]
    header, data = {}, b""
    for key, arr, dt in blobs:
        if arr is None:
            continue
        header[key] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [len(data), len(data) + arr.nbytes]}
        data += np.ascontiguousarray(arr).tobytes()
    if draw(st.booleans()):
        header["__metadata__"] = {"format": "pt", draw(st.text(max_size=5)): draw(st.text(max_size=8))}
    items = list(header.items())
    header = dict(draw(st.permutations(items)))
    entry = header["emb"]
    mutation = draw(st.sampled_from(SAFETENSORS_MUTATIONS))
    if mutation == "offsets":
        shift = draw(st.sampled_from([-64, -4, -1, 1, 4, 2**40]))
        which = draw(st.sampled_from(["begin", "end", "both"]))
        begin, end = entry["data_offsets"]
        entry["data_offsets"] = [begin + (shift if which != "end" else 0), end + (shift if which != "begin" else 0)]
    elif mutation == "offsets_type":
        begin, end = entry["data_offsets"]
        entry["data_offsets"] = draw(st.sampled_from([[float(begin), float(end)], [end, begin], [begin],
                                                      [begin, end, end], f"{begin}-{end}", None,
                                                      [str(begin), end], [False, end] if begin == 0 else [True, end]]))
    elif mutation == "shape":
        entry["shape"] = draw(st.sampled_from([[d, n], [n * d, 1], [-n, -d], [n, d, 1], [n], [n + 1, d], [0, d],
                                               [n * 2**62, d * 4]]))
    elif mutation == "shape_type":
        entry["shape"] = draw(st.sampled_from([[n + 0.7, d], [float(n), d], [True, d], f"{n}x{d}", None, [str(n), d]]))
    elif mutation == "dtype":
        entry["dtype"] = draw(st.sampled_from(["BF16", "F8_E4M3", "f32", "", None, ["F32"], 32,
                                               {"F32": 1}, "I32", "F32", "U8"]))
    elif mutation == "entry":
        header["emb"] = draw(st.sampled_from([[name, [n, d], entry["data_offsets"]], "emb", None, 3]))
    text = json.dumps(header, separators=draw(st.sampled_from([(",", ":"), (", ", ": ")]))).encode()
    if mutation == "duplicate":
        text = text[:-1] + b', "emb": ' + json.dumps(entry).encode() + b"}"
    elif mutation == "not_object":
        text = json.dumps(list(header.items())).encode()
    elif mutation == "bad_utf8":
        text = text[:-1] + b', "\xff\xfe": 1}'
    text += b" " * draw(st.integers(0, 16))  # the padding safetensors writes
    length = len(text)
    if mutation == "length_field":
        length = max(0, length + draw(st.sampled_from([-9, -1, 1, 3, 10**9, 2**63])))
    raw = length.to_bytes(8, "little") + text + data
    if mutation == "truncate":
        raw = raw[:draw(st.integers(0, len(raw) - 1))]
    key = "emb" if "other" in header or mutation != "none" and draw(st.booleans()) else None
    return raw, key, mutation


@settings(HEADERS, max_examples=150)
@given(case=safetensors_files())
def test_safetensors_headers_read_to_the_specification_or_refused(case):
    """A safetensors file is read as its header describes it, bitwise (any dtype, key order,
    separators, padding, another tensor or metadata), or refused with one ValueError: never rows
    from the header's padding or another tensor's bytes."""
    from aflite_fast.io.inputs import open_embeddings

    raw, key, mutation = case
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.safetensors")
        with open(path, "wb") as fh:
            fh.write(raw)
        reference = reference_safetensors(raw, key)
        if mutation == "none":
            assert reference is not None
        spec = path if key is None else f"{path}:{key}"
        _read_or_refuse(lambda: np.asarray(open_embeddings(spec)[:]), path, reference)


def _oof(spec, labels, out):
    """``aflite-fast oof`` on ``spec``: (exit code, stderr lines, the written bytes or None)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = main(["oof", spec, labels, "--out", out, "--cv", "2", "--n-jobs", "1", "--quiet"])
    written = open(out, "rb").read() if code == 0 else None
    if os.path.exists(out):
        os.unlink(out)
    return code, [line for line in stderr.getvalue().splitlines() if line.strip()], written


@pytest.mark.filterwarnings("ignore")  # warnings are not errors here; exit codes and outputs are
@settings(HEADERS, max_examples=40)
@given(kind=st.sampled_from(["npy", "safetensors"]), data=st.data())
def test_header_faults_from_the_command_line(kind, data):
    """On the command line a generated EMB gives what the well-formed ``.npy`` of the values
    its format's reference decoder reads gives (the same exit code, the same output bytes), or
    exit 2 with one line when the decoder refuses it."""
    if kind == "npy":
        raw, mutation = data.draw(npy_files())
        key = None
    else:
        raw, key, mutation = data.draw(safetensors_files())
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"emb.{kind}")
        with open(path, "wb") as fh:
            fh.write(raw)
        reference = reference_npy(path) if kind == "npy" else reference_safetensors(raw, key)
        n = reference.shape[0] if reference is not None and reference.ndim else 6
        labels = os.path.join(tmp, "y.npy")
        np.save(labels, np.arange(n) % 2)
        spec = path if key is None else f"{path}:{key}"
        code, lines, written = _oof(spec, labels, os.path.join(tmp, "p.npy"))
        if reference is None:
            assert code == 2 and len(lines) == 1 and lines[0].startswith("aflite-fast oof: error: "), lines
            return
        well_formed = os.path.join(tmp, "reference.npy")
        np.save(well_formed, reference)
        expected = _oof(well_formed, labels, os.path.join(tmp, "p.npy"))
        assert code == expected[0] and written == expected[2], (lines, expected[1])
        assert len(lines) == len(expected[1]) and (code == 0 or len(lines) == 1)


# ---------------------------------------------------------------------------- Arrow and Parquet

ARROW_VALUE_TYPES = ["float32", "float16", "float64", "int32", "int8", "uint16"]
TABLE_FAULTS = ["none", "none", "none", "none", "null_row", "null_value", "ragged", "strings", "nested", "struct", "truncate",
                "metadata", "no_column"]


def _reference_table(path, fmt, column):
    """The column as pyarrow reads it (the whole file), as one array of rows, or None where
    pyarrow cannot read it or the package's rules refuse it (not a list of numbers, a null,
    rows of different lengths, no rows)."""
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    try:
        if fmt == "parquet":
            table = pq.read_table(path)
        else:
            with pa.memory_map(path) as mm:
                try:
                    table = pa.ipc.open_stream(mm).read_all()
                except pa.ArrowInvalid:
                    mm.seek(0)
                    table = pa.ipc.open_file(mm).read_all()
        col = table.column(column)
    except Exception:  # noqa: BLE001 - whatever pyarrow refuses
        return None
    t = col.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
        return None
    if not (pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type)):
        return None
    rows = col.to_pylist()
    if not rows or any(r is None or any(v is None for v in r) for r in rows) or len({len(r) for r in rows}) != 1:
        return None
    if len(rows[0]) == 0:
        return None
    return np.array(rows, dtype=np.dtype(t.value_type.to_pandas_dtype()))


@st.composite
def table_files(draw):
    """(writer, fault): ``writer(directory) -> (path, fmt)`` writes a Parquet file or an Arrow
    IPC stream or file with an embedding column ``emb`` of random list type, value type, batch
    or row-group size, compression and schema metadata, beside other columns; ``fault`` breaks
    the column or the file."""
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    fmt = draw(st.sampled_from(["parquet", "stream", "file"]))
    vt = draw(st.sampled_from(ARROW_VALUE_TYPES))
    list_kind = draw(st.sampled_from(["list", "large_list", "fixed"]))
    n, d = draw(st.integers(1, 8)), draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    values = as_dtype(rng.standard_normal((n, d)) * 5, np.dtype(vt).str)
    fault = draw(st.sampled_from(TABLE_FAULTS))
    rows = [list(r) for r in values.tolist()]
    value_type = getattr(pa, vt)()
    if fault == "null_row":
        rows[draw(st.integers(0, n - 1))] = None
    elif fault == "null_value":
        rows[draw(st.integers(0, n - 1))][draw(st.integers(0, d - 1))] = None
    elif fault == "ragged" and list_kind != "fixed":
        rows[draw(st.integers(0, n - 1))].append(1)
    if fault == "strings":
        emb = pa.array([[str(v) for v in r] for r in rows], type=pa.list_(pa.string()))
    elif fault == "nested":
        emb = pa.array([[[v] for v in r] for r in rows], type=pa.list_(pa.list_(value_type)))
    elif fault == "struct":
        emb = pa.array([{"x": r[0]} for r in rows], type=pa.struct([("x", value_type)]))
    else:
        typ = {"list": pa.list_(value_type), "large_list": pa.large_list(value_type),
               "fixed": pa.list_(value_type, d)}[list_kind]
        emb = pa.array(rows, type=typ)
    columns = {"id": pa.array(range(n)), "emb": emb, "text": pa.array([f"row {i}" for i in range(n)])}
    names = list(draw(st.permutations(list(columns))))
    table = pa.table({name: columns[name] for name in names})
    metadata = {b"huggingface": draw(st.sampled_from([b'{"info": {"features": {}}}', b"{not json", b"\xff\x00"])),
                draw(st.binary(min_size=1, max_size=4)): draw(st.binary(max_size=8))}
    if fault == "metadata" or draw(st.booleans()):
        table = table.replace_schema_metadata(metadata)
    chunk = draw(st.integers(1, 4))
    compression = draw(st.sampled_from([None, "zstd", "lz4"] if fmt != "parquet" else ["none", "snappy", "zstd"]))
    cut = draw(st.floats(0.05, 0.95))

    def write(directory):
        path = os.path.join(directory, "t.parquet" if fmt == "parquet" else "t.arrow")
        if fmt == "parquet":
            pq.write_table(table, path, row_group_size=chunk, compression=compression)
        else:
            options = pa.ipc.IpcWriteOptions(compression=compression)
            opener = pa.ipc.new_stream if fmt == "stream" else pa.ipc.new_file
            with pa.OSFile(path, "wb") as sink, opener(sink, table.schema, options=options) as writer:
                for batch in table.to_batches(max_chunksize=chunk):
                    writer.write_batch(batch)
        if fault == "truncate":
            size = os.path.getsize(path)
            with open(path, "r+b") as fh:
                fh.truncate(int(size * cut))
        return path, fmt

    return write, fault


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@settings(HEADERS, max_examples=60)
@given(case=table_files())
def test_table_schemas_read_as_pyarrow_or_refused(case):
    """An Arrow or Parquet embedding column is read as pyarrow decodes it, bitwise (list,
    large list or fixed-size list of any numeric type, any batch or row-group size, compression,
    column order or schema metadata), or refused with one ValueError."""
    from aflite_fast.io.inputs import open_embeddings

    write, fault = case
    column = "vec" if fault == "no_column" else "emb"
    with tempfile.TemporaryDirectory() as tmp:
        path, fmt = write(tmp)
        reference = _reference_table(path, fmt, column)
        if fault in ("none", "metadata"):
            assert reference is not None
        _read_or_refuse(lambda: np.asarray(open_embeddings(path, column)[:]), path, reference)


# ---------------------------------------------------------------------------- label files

LABEL_KINDS = ["ints", "strings", "floats"]


@st.composite
def label_texts(draw):
    """(text bytes, labels): a well-formed one-column label file of random labels, written
    with random line endings, a byte-order mark, spaces, quotes and trailing blank lines."""
    kind = draw(st.sampled_from(LABEL_KINDS))
    n = draw(st.integers(1, 8))
    if kind == "ints":
        labels = draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n))
    elif kind == "floats":
        labels = draw(st.lists(st.sampled_from([0.5, -1.25, 2.75, 1e-3]), min_size=n, max_size=n))
    else:
        labels = draw(st.lists(st.sampled_from(["cat", "dog", "a b", "x,y", "é", "inf"]), min_size=n, max_size=n))
    newline = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    lines = []
    for label in labels:
        field = repr(label) if kind == "floats" else str(label)
        if kind == "strings" and ("," in field or draw(st.booleans())):
            field = f'"{field}"'
        lines.append(" " * draw(st.integers(0, 2)) + field + " " * draw(st.integers(0, 2)))
    text = newline.join(lines) + newline * draw(st.integers(0, 3))
    raw = ("\ufeff" if draw(st.booleans()) else "") + text
    return raw.encode("utf-8"), labels


@settings(HEADERS, max_examples=120)
@given(case=label_texts(), mutation=st.sampled_from(["none", "none", "byte", "insert", "delete"]),
       at=st.floats(0, 1, exclude_max=True), byte=st.integers(0, 255))
def test_label_files_read_alike_or_refused(case, mutation, at, byte):
    """A label file gives the same labels however it is written (line endings, a BOM, spaces,
    quotes, trailing blank lines) as the plain file of the same labels; a byte changed,
    inserted or deleted gives labels that read back the same once written plainly, or one
    ValueError naming the file."""
    from aflite_fast.io.labelfile import read_labels_file

    raw, labels = case
    with tempfile.TemporaryDirectory() as tmp:
        plain = os.path.join(tmp, "plain.txt")
        with open(plain, "w", encoding="utf-8") as fh:
            fh.write("".join(f"{label}\n" for label in labels) if not any("," in str(v) for v in labels)
                     else "".join(f'"{label}"\n' for label in labels))
        path = os.path.join(tmp, "labels.txt")
        i = int(at * len(raw))
        if mutation == "byte":
            raw = raw[:i] + bytes([byte]) + raw[i + 1:]
        elif mutation == "insert":
            raw = raw[:i] + bytes([byte]) + raw[i:]
        elif mutation == "delete":
            raw = raw[:i] + raw[i + 1:]
        with open(path, "wb") as fh:
            fh.write(raw)
        if mutation == "none":
            expected = read_labels_file(plain)
            assert _bits(read_labels_file(path)) == _bits(expected)
            return
        try:
            got = read_labels_file(path)
        except ValueError as exc:
            assert "labels.txt" in str(exc) and "\n" not in str(exc)
            return
        # whatever was read is what a plain file of those labels holds
        with open(plain, "w", encoding="utf-8", newline="") as fh:
            import csv

            csv.writer(fh, lineterminator="\n").writerows([[str(v)] for v in got.tolist()])
        assert _bits(read_labels_file(plain)) == _bits(got)
