"""Embeddings as they are stored: .npy shards, Hugging Face datasets / Arrow, safetensors, Parquet.

a. Every format gives the run of the same rows as one ``.npy`` file, bitwise (keep, scores),
   through the API and the command line: float16 shards against one float16 file (natural
   order, a glob, a list of paths, an empty shard); a dataset saved with ``save_to_disk`` and
   its ``.arrow`` file with float16 and float32 columns (fixed-size and plain lists), labels
   from a column of the same table; a Parquet file and directory (several row groups, batches
   cut inside them); ``FILE.safetensors[:KEY]``.  ``oof`` and ``label-issues`` read them too;
   ``--groups`` may be a column of the table.
b. Bad inputs are refused with exit code 2 and one line naming the shard or column: mixed
   widths and dtypes, a truncated shard, a missing column, lists of varying length, nulls;
   NaN is reported with its row and shard.
c. A file truncated while a run reads it (by another process) ends the run with exit code 2
   and one line naming the file, never a bus error; nothing is committed (.npy, shards, Arrow,
   Parquet).  A shard rewritten in place between phases is found, naming the shard.
d. ``filter_dataset`` on a ``datasets.Dataset`` equals ``aflite`` on the array and reads the
   embedding column where Arrow holds it (no copy), also through an index mapping.
e. A missing optional dependency is an ImportError naming the ``[formats]`` extra (exit 2).
f. Reads are chunked: a scan and a gather of a sharded collection allocate a chunk, not the data;
   a sorted selection gives its rows whether close rows are read as spans or not; a compressed
   Arrow file, which cannot be read in place, is decoded a batch at a time.
"""
import itertools
import os
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest

from aflite_fast import aflite, oof_predict_proba
from aflite_fast.cli import main
from aflite_fast.io import inputs, optional
from aflite_fast.io.rowsource import ChunkedRows, ConcatRows, FileRows, InputChangedError
from aflite_fast.phase import local

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

N, D = 700, 12
KW = dict(target_size=350, n_partitions=6, train_size=0.5, slice_size=60, tau=0.6, random_state=3,
          n_jobs=1, progress=False)
CLI = ["--target-size", "350", "--n-partitions", "6", "--train-size", "0.5", "--slice-size", "60",
       "--tau", "0.6", "--seed", "3", "--n-jobs", "1", "--quiet"]
_RUNS = itertools.count()


@pytest.fixture
def problem(seed, make_problem):
    X, y = make_problem(np.random.default_rng([seed, 21]), N, D, 3, signal=0.8)
    return X.astype(np.float16), y


def same_run(a, b):
    np.testing.assert_array_equal(a.keep, b.keep)
    np.testing.assert_array_equal(a.scores, b.scores)


def cli(tmp_path, capsys, emb, labels, *extra, command="filter"):
    """(exit code, stderr lines, output path) of a command writing to a fresh output."""
    out = tmp_path / f"out{next(_RUNS)}"
    if command == "filter":
        argv = ["filter", str(emb), str(labels), "--out", str(out), *CLI, *extra]
    else:
        out = out.with_suffix(".npy")
        argv = [command, str(emb), str(labels), "--out", str(out), "--cv", "3", "--seed", "0", "--n-jobs", "1",
                "--quiet", *extra]
    capsys.readouterr()  # what came before (progress bars of datasets)
    code = main(argv)
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()], out


def cli_keep(tmp_path, capsys, emb, labels, *extra):
    code, err, out = cli(tmp_path, capsys, emb, labels, *extra)
    assert code == 0 and err == [], err
    return np.load(out / "keep.npy")


def refused(tmp_path, capsys, emb, labels, match, *extra):
    code, err, out = cli(tmp_path, capsys, emb, labels, *extra)
    assert code == 2 and len(err) == 1, err
    assert match in err[0], err[0]
    assert not out.exists()
    return err[0]


def write_shards(folder, X, cuts, name="part_{}.npy", numbers=None):
    """X cut at ``cuts`` into shards named with ``numbers`` (natural order = row order)."""
    folder.mkdir(exist_ok=True)
    bounds = [0, *cuts, X.shape[0]]
    numbers = numbers or list(range(len(bounds) - 1))
    paths = []
    for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        paths.append(folder / name.format(numbers[k]))
        np.save(paths[-1], X[a:b])
    return paths


