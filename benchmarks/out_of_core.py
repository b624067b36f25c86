"""Out-of-core benchmark: ``aflite-fast filter`` on embeddings larger than its memory limit.

a. Writes N x d float32 embeddings of several GB (skewed feature variances, a shared offset,
   three classes that depend on a few directions plus noise) and their labels, as
   ``--format``: one ``.npy`` file; ``shards``, a directory of ``.npy`` shards of
   ``--shard-rows`` rows; or ``hf``, a Hugging Face dataset as ``save_to_disk`` writes it
   (``.arrow`` files of 1,000-row record batches, an ``emb`` fixed-size list column and a
   ``label`` column, loaded back with ``datasets.load_from_disk`` to check it), filtered with
   ``--column emb --labels-column label``; or ``npz``: sparse rows, an uncompressed
   ``scipy.sparse.save_npz`` file (CSR, ``--nnz`` stored values a row over ``--dim`` columns,
   like hashed n-gram presence; the label is a column of its own in a third of the rows),
   written a member at a time.
b. Creates a child memory cgroup (v1 ``memory.limit_in_bytes`` or v2 ``memory.max``) below
   the one this process runs in, with a limit smaller than the file, and proves the limit is
   enforced: a process that allocates more than the limit is killed.
c. Runs the filter command (``aflite_fast.cli.main(["filter", ...])``, what the
   ``aflite-fast`` script runs) inside that cgroup, in a child process which also
   - drops the page cache and times one sequential read of the file (before and after),
   - samples its anonymous memory (RssAnon of /proc/self/status) every 10 ms,
   - records each phase's seconds (training, prediction, and the reads of X inside them)
     by wrapping ``local.score_phase`` (``sparse_local.score_phase_sparse`` for ``npz``;
     results untouched).
d. Prints a Markdown table and writes everything measured to a JSON file; deletes the
   big file unless ``--keep-file``.

Needs root (cgroups, drop_caches).  Example (about 3.1 GB file, 1.5 GiB limit)::

    python benchmarks/out_of_core.py --rows 1000000 --dim 768 --limit 1.5GiB --max-memory 1GB

and the same data as shards, or as a Hugging Face dataset, written under ``/data``::

    python benchmarks/out_of_core.py --format shards --path /data/ooc_shards ...
    python benchmarks/out_of_core.py --format hf --path /data/ooc_hf ...

and sparse rows (about 1.2 GB: 2.5M rows x 60 stored values over 2^18 columns, 1 GiB limit)::

    python benchmarks/out_of_core.py --format npz --rows 2500000 --dim 262144 --nnz 60 --limit 1GiB \
        --max-memory 600MB --partitions 16 --slice-size 10000 --phases 3 --tau 0.6
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ---------------------------------------------------------------------------- data
def generate(n, d, seed, chunk=50_000):
    """Chunks (start, rows, labels): skewed variances (std (1+k)^-0.75), offset, labels =
    argmax(3 directions + noise)."""
    rng = np.random.default_rng(seed)
    scale = ((1.0 + np.arange(d)) ** -0.75).astype(np.float32)
    offset = rng.uniform(1.0, 3.0, size=d).astype(np.float32)
    A = np.zeros((d, 3), dtype=np.float32)
    A[:8] = rng.standard_normal((8, 3)) * 2.0
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        Z = rng.standard_normal((e - s, d), dtype=np.float32)
        logits = Z @ A + rng.gumbel(size=(e - s, 3)).astype(np.float32)
        y = np.argmax(logits, axis=1)
        Z *= scale
        Z += offset
        yield s, Z, y


def write_data(path, labels_path, n, d, seed, chunk=50_000):
    """One float32 .npy file and its labels."""
    X = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
    y = np.empty(n, dtype=np.int64)
    for s, Z, lab in generate(n, d, seed, chunk):
        X[s:s + len(Z)] = Z
        y[s:s + len(Z)] = lab
    X.flush()
    del X
    np.save(labels_path, y)


def sparse_chunks(n, d, nnz, seed, chunk=100_000):
    """Chunks (column indices (r, nnz) int32, labels) of sparse rows: ``nnz`` distinct columns
    a row, uniform over columns 3..d-1 (sorted draws plus their rank: strictly increasing); in
    a third of the rows the first is replaced by the label's own column (0, 1 or 2)."""
    rng = np.random.default_rng(seed)
    for s in range(0, n, chunk):
        r = min(n, s + chunk) - s
        cols = np.sort(rng.integers(0, d - 3 - nnz, size=(r, nnz)), axis=1) + np.arange(nnz) + 3
        y = rng.integers(0, 3, size=r)
        cue = rng.random(r) < 1 / 3
        cols[cue, 0] = y[cue]
        yield cols.astype(np.int32), y


