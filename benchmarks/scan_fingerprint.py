"""Cost of the content fingerprint in the validation scan (``data.scan_rows``).

The scan reads every row once (finiteness check and column sums); with ``fingerprint=`` it
also hashes every row (SHA-256 per block of rows, in threads while the scan checks the same
chunk).  This script times both on a ``.npy`` file memory-mapped from the page cache (one
untimed scan first reads it into the cache), the two variants interleaved, and prints the
medians.

    PYTHONPATH=. python benchmarks/scan_fingerprint.py EMB.npy [--repeats 5] [--threads 2]
"""
import argparse
import platform
import statistics
import time

import numpy as np

from aflite_fast.io.inputs import scan_rows
from aflite_fast.io.fingerprint import ContentHash


def scan_with_fingerprint(X, n_threads):
    with ContentHash(X.shape, X.dtype, n_threads) as content:
        scan_rows(X, fingerprint=content)
    return content.hexdigest()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("path")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="hashing threads (default: all cores)")
    args = p.parse_args(argv)
    X = np.load(args.path, mmap_mode="r")
    print(f"{args.path}: {X.shape[0]} x {X.shape[1]} {X.dtype}, {X.nbytes / 1e9:.2f} GB; "
          f"{platform.processor() or platform.machine()}")
    scan_rows(X)  # into the page cache (and compiles the Numba check)
    plain, hashed, digests = [], [], set()
    for _ in range(args.repeats):
        t = time.perf_counter()
        scan_rows(X)
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        digests.add(scan_with_fingerprint(X, args.threads))
        hashed.append(time.perf_counter() - t)
    assert len(digests) == 1
    a, b = statistics.median(plain), statistics.median(hashed)
    for name, times in (("scan_rows", plain), ("scan_rows + fingerprint", hashed)):
        median = statistics.median(times)
        print(f"{name + ':':28s} median {median:.3f} s ({X.nbytes / median / 1e9:.2f} GB/s)  "
              f"runs {[round(v, 3) for v in times]}")
    print(f"fingerprint's added cost:    {b - a:.3f} s ({b / a:.2f}x the scan); digest {digests.pop()[:16]}...")


if __name__ == "__main__":
    main()