def arrow_list(X, fixed):
    flat = pa.array(np.ascontiguousarray(X).ravel())
    if fixed:
        return pa.FixedSizeListArray.from_arrays(flat, X.shape[1])
    return pa.ListArray.from_arrays(pa.array(np.arange(0, X.size + 1, X.shape[1], dtype=np.int32)), flat)


def save_dataset(path, X, y, fixed=True):
    datasets = pytest.importorskip("datasets")
    value = {np.float16: "float16", np.float32: "float32", np.float64: "float64"}[X.dtype.type]
    feature = datasets.Sequence(datasets.Value(value), length=X.shape[1] if fixed else -1)
    ds = datasets.Dataset.from_dict({"text": [f"row {i}" for i in range(len(y))], "emb": list(X), "label": y},
                                    features=datasets.Features({"text": datasets.Value("string"), "emb": feature,
                                                                "label": datasets.Value("int64")}))
    ds.save_to_disk(str(path), num_shards=2)  # two .arrow files
    return ds


# --------------------------------------------------------------------------- a. same run, every format

def test_shards_equal_one_file(problem, tmp_path, capsys):
    X, y = problem
    np.save(tmp_path / "one.npy", X)
    np.save(tmp_path / "y.npy", y)
    # numbered 2, 10, 11, 100: natural order, which is not the order of the names as text
    # part_10 is empty (skipped)
    paths = write_shards(tmp_path / "shards", X, [150, 150, 480], numbers=[2, 10, 11, 100])
    ref = aflite(str(tmp_path / "one.npy"), y, **KW)
    for spec in (str(tmp_path / "shards"), str(tmp_path / "shards" / "part_*.npy"), [str(p) for p in paths]):
        X_read = inputs.open_embeddings(spec)
        assert isinstance(X_read, ConcatRows) and X_read.shape == X.shape and X_read.dtype == np.float16
        np.testing.assert_array_equal(np.asarray(X_read), X)
        same_run(aflite(spec, y, **KW), ref)
    keep = cli_keep(tmp_path, capsys, tmp_path / "one.npy", tmp_path / "y.npy")
    np.testing.assert_array_equal(keep, ref.keep)
    for spec in (tmp_path / "shards", tmp_path / "shards" / "part_*.npy"):
        np.testing.assert_array_equal(cli_keep(tmp_path, capsys, spec, tmp_path / "y.npy"), keep)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("fixed", [True, False])