def write_npz(path, labels_path, n, d, nnz, seed):
    """What ``scipy.sparse.save_npz(path, X, compressed=False)`` writes for CSR X of ``n`` rows x
    ``d`` columns with ``nnz`` float32 ones a row, streamed member by member (never in memory)."""
    import zipfile

    total = n * nnz
    index = np.int32 if total < 2**31 else np.int64
    y = np.empty(n, dtype=np.int64)

    def member(archive, name, dtype, shape, pieces):
        with archive.open(name + ".npy", "w", force_zip64=True) as fh:
            np.lib.format.write_array_header_2_0(fh, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                      "fortran_order": False, "shape": shape})
            for piece in pieces:
                fh.write(np.ascontiguousarray(piece, dtype=dtype).tobytes())

    def indices():
        start = 0
        for cols, lab in sparse_chunks(n, d, nnz, seed):
            y[start:start + len(lab)] = lab
            start += len(lab)
            yield cols.ravel()

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        member(archive, "indices", np.int32, (total,), indices())
        member(archive, "indptr", index, (n + 1,), (np.arange(s, min(n + 1, s + 1_000_000), dtype=np.int64) * nnz
                                                    for s in range(0, n + 1, 1_000_000)))
        member(archive, "format", "<U3", (), [np.array("csr")])
        member(archive, "shape", np.int64, (2,), [np.array([n, d])])
        member(archive, "data", np.float32, (total,), (np.ones(min(total, s + 2**24) - s, np.float32)
                                                       for s in range(0, total, 2**24)))
    np.save(labels_path, y)


def write_shards(folder, labels_path, n, d, seed, shard_rows):
    """The same rows as :func:`write_data`, as ``part_<k>.npy`` shards of ``shard_rows`` rows."""
    os.makedirs(folder)
    y = np.empty(n, dtype=np.int64)
    for k, s in enumerate(range(0, n, shard_rows)):
        e = min(n, s + shard_rows)
        X = np.lib.format.open_memmap(os.path.join(folder, f"part_{k}.npy"), mode="w+", dtype=np.float32,
                                      shape=(e - s, d))
        for s2, Z, lab in generate(e - s, d, [seed, k]):
            X[s2:s2 + len(Z)] = Z
            y[s + s2:s + s2 + len(Z)] = lab
        X.flush()
        del X
    np.save(labels_path, y)


def write_hf(folder, n, d, seed, shard_rows, batch_rows=1000):
    """The rows as a Hugging Face dataset, in the layout ``save_to_disk`` writes: the metadata
    of a small dataset saved by ``datasets`` itself, and ``.arrow`` streams of ``shard_rows``
    rows in record batches of ``batch_rows`` (its default writer batch size)."""
    import datasets
    import pyarrow as pa

    features = datasets.Features({"emb": datasets.Sequence(datasets.Value("float32"), length=d),
                                  "label": datasets.Value("int64")})
    datasets.Dataset.from_dict({"emb": [[0.0] * d], "label": [0]}, features=features).save_to_disk(folder)
    for name in os.listdir(folder):
        if name.endswith(".arrow"):
            os.remove(os.path.join(folder, name))
    schema = features.arrow_schema
    n_files = -(-n // shard_rows)
    files = []
    for k, s in enumerate(range(0, n, shard_rows)):
        name = f"data-{k:05d}-of-{n_files:05d}.arrow"
        files.append({"filename": name})
        with pa.OSFile(os.path.join(folder, name), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            for s2, Z, lab in generate(min(n, s + shard_rows) - s, d, [seed, k], chunk=batch_rows):
                emb = pa.FixedSizeListArray.from_arrays(pa.array(Z.ravel()), d)
                writer.write_batch(pa.record_batch([emb, pa.array(lab)], schema=schema))
    state_path = os.path.join(folder, "state.json")
    state = json.load(open(state_path))
    state["_data_files"] = files
    json.dump(state, open(state_path, "w"), indent=2)
    loaded = datasets.load_from_disk(folder)
    if loaded.num_rows != n or loaded.features != features:
        raise RuntimeError(f"datasets reads {loaded.num_rows} rows, {loaded.features}")


def data_files(path):
    sys.path.insert(0, ROOT)
    from aflite_fast.io.formats import spec_files

    return spec_files(path)


# ---------------------------------------------------------------------------- cgroups
def own_memory_cgroup():
    """(version, path) of the memory cgroup this process belongs to."""
    with open("/proc/self/cgroup") as fh:
        lines = [ln.strip().split(":", 2) for ln in fh if ln.strip()]
    for _, controllers, rel in lines:
        if "memory" in controllers.split(","):
            return 1, "/sys/fs/cgroup/memory" + rel
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        rel = [rel for h, _, rel in lines if h == "0"][0]
        return 2, "/sys/fs/cgroup" + rel
    raise RuntimeError("no memory cgroup found")


class MemoryCgroup:
    """A child memory cgroup with a hard limit."""

    def __init__(self, name, limit):
        self.version, parent = own_memory_cgroup()
        self.path = os.path.join(parent, name)
        os.makedirs(self.path, exist_ok=True)
        self.limit = int(limit)
        knob = "memory.limit_in_bytes" if self.version == 1 else "memory.max"
        self._write(knob, str(self.limit))
        if self.version == 1 and os.path.exists(os.path.join(self.path, "memory.memsw.limit_in_bytes")):
            try:  # no swap on this machine; keep swap from hiding anything if there is some
                self._write("memory.memsw.limit_in_bytes", str(self.limit))
            except OSError:
                pass

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w") as fh:
            fh.write(value)

    def read(self, name):
        with open(os.path.join(self.path, name)) as fh:
            return fh.read()

    def stat(self):
        return {k: int(v) for k, v in (ln.split() for ln in self.read("memory.stat").splitlines())}

    def anon(self):
        s = self.stat()
        return s.get("rss", s.get("anon", 0))

    def enter(self):
        """preexec_fn: move the forked child into this cgroup before it execs."""
        self._write("cgroup.procs", str(os.getpid()))

    def summary(self):
        out = {"version": self.version, "path": self.path, "limit": self.limit}
        if self.version == 1:
            out["max_usage"] = int(self.read("memory.max_usage_in_bytes"))
            out["failcnt"] = int(self.read("memory.failcnt"))
            oom = dict(ln.split() for ln in self.read("memory.oom_control").splitlines())
            out["oom_kill"] = int(oom.get("oom_kill", 0))
        else:
            out["max_usage"] = int(self.read("memory.peak")) if os.path.exists(
                os.path.join(self.path, "memory.peak")) else None
            ev = dict(ln.split() for ln in self.read("memory.events").splitlines())
            out["oom_kill"] = int(ev.get("oom_kill", 0))
        return out

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)


def prove_limit(cg):
    """A process allocating (and touching) limit + 256 MiB inside the cgroup must be killed."""
    code = f"import numpy as np; a = np.ones({(cg.limit + (256 << 20)) // 8}); print('survived')"
    p = subprocess.run([sys.executable, "-c", code], preexec_fn=cg.enter, capture_output=True, text=True)
    return {"returncode": p.returncode, "killed": p.returncode < 0 and "survived" not in p.stdout}


# ---------------------------------------------------------------------------- child
def drop_caches():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3")
        return True
    except OSError:
        return False


def sequential_read(path, bufsize=16 << 20):
    """Seconds to read the whole input (every file of it) once with read() into one reused buffer."""
    buf = bytearray(bufsize)
    view = memoryview(buf)
    t0 = time.perf_counter()
    for name in data_files(path):
        with open(name, "rb", buffering=0) as fh:
            while fh.readinto(view):
                pass
    return time.perf_counter() - t0


def read_bytes():
    """Bytes this process has read from storage so far (/proc/self/io)."""
    with open("/proc/self/io") as fh:
        return int(dict(ln.split(": ") for ln in fh.read().splitlines())["read_bytes"])


def rss_anon():
    with open("/proc/self/status") as fh:
        for ln in fh:
            if ln.startswith("RssAnon:"):
                return int(ln.split()[1]) * 1024
    return 0


class PeakAnonSampler:
    """Samples this process's anonymous memory every ``interval`` s in a thread; ``peak``
    holds the largest value seen (call ``stop`` to end)."""

    def __init__(self, interval=0.01):
        self.peak = rss_anon()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval):
        while not self._stop.wait(interval):
            self.peak = max(self.peak, rss_anon())

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.peak