def test_hf_dataset_equals_one_file(problem, tmp_path, capsys, dtype, fixed):
    X, y = problem
    X = X.astype(dtype)
    np.save(tmp_path / "one.npy", X)
    save_dataset(tmp_path / "ds", X, y, fixed)
    arrows = sorted(p for p in os.listdir(tmp_path / "ds") if p.endswith(".arrow"))
    assert len(arrows) == 2
    ref = aflite(str(tmp_path / "one.npy"), y, **KW)
    X_read = inputs.open_embeddings(tmp_path / "ds", column="emb")
    assert X_read.dtype == dtype and X_read.shape == X.shape
    np.testing.assert_array_equal(np.asarray(X_read), X)
    same_run(aflite(X_read, y, **KW), ref)
    # one record batch after another, each read in place
    assert all(isinstance(part, ConcatRows) and all(isinstance(b, FileRows) for b in part.parts)
               for part in X_read.parts)
    ds = tmp_path / "ds"
    np.testing.assert_array_equal(cli_keep(tmp_path, capsys, ds, ds, "--column", "emb", "--labels-column", "label"),
                                  ref.keep)
    # an .arrow file alone: its rows
    first = inputs.open_embeddings(ds / arrows[0], column="emb")
    np.testing.assert_array_equal(np.asarray(first), X[:first.shape[0]])
    # an Arrow stream of many record batches, and an Arrow (IPC) file
    table = pa.table({"label": y, "emb": arrow_list(X, fixed)})
    with pa.ipc.new_stream(tmp_path / "x.arrow", table.schema) as writer:
        for batch in table.to_batches(max_chunksize=64):
            writer.write_batch(batch)
    with pa.ipc.new_file(tmp_path / "f.arrow", table.schema) as writer:
        writer.write_table(table, max_chunksize=100)
    for path in (tmp_path / "x.arrow", tmp_path / "f.arrow"):
        X_read = inputs.open_embeddings(path)  # the one list column, without --column
        assert len(X_read.parts) == -(-N // (64 if path.name == "x.arrow" else 100))
        same_run(aflite(X_read, y, **KW), ref)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_parquet_equals_one_file(problem, tmp_path, capsys, monkeypatch, dtype):
    from aflite_fast.io import parquet

    X, y = problem
    X = X.astype(dtype)
    np.save(tmp_path / "one.npy", X)
    monkeypatch.setattr(parquet, "BATCH_BYTES", 64 * D * X.itemsize)  # batches of 64 rows inside row groups
    table = pa.table({"id": np.arange(N), "emb": arrow_list(X, fixed=dtype == np.float16), "label": y})
    pq.write_table(table, tmp_path / "x.parquet", row_group_size=250)
    (tmp_path / "dir").mkdir()
    pq.write_table(table.slice(0, 300), tmp_path / "dir" / "part-2.parquet", row_group_size=100)
    pq.write_table(table.slice(300), tmp_path / "dir" / "part-10.parquet", row_group_size=1000)
    ref = aflite(str(tmp_path / "one.npy"), y, **KW)
    for spec in (tmp_path / "x.parquet", tmp_path / "dir"):
        X_read = inputs.open_embeddings(spec, column="emb")
        assert isinstance(X_read, ChunkedRows) and X_read.dtype == dtype
        np.testing.assert_array_equal(np.asarray(X_read), X)
        same_run(aflite(X_read, y, **KW), ref)
        np.testing.assert_array_equal(
            cli_keep(tmp_path, capsys, spec, spec, "--column", "emb", "--labels-column", "label"), ref.keep)


def test_safetensors_equals_one_file(problem, tmp_path, capsys):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    X, y = problem
    np.save(tmp_path / "one.npy", X)
    np.save(tmp_path / "y.npy", y)
    safetensors_numpy.save_file({"emb": X}, str(tmp_path / "one.safetensors"))
    safetensors_numpy.save_file({"emb": X, "other": X[:5]}, str(tmp_path / "two.safetensors"))
    ref = aflite(str(tmp_path / "one.npy"), y, **KW)
    for spec in (tmp_path / "one.safetensors", f"{tmp_path / 'two.safetensors'}:emb"):
        same_run(aflite(str(spec), y, **KW), ref)
        np.testing.assert_array_equal(cli_keep(tmp_path, capsys, spec, tmp_path / "y.npy"), ref.keep)
    refused(tmp_path, capsys, tmp_path / "two.safetensors", tmp_path / "y.npy", "holds 2 tensors (emb, other)")
    refused(tmp_path, capsys, f"{tmp_path / 'two.safetensors'}:nope", tmp_path / "y.npy", "has no tensor 'nope'")


def test_oof_and_label_issues_read_every_format(problem, tmp_path, capsys):
    X, y = problem
    np.save(tmp_path / "y.npy", y)
    write_shards(tmp_path / "shards", X, [333])
    pq.write_table(pa.table({"emb": arrow_list(X, True), "label": y}), tmp_path / "x.parquet", row_group_size=200)
    ref = oof_predict_proba(X, y, cv=3, random_state=0, n_jobs=1)
    for emb, labels, extra in ((tmp_path / "shards", tmp_path / "y.npy", ()),
                               (tmp_path / "x.parquet", tmp_path / "x.parquet", ("--column", "emb",
                                                                                 "--labels-column", "label"))):
        code, err, out = cli(tmp_path, capsys, emb, labels, *extra, command="oof")
        assert code == 0 and err == [], err
        np.testing.assert_array_equal(np.load(out), ref)
        code, err, out = cli(tmp_path, capsys, emb, labels, *extra, command="label-issues")
        assert code == 0 and err == [], err


# --------------------------------------------------------------------------- b. bad inputs

def test_bad_shards_are_named(problem, tmp_path, capsys):
    X, y = problem
    np.save(tmp_path / "y.npy", y)
    folder = tmp_path / "wide"
    write_shards(folder, X, [300])
    np.save(folder / "part_2.npy", np.zeros((10, D + 1), dtype=np.float16))
    refused(tmp_path, capsys, folder, tmp_path / "y.npy",
            f"shard '{folder / 'part_2.npy'}' has {D + 1} columns of float16, but shard '{folder / 'part_0.npy'}' "
            f"has {D} columns of float16")
    folder = tmp_path / "dtype"
    write_shards(folder, X, [300])
    np.save(folder / "part_1.npy", X[300:].astype(np.float32))
    refused(tmp_path, capsys, folder, tmp_path / "y.npy", f"shard '{folder / 'part_1.npy'}' has {D} columns of float32")
    folder = tmp_path / "cut"
    paths = write_shards(folder, X, [300])
    raw = paths[1].read_bytes()
    paths[1].write_bytes(raw[:-7])
    refused(tmp_path, capsys, folder, tmp_path / "y.npy", f"shard '{paths[1]}': ")
    assert "truncated" in refused(tmp_path, capsys, folder, tmp_path / "y.npy", "truncated")
    refused(tmp_path, capsys, tmp_path / "nothing_*.npy", tmp_path / "y.npy", "no .npy shards match")


def test_nan_is_reported_with_its_shard(problem, tmp_path, capsys):
    X, y = problem
    np.save(tmp_path / "y.npy", y)
    bad = X.copy()
    bad[412, 3] = np.nan
    write_shards(tmp_path / "s", bad, [400])
    with pytest.raises(ValueError, match=r"first at row 412, row 12 of shard 'part_1\.npy'"):
        aflite(str(tmp_path / "s"), y, **KW)
    refused(tmp_path, capsys, tmp_path / "s", tmp_path / "y.npy", "row 412, row 12 of shard 'part_1.npy'")


def test_bad_columns_are_named(problem, tmp_path, capsys):
    X, y = problem
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"emb": arrow_list(X, True), "label": y}), path)
    refused(tmp_path, capsys, path, path, "no column 'vec' in", "--column", "vec", "--labels-column", "label")
    refused(tmp_path, capsys, path, path, "--labels-column 'lab': no column 'lab'", "--column", "emb",
            "--labels-column", "lab")
    refused(tmp_path, capsys, path, path, "choose its label column with --labels-column NAME", "--column", "emb")
    refused(tmp_path, capsys, path, path, "has type int64, not a list of numbers", "--column", "label",
            "--labels-column", "label")
    # lists of varying length; a null embedding; a missing label
    rows = [list(map(float, r)) for r in X]
    rows[37] = rows[37][:-1]
    vary = tmp_path / "vary.parquet"
    pq.write_table(pa.table({"emb": rows, "label": y}), vary, row_group_size=100)
    with pytest.raises(ValueError, match="holds lists of different lengths: row 37 has 11 values"):
        inputs.open_embeddings(vary, column="emb").read_rows(0, N)
    refused(tmp_path, capsys, vary, vary, "column 'emb'", "--column", "emb", "--labels-column", "label")
    rows = [list(map(float, r)) for r in X]
    rows[5] = None
    labels = list(y)
    labels[9] = None
    holes = tmp_path / "holes.parquet"
    pq.write_table(pa.table({"emb": rows, "label": labels, "ok": y}), holes)
    refused(tmp_path, capsys, holes, holes, "column 'emb'", "--column", "emb", "--labels-column", "ok")
    refused(tmp_path, capsys, tmp_path / "x.parquet", holes, "missing value at row 9", "--column", "emb",
            "--labels-column", "label")
    # HF: a missing column, a DatasetDict directory
    save_dataset(tmp_path / "ds", X, y)
    refused(tmp_path, capsys, tmp_path / "ds", tmp_path / "ds", "no column 'vec'", "--column", "vec",
            "--labels-column", "label")
    np.save(tmp_path / "one.npy", X)
    refused(tmp_path, capsys, tmp_path / "one.npy", tmp_path / "ds", "column='emb' (--column) chooses a column",
            "--column", "emb", "--labels-column", "label")