def child(args):
    sys.path.insert(0, ROOT)
    from aflite_fast.cli import main
    from aflite_fast.phase import local, sparse_local

    sampler = PeakAnonSampler()
    baseline = rss_anon()  # interpreter + numpy + numba + aflite_fast loaded, no data yet
    # warm up on a tiny in-memory problem: Numba functions loaded, OpenMP/BLAS pools started
    from aflite_fast import aflite

    rng = np.random.default_rng(0)
    aflite(rng.standard_normal((2000, 16)).astype(np.float32), rng.integers(0, 3, 2000),
           target_size=1900, n_partitions=4, train_size=200, slice_size=50, tau=0.0, progress=False)
    baseline_warm = rss_anon()

    phases = []
    real = local.score_phase

    def spy(*a, **kw):
        t0 = time.perf_counter()
        b0 = read_bytes()
        res = real(*a, **kw)
        phases.append(dict(seconds=time.perf_counter() - t0, n_active=int(a[2].size),
                           read_bytes=read_bytes() - b0,
                           n_blocks=res.n_blocks, n_chunks=res.n_chunks,
                           mean_iter=float(res.n_iter.mean()),
                           **{k: float(v) for k, v in res.seconds.items()}))
        print(f"phase {len(phases) - 1}: {json.dumps(phases[-1])}", file=sys.stderr, flush=True)
        return res

    if args.format == "npz":
        real = sparse_local.score_phase_sparse
        sparse_local.score_phase_sparse = spy
    else:
        local.score_phase = spy
    dropped = drop_caches()
    read_before = sequential_read(args.path)
    drop_caches()
    with tempfile.TemporaryDirectory(dir=os.path.dirname(args.path)) as tmp:
        out_dir = os.path.join(tmp, "out")
        inputs = ([args.path, args.path, "--column", "emb", "--labels-column", "label"] if args.format == "hf"
                  else [args.path, args.labels])
        argv = ["filter", *inputs, "--out", out_dir,
                "--target-size", str(args.target_size), "--partitions", str(args.partitions),
                "--train-size", str(args.train_size), "--slice-size", str(args.slice_size),
                "--tau", str(args.tau), "--max-memory", args.max_memory, "--seed", "0", "--quiet"]
        t0 = time.perf_counter()
        b0 = read_bytes()
        rc = main(argv)
        total = time.perf_counter() - t0
        total_read = read_bytes() - b0
        report = json.load(open(os.path.join(out_dir, "report.json"))) if rc == 0 else {}
    drop_caches()
    read_after = sequential_read(args.path)
    peak = sampler.stop()
    json.dump(dict(rc=rc, argv=argv, total_seconds=total, total_read_bytes=total_read, baseline_anon=baseline,
                   baseline_warm_anon=baseline_warm,
                   peak_anon=peak, read_before=read_before, read_after=read_after,
                   caches_dropped=dropped, phases=phases,
                   n_kept=report.get("n_kept"), stop_reason=report.get("stop_reason")),
              open(args.result, "w"), indent=1)
    return rc


# ---------------------------------------------------------------------------- parent
def parse_size(text):
    sys.path.insert(0, ROOT)
    from aflite_fast.runtime.memory import parse_memory

    return parse_memory(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--path", default=None,
                    help="where the data is written (a directory for --format shards/hf)")
    ap.add_argument("--format", choices=["npy", "shards", "hf", "npz"], default="npy",
                    help="one .npy file, a directory of .npy shards, a Hugging Face dataset, or sparse rows "
                         "(an uncompressed scipy.sparse.save_npz file)")
    ap.add_argument("--nnz", type=int, default=60, help="stored values a row (--format npz)")
    ap.add_argument("--shard-rows", type=int, default=100_000, help="rows per shard / per .arrow file")
    ap.add_argument("--limit", default="1.5GiB", help="cgroup memory limit")
    ap.add_argument("--max-memory", default="1GB", help="the filter's --max-memory")
    ap.add_argument("--partitions", type=int, default=24)
    ap.add_argument("--train-size", type=int, default=None, help="default rows / 50")
    ap.add_argument("--slice-size", type=int, default=10_000)
    ap.add_argument("--phases", type=int, default=3, help="target size = rows - phases * slice")
    ap.add_argument("--tau", type=float, default=0.6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=os.path.join(tempfile.gettempdir(), "aflite_out_of_core.json"))
    ap.add_argument("--keep-file", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--labels", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--target-size", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)

    args.train_size = args.train_size or args.rows // 50
    default = "_ooc_sparse.npz" if args.format == "npz" else "_ooc_emb.npy"
    args.path = args.path or os.path.join(ROOT, "benchmarks", default)
    args.target_size = args.rows - args.phases * args.slice_size
    args.labels = os.path.splitext(args.path.rstrip("/"))[0] + "_labels.npy"
    t0 = time.perf_counter()
    if not os.path.exists(args.path):
        if args.format == "npy":
            write_data(args.path, args.labels, args.rows, args.dim, args.seed)
        elif args.format == "shards":
            write_shards(args.path, args.labels, args.rows, args.dim, args.seed, args.shard_rows)
        elif args.format == "npz":
            write_npz(args.path, args.labels, args.rows, args.dim, args.nnz, args.seed)
        else:
            write_hf(args.path, args.rows, args.dim, args.seed, args.shard_rows)
    write_seconds = time.perf_counter() - t0
    file_bytes = sum(os.path.getsize(f) for f in data_files(args.path))
    limit = parse_size(args.limit)
    cg = MemoryCgroup(f"aflite_ooc_{os.getpid()}", limit)
    try:
        proof = prove_limit(cg)
        print(f"limit proof: allocating limit + 256 MiB -> returncode {proof['returncode']} "
              f"(killed: {proof['killed']})", flush=True)
        oom_before = cg.summary()["oom_kill"]
        if cg.version == 1:
            cg._write("memory.max_usage_in_bytes", "0")  # forget the proof's usage
        fd, result = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--path", args.path, "--format", args.format,
               "--labels", args.labels, "--result", result, "--target-size", str(args.target_size),
               "--partitions", str(args.partitions), "--train-size", str(args.train_size),
               "--slice-size", str(args.slice_size), "--tau", str(args.tau),
               "--max-memory", args.max_memory]
        cg_anon_peak = 0
        p = subprocess.Popen(cmd, preexec_fn=cg.enter)
        while p.poll() is None:
            cg_anon_peak = max(cg_anon_peak, cg.anon())
            time.sleep(0.05)
        summary = cg.summary()
        summary["oom_kill"] -= oom_before
        res = json.load(open(result)) if os.path.getsize(result) else {"rc": p.returncode}
        os.remove(result)
    finally:
        cg.remove()
        if not args.keep_file:
            import shutil

            for f in (args.path, args.labels):
                if os.path.isdir(f):
                    shutil.rmtree(f)
                elif os.path.exists(f):
                    os.remove(f)
    res.update(returncode=p.returncode, file_bytes=file_bytes, rows=args.rows, dim=args.dim, format=args.format,
               nnz=args.nnz if args.format == "npz" else None,
               limit=limit, max_memory=args.max_memory, cgroup=summary, limit_proof=proof,
               cgroup_anon_peak=cg_anon_peak, write_seconds=write_seconds,
               params=dict(partitions=args.partitions, train_size=args.train_size,
                           slice_size=args.slice_size, tau=args.tau, target_size=args.target_size),
               command=" ".join([os.path.basename(sys.executable)] + sys.argv))
    json.dump(res, open(args.json, "w"), indent=1)
    print_table(res)
    return 0 if p.returncode == 0 else 1