def test_varying_lengths_in_a_dataset_are_refused_naming_the_row(problem, tmp_path):
    X, y = problem
    datasets = pytest.importorskip("datasets")
    rows = [list(map(float, r)) for r in X]
    rows[100] = rows[100] + [0.0]
    datasets.Dataset.from_dict({"emb": rows, "label": y}).save_to_disk(str(tmp_path / "ds"))
    with pytest.raises(ValueError, match="column 'emb' of .* holds lists of different lengths: row 100 has 13"):
        inputs.open_embeddings(tmp_path / "ds", column="emb")


# --------------------------------------------------------------------------- c. truncated during a run

_CHILD = textwrap.dedent("""
    import sys
    from aflite_fast.phase import gather
    from aflite_fast.cli import main

    gather_rows = gather.gather_rows
    calls = [0]

    def pause_then_gather(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 1:  # phase 0, after the validation scan: let the parent truncate the file
            print("ready", flush=True)
            sys.stdin.readline()
        return gather_rows(*args, **kwargs)

    gather.gather_rows = pause_then_gather
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.parametrize("layout", ["npy", "shards", "arrow", "parquet"])
def test_truncated_during_a_run_exits_2_not_bus_error(problem, tmp_path, layout, child_process):
    X, y = problem
    np.save(tmp_path / "y.npy", y)
    extra = []
    if layout == "npy":
        emb = victim = tmp_path / "emb.npy"
        np.save(emb, X)
    elif layout == "shards":
        emb = tmp_path / "shards"
        victim = write_shards(emb, X, [200, 450])[-1]
    else:
        emb = victim = tmp_path / f"emb.{layout}"
        table = pa.table({"emb": arrow_list(X, True)})
        if layout == "arrow":
            with pa.ipc.new_stream(emb, table.schema) as writer:
                writer.write_table(table, max_chunksize=100)
        else:
            pq.write_table(table, emb, row_group_size=100)
        extra = ["--column", "emb"]
    out = tmp_path / "out"
    argv = ["filter", str(emb), str(tmp_path / "y.npy"), "--out", str(out), *CLI, *extra]
    # the child imports the same aflite_fast as the tests (installed, or the source tree built in place)
    child = subprocess.Popen([sys.executable, "-c", _CHILD, *argv], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=child_process["env"], cwd=tmp_path)
    assert child.stdout.readline().strip() == "ready"
    with open(victim, "r+b") as fh:  # another process shrinks the file under the run
        fh.truncate(os.path.getsize(victim) // 2)
    _, err = child.communicate("go\n", timeout=120)
    lines = [line for line in err.splitlines() if line.strip()]
    assert child.returncode == 2, (child.returncode, err)  # a bus error would be -7 (SIGBUS)
    assert len(lines) == 1 and str(victim) in lines[0] and "aflite-fast filter: error:" in lines[0], lines
    assert not out.exists() or not (out / "keep.npy").exists()


def test_file_rows_report_a_short_read(tmp_path):
    X = np.arange(600, dtype=np.float32).reshape(100, 6)
    np.save(tmp_path / "x.npy", X)
    rows = inputs.open_embeddings(tmp_path / "x.npy")
    np.testing.assert_array_equal(rows[10:20], X[10:20])
    np.testing.assert_array_equal(rows[[3, 4, 90]], X[[3, 4, 90]])
    with open(tmp_path / "x.npy", "r+b") as fh:
        fh.truncate(os.path.getsize(tmp_path / "x.npy") - 100)
    np.testing.assert_array_equal(rows[0:50], X[0:50])  # what is still there reads
    with pytest.raises(InputChangedError, match=f"file '{tmp_path / 'x.npy'}' ended at byte .* truncated"):
        rows.read_rows(90, 100)


# --------------------------------------------------------------------------- d. filter_dataset

def test_filter_dataset(problem, tmp_path):
    datasets = pytest.importorskip("datasets")
    from aflite_fast import filter_dataset
    from aflite_fast.io.arrow import dataset_rows

    X, y = problem
    ds = datasets.Dataset.from_dict(
        {"emb": list(X), "label": y},
        features=datasets.Features({"emb": datasets.Sequence(datasets.Value("float16"), length=D),
                                    "label": datasets.Value("int64")}))
    view = dataset_rows(ds, "emb")
    values = ds.data.table.column("emb").chunks[0].values
    assert isinstance(view, np.ndarray) and view.ctypes.data == values.buffers()[1].address  # no copy
    kept, result = filter_dataset(ds, "emb", "label", **KW)
    same_run(result, aflite(X, y, **KW))
    assert len(kept) == result.keep.size
    np.testing.assert_array_equal(np.asarray(kept["label"]), y[result.keep])
    # through an index mapping (select/shuffle), from disk
    ds.save_to_disk(str(tmp_path / "ds"))
    loaded = datasets.load_from_disk(str(tmp_path / "ds"))
    order = np.random.default_rng(0).permutation(N)
    shuffled = loaded.select(order)
    kept, result = filter_dataset(shuffled, "emb", "label", **KW)
    same_run(result, aflite(X[order], y[order], **KW))
    np.testing.assert_array_equal(np.asarray(kept["label"]), y[order][result.keep])


# --------------------------------------------------------------------------- e. optional dependency

def test_missing_pyarrow_names_the_extra(problem, tmp_path, capsys, monkeypatch):
    X, y = problem
    pq.write_table(pa.table({"emb": arrow_list(X, True), "label": y}), tmp_path / "x.parquet")
    real = optional.importlib.import_module

    def no_pyarrow(name, *args):
        if name.startswith("pyarrow"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args)

    monkeypatch.setattr(optional.importlib, "import_module", no_pyarrow)
    with pytest.raises(ImportError, match=r"pip install '\.\[formats\]'"):
        inputs.open_embeddings(tmp_path / "x.parquet", column="emb")
    refused(tmp_path, capsys, tmp_path / "x.parquet", tmp_path / "x.parquet", "[formats]", "--column", "emb",
            "--labels-column", "label")


# --------------------------------------------------------------------------- f. chunked reads

def test_sharded_reads_are_chunked(tmp_path, monkeypatch):
    n, d = 32768, 64
    X = (np.random.default_rng(1).standard_normal((n, d)) * 100).astype(">f4")
    write_shards(tmp_path / "s", X, [5000, 20000])
    rows_of = inputs.open_embeddings(tmp_path / "s")
    chunk = 64 << 10
    monkeypatch.setattr(inputs, "SCAN_CHUNK_BYTES", chunk)
    picked = np.sort(np.random.default_rng(2).choice(n, size=n // 16, replace=False))
    out = np.empty((picked.size, d + 1), dtype=np.float32)
    inputs.scan_rows(np.asarray(X[:64]))  # compile the Numba helpers outside the trace
    tracemalloc.start()
    try:
        inputs.scan_rows(rows_of)
        scan_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        inputs.gather_rows(rows_of, picked, np.zeros(d, np.float32), out, chunk_bytes=chunk)
        gather_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the scan's chunk is one fingerprint block at this width (256 KiB); a gather's is `chunk`
    assert scan_peak < (256 << 10) + (512 << 10) < X.nbytes // 8
    assert gather_peak < chunk + (512 << 10)
    np.testing.assert_array_equal(out[:, :d], X[picked].astype(np.float32))


def test_groups_from_a_table_column(problem, tmp_path, capsys):
    X, y = problem
    groups = np.arange(N) // 4
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"emb": arrow_list(X, True), "label": y, "g": groups}), path, row_group_size=300)
    ref = aflite(X, y, groups=groups, remove="group", **KW)
    keep = cli_keep(tmp_path, capsys, path, path, "--column", "emb", "--labels-column", "label",
                    "--groups", str(path), "--groups-column", "g", "--remove", "group")
    np.testing.assert_array_equal(keep, ref.keep)
    refused(tmp_path, capsys, path, path, "--groups: --groups-column 'h': no column 'h'", "--column", "emb",
            "--labels-column", "label", "--groups", str(path), "--groups-column", "h")


def test_a_shard_rewritten_during_a_run_is_found(problem, tmp_path, monkeypatch):
    import time


    X, y = problem
    paths = write_shards(tmp_path / "s", X, [300])
    real = local.score_phase
    calls = []

    def score_phase(*args, **kw):  # before phase 1: the second shard is rewritten in place
        calls.append(1)
        if len(calls) == 2:
            time.sleep(0.02)  # past the file system's clock tick
            with open(paths[1], "r+b") as fh:
                fh.seek(-4, os.SEEK_END)
                fh.write(b"\0\0\0\0")
        return real(*args, **kw)

    monkeypatch.setattr(local, "score_phase", score_phase)
    with pytest.raises(ValueError, match=f"X file '{paths[1]}' changed while this run was using it"):
        aflite(str(tmp_path / "s"), y, **KW)


@pytest.mark.parametrize("merge_bytes", [0, 16 << 10, 1 << 30])
def test_take_gives_the_rows_whatever_the_merging(tmp_path, monkeypatch, merge_bytes):
    from aflite_fast.io import rowsource

    monkeypatch.setattr(rowsource, "MERGE_BYTES", merge_bytes)
    X = np.arange(5000 * 6, dtype=np.float32).reshape(5000, 6)
    write_shards(tmp_path / "s", X, [1000, 1001, 3000])
    source = inputs.open_embeddings(tmp_path / "s")
    rng = np.random.default_rng(4)
    for size in (1, 7, 300, 2500, 5000):
        rows = np.sort(rng.choice(5000, size, replace=False))
        np.testing.assert_array_equal(source.take(rows), X[rows])
        out = np.empty((size, 7), np.float32)
        inputs.gather_rows(source, rows, np.zeros(6, np.float32), out, chunk_bytes=1024)
        np.testing.assert_array_equal(out[:, :6], X[rows])


def test_compressed_arrow_is_decoded_a_batch_at_a_time(problem, tmp_path):
    X, y = problem
    table = pa.table({"emb": arrow_list(X, False), "label": y})
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(tmp_path / "z.arrow", table.schema, options=options) as writer:
        writer.write_table(table, max_chunksize=128)
    X_read = inputs.open_embeddings(tmp_path / "z.arrow", column="emb")
    assert isinstance(X_read, ChunkedRows)  # compressed: not readable in place
    np.testing.assert_array_equal(X_read.read_rows(N - 5, N), X[N - 5:])
    np.testing.assert_array_equal(X_read.read_rows(0, 5), X[:5])  # back to the first batch
    np.testing.assert_array_equal(np.asarray(X_read), X)
    same_run(aflite(X_read, y, **KW), aflite(X, y, **KW))


def test_many_shards_share_a_few_descriptors(tmp_path, monkeypatch):
    from aflite_fast.io import _pread

    monkeypatch.setattr(_pread, "MAX_OPEN", 2)  # fewer than the shards: descriptors are closed and reopened
    X = np.arange(40 * 3, dtype=np.float32).reshape(40, 3)
    write_shards(tmp_path / "s", X, list(range(4, 40, 4)))
    source = inputs.open_embeddings(tmp_path / "s")
    rows = np.array([0, 5, 9, 13, 22, 23, 31, 39])
    for _ in range(2):
        np.testing.assert_array_equal(source.take(rows), X[rows])
        np.testing.assert_array_equal(np.asarray(source), X)
    assert len(_pread._open_files) <= 2


def test_column_argument_of_the_api_functions(tmp_path):
    """aflite, predictability and oof_predict_proba take column= for a table path and give
    what they give on the same rows as an array; the Dask backend refuses it."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from aflite_fast import aflite, oof_predict_proba, predictability

    rng = np.random.default_rng(7)
    X = rng.standard_normal((400, 6)).astype(np.float32)
    y = (X[:, 0] + 0.3 * rng.standard_normal(400) > 0).astype(np.int64)
    table = pa.table({"emb": pa.array(list(X), type=pa.list_(pa.float32(), 6)), "label": y})
    pq.write_table(table, tmp_path / "t.parquet")
    path = tmp_path / "t.parquet"
    run = dict(target_size=300, n_partitions=4, train_size=0.5, slice_size=50, tau=0.5, progress=False,
               random_state=0, chance_check=False)
    np.testing.assert_array_equal(aflite(path, y, column="emb", **run).keep, aflite(X, y, **run).keep)
    one = dict(n_partitions=4, train_size=0.5, random_state=0)
    np.testing.assert_array_equal(predictability(path, y, column="emb", **one).scores,
                                  predictability(X, y, **one).scores)
    np.testing.assert_array_equal(oof_predict_proba(path, y, column="emb", random_state=0),
                                  oof_predict_proba(X, y, random_state=0))
    with pytest.raises(ValueError, match="column="):
        aflite(path, y, column="emb", backend="dask", **run)