def print_table(r):
    gb = 1e9
    read = min(r["read_before"], r["read_after"])
    shape = (f"{r['rows']} x {r['dim']} CSR, {r['nnz']} float32 values a row" if r.get("format") == "npz"
             else f"{r['rows']} x {r['dim']} float32")
    print(f"\n{r.get('format', 'npy')}: {r['file_bytes'] / gb:.2f} GB ({shape}), cgroup limit "
          f"{r['limit'] / gb:.2f} GB, --max-memory {r['max_memory']}; exit code {r['returncode']}")
    print(f"one sequential read: {r['read_before']:.2f} s before, {r['read_after']:.2f} s after "
          f"({r['file_bytes'] / read / gb:.2f} GB/s best)")
    print(f"anonymous memory: {r['baseline_anon'] / gb:.3f} GB after imports, "
          f"{r['baseline_warm_anon'] / gb:.3f} GB after a tiny warm-up run, peak "
          f"{r['peak_anon'] / gb:.3f} GB (RssAnon, 10 ms samples); cgroup rss peak "
          f"{r['cgroup_anon_peak'] / gb:.3f} GB (50 ms samples); cgroup max usage incl. page cache "
          f"{r['cgroup']['max_usage'] / gb:.3f} GB, oom kills {r['cgroup']['oom_kill']}")
    print(f"total {r['total_seconds']:.1f} s, kept {r['n_kept']}, {r['stop_reason']}; bytes read from "
          f"storage by the run {r.get('total_read_bytes', 0) / gb:.2f} GB\n")
    print("| phase | active rows | blocks | chunks | mean L-BFGS iter | train s | predict s | "
          "read s (train + predict) | phase s | phase / file read | reads / file read | GB read from storage |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, ph in enumerate(r["phases"]):
        io = ph["read_train"] + ph["read_predict"]
        print(f"| {i} | {ph['n_active']} | {ph['n_blocks']} | {ph['n_chunks']} | {ph['mean_iter']:.1f} | "
              f"{ph['train']:.1f} | {ph['predict']:.1f} | {io:.1f} ({ph['read_train']:.1f} + "
              f"{ph['read_predict']:.1f}) | {ph['seconds']:.1f} | {ph['seconds'] / read:.1f} | "
              f"{io / read:.2f} | {ph.get('read_bytes', 0) / gb:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
