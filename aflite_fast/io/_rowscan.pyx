# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Row-level helpers of the filtering path, compiled at build time (see ``rows.py``).

They run on every call (input checks, the membership matrix of a phase), so they are
prebuilt rather than compiled at run time: a new process pays no compilation for them.
None allocates anything the size of X.
"""
import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memmove, memset
from libc.stdlib cimport free, malloc
from cython.parallel cimport parallel, prange

ctypedef fused bits_t:
    uint16_t
    uint32_t
    uint64_t


def first_nonfinite_row(const bits_t[:, :] bits, bits_t exp_mask):
    """Index of the first row holding NaN or inf, or -1.

    ``bits`` is X viewed as unsigned integers of the same width (float16 -> uint16, float32
    -> uint32, float64 -> uint64), any strides; a value is NaN or inf exactly when all its
    exponent bits are set.  Working on the bits handles float16 alike.
    """
    cdef Py_ssize_t n = bits.shape[0], d = bits.shape[1], i, k, found = -1
    with nogil:
        for i in range(n):
            for k in range(d):
                if bits[i, k] & exp_mask == exp_mask:
                    found = i
                    break
            if found >= 0:
                break
    return found


def first_row_beyond(const double[:, ::1] X, double limit):
    """Index of the first row of X with NaN, inf or a value of magnitude above ``limit``, or -1."""
    cdef Py_ssize_t n = X.shape[0], d = X.shape[1], i, k, found = -1
    cdef double v
    with nogil:
        for i in range(n):
            for k in range(d):
                v = X[i, k]
                if not (-limit <= v <= limit):  # also true for NaN
                    found = i
                    break
            if found >= 0:
                break
    return found


def membership_matrix(const int64_t[:, :] train_positions, int64_t n_rows, uint8_t[:, ::1] out):
    """out[pos, j] = 1 for every training position of partition j (out is zeroed here).

    train_positions : int64 (m, t) sorted training positions of each partition; negative
        entries (``engine.TRAIN_PAD``, padding of partitions with fewer than t rows) are skipped.
    out : uint8 (n_rows, m).
    """
    cdef Py_ssize_t m = train_positions.shape[0], t = train_positions.shape[1], j, r
    cdef int64_t pos, bad = -1
    if out.shape[0] != n_rows or out.shape[1] != m:
        raise ValueError(f"membership_matrix: out must have shape ({n_rows}, {m})")
    with nogil:
        if out.shape[0] > 0 and m > 0:
            memset(&out[0, 0], 0, out.shape[0] * m)
        for j in range(m):
            for r in range(t):
                pos = train_positions[j, r]
                if pos >= n_rows:
                    bad = pos
                elif pos >= 0:
                    out[pos, j] = 1
    if bad >= 0:
        raise IndexError(f"membership_matrix: position {bad} beyond {n_rows} rows")


def member_rows(const uint8_t[:, ::1] member, int64_t[::1] mptr, int32_t[::1] mrows):
    """The rows of each model of ``member`` (n, m; nonzero: row i trains model j): model j's
    rows, increasing, at ``mrows[mptr[j]:mptr[j + 1]]``, with ``mptr`` (m + 1) the running
    counts.  ``mrows`` must hold every membership (the nonzero count of ``member``).

    Branch-free (a membership is a coin flip, so a branch on it is mispredicted half the time):
    each column is written as every row index in turn, the position advancing past members
    only, into a scratch of one more entry (the last column's last write lands there)."""
    cdef Py_ssize_t n = member.shape[0], m = member.shape[1], i, j
    cdef int64_t total, p
    cdef int32_t *tmp
    if mptr.shape[0] != m + 1:
        raise ValueError(f"member_rows: mptr must have {m + 1} entries")
    with nogil:
        for j in range(m + 1):
            mptr[j] = 0
        for i in range(n):
            for j in range(m):
                mptr[j + 1] += member[i, j] != 0
        for j in range(m):
            mptr[j + 1] += mptr[j]
    total = mptr[m]
    if mrows.shape[0] < total:
        raise ValueError(f"member_rows: mrows holds {mrows.shape[0]} entries, the memberships are {total}")
    tmp = <int32_t *> malloc((total + 1) * sizeof(int32_t))
    if tmp == NULL:
        raise MemoryError("member_rows: could not allocate scratch memory")
    with nogil:
        for j in range(m):
            p = mptr[j]
            for i in range(n):
                tmp[p] = <int32_t>i
                p += member[i, j] != 0
        if total > 0:
            memcpy(&mrows[0], tmp, total * sizeof(int32_t))
    free(tmp)


def scatter_member_values(const double[:, ::1] values, const int64_t[::1] mptr, const int32_t[::1] mrows,
                          float[:, ::1] out):
    """``out[mrows[p], j * C + k] = values[p, k]`` for every membership p of model j (p in
    ``mptr[j]:mptr[j + 1]``), C = ``values.shape[1]``; the rest of ``out`` (n, m C) is left
    as it is."""
    cdef Py_ssize_t m = mptr.shape[0] - 1, C = values.shape[1], j, k
    cdef int64_t p
    if out.shape[1] != m * C or values.shape[0] < mptr[m]:
        raise ValueError("scatter_member_values: out must have m * C columns and values a row per membership")
    for p in range(mptr[m]):
        if mrows[p] < 0 or mrows[p] >= out.shape[0]:
            raise IndexError(f"scatter_member_values: row {mrows[p]} outside out")
    with nogil:
        for j in range(m):
            for p in range(mptr[j], mptr[j + 1]):
                for k in range(C):
                    out[mrows[p], j * C + k] = <float>values[p, k]


cdef inline uint64_t _splitmix(uint64_t seed, uint64_t i) noexcept nogil:
    cdef uint64_t z = seed + i * <uint64_t>0x9E3779B97F4A7C15ULL
    z = (z ^ (z >> 30)) * <uint64_t>0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * <uint64_t>0x94D049BB133111EBULL
    return z ^ (z >> 31)


ctypedef struct _keyed:
    uint64_t key
    int64_t index


cdef inline bint _before(const _keyed *x, const _keyed *y) noexcept nogil:
    return x.key < y.key or (x.key == y.key and x.index < y.index)


cdef void _insertion_sort(_keyed *a, Py_ssize_t n) noexcept nogil:
    """Order a[0..n) by (key, index): for the few entries of one bucket."""
    cdef Py_ssize_t i, j
    cdef _keyed tmp
    for i in range(1, n):
        tmp = a[i]
        j = i - 1
        while j >= 0 and _before(&tmp, &a[j]):
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = tmp


cdef Py_ssize_t _take_prefix(_keyed *a, Py_ssize_t n, const int64_t *sizes, int64_t need,
                             uint8_t *taken, int64_t *total, int64_t *hist) noexcept nogil:
    """Mark in ``taken`` the shortest prefix of a[0..n) in (key, index) order whose sizes
    (``sizes[index]``) sum to at least ``need`` (all n if they fall short); returns its length,
    its size sum in ``total``.  No sort: the sizes are summed per top byte of the key (``hist``,
    256 entries), which finds the byte the prefix ends in; every entry below it is taken, the
    few in it (moved to the front of ``a``) are ordered by insertion and taken while ``need``
    is unmet.  (key, index) is a strict total order (indices are distinct) and the top byte
    is monotone in it, so the prefix is the sorted prefix's.  Membership in the buckets is
    written without branches (a coin flip each, which a branch would mispredict)."""
    cdef Py_ssize_t i, count = 0, n_in = 0
    cdef int64_t cum = 0, below_sum = 0
    cdef int b = 0, top
    cdef _keyed tmp
    total[0] = 0
    if n == 0:
        return 0
    for i in range(256):
        hist[i] = 0
    for i in range(n):
        hist[a[i].key >> 56] += sizes[a[i].index]
    while b < 256 and cum + hist[b] < need:
        cum += hist[b]
        b += 1
    if b == 256:  # all of them fall short
        for i in range(n):
            taken[a[i].index] = 1
        total[0] = cum
        return n
    below_sum = cum
    for i in range(n):
        top = <int>(a[i].key >> 56)
        taken[a[i].index] |= top < b
        count += top < b
        tmp = a[i]
        a[n_in] = tmp
        n_in += top == b
    total[0] = below_sum
    need -= below_sum
    _insertion_sort(a, n_in)
    i = 0
    while i < n_in and need > 0:
        taken[a[i].index] = 1
        count += 1
        total[0] += sizes[a[i].index]
        need -= sizes[a[i].index]
        i += 1
    return count


def group_prefixes(const uint64_t[::1] seeds, const int64_t[::1] codes, const int64_t[::1] sizes,
                   int64_t train_size, uint64_t below, uint8_t[:, ::1] taken):
    """For every seed j: the shortest prefix of the groups in the order of their keys (value
    ``codes[g]`` of the splitmix64 stream at ``seeds[j]``; equal keys by index) whose sizes sum
    to at least ``train_size``, marked in ``taken[j]``.  Only groups whose key is below
    ``below`` are ordered when they hold enough rows (the prefix is then among them), else all.
    Returns the number of groups taken per seed (int64 array); a count equal to the number of
    groups means the prefix took them all."""
    cdef Py_ssize_t m = seeds.shape[0], G = codes.shape[0], j, g, n_cand, n
    cdef int64_t total
    cdef uint64_t k
    cdef _keyed *buf = <_keyed *> malloc((G + 1) * sizeof(_keyed))
    cdef int64_t hist[256]
    counts = np.zeros(m, dtype=np.int64)
    cdef int64_t[::1] cnt = counts
    if buf == NULL:
        raise MemoryError("group_prefixes: could not allocate scratch memory")
    try:
        with nogil:
            for j in range(m):
                n_cand = 0
                total = 0
                for g in range(G):
                    # written always, kept when below (no branch on a coin flip)
                    k = _splitmix(seeds[j], <uint64_t>codes[g])
                    buf[n_cand].key = k
                    buf[n_cand].index = g
                    n_cand += k < below
                    total += sizes[g] * (k < below)
                if total < train_size:
                    n_cand = G
                    for g in range(G):
                        buf[g].key = _splitmix(seeds[j], <uint64_t>codes[g])
                        buf[g].index = g
                if G == 0:
                    cnt[j] = 0
                    continue
                n = _take_prefix(buf, n_cand, &sizes[0], train_size, &taken[j, 0], &total, hist)
                cnt[j] = n if total >= train_size else G
    finally:
        free(buf)
    return counts


def taken_positions(const uint8_t[:, ::1] taken, const int64_t[::1] group_of, int64_t[:, ::1] out):
    """Row j of ``out``: the positions i (increasing) whose group ``group_of[i]`` is marked in
    ``taken[j]``, the rest of the row left as it is; returns each row's count."""
    cdef Py_ssize_t m = taken.shape[0], n = group_of.shape[0], w = out.shape[1], j, i
    cdef int64_t c
    cdef bint over = False
    counts = np.zeros(m, dtype=np.int64)
    scratch = np.empty(n + 1, dtype=np.int64)
    cdef int64_t[::1] cnt = counts
    cdef int64_t[::1] buf = scratch
    for i in range(n):
        if group_of[i] < 0 or group_of[i] >= taken.shape[1]:
            raise IndexError("taken_positions: a group outside taken's columns")
    with nogil:
        for j in range(m):
            # without a branch a row (half of them taken, at random): every position is written
            # at the count so far, which moves on when its group is taken
            c = 0
            for i in range(n):
                buf[c] = i
                c += taken[j, group_of[i]] != 0
            if c > w:
                over = True
                break
            if c > 0:
                memcpy(&out[j, 0], &buf[0], <size_t>c * sizeof(int64_t))
            cnt[j] = c
    if over:
        raise IndexError("taken_positions: a row of out is shorter than its count")
    return counts


# SeedSequence's constants (numpy.random.SeedSequence, after M. E. O'Neill's seed_seq_fe)
cdef uint32_t _INIT_A = 0x43b0d7e5, _MULT_A = 0x931e8875, _INIT_B = 0x8b51f9dd, _MULT_B = 0x58f38ded
cdef uint32_t _MIX_MULT_L = 0xca01f9dd, _MIX_MULT_R = 0x4973f715


cdef inline uint32_t _hashmix(uint32_t value, uint32_t *hash_const) noexcept nogil:
    value ^= hash_const[0]
    hash_const[0] *= _MULT_A
    value *= hash_const[0]
    return value ^ (value >> 16)


cdef inline uint32_t _mix(uint32_t x, uint32_t y) noexcept nogil:
    cdef uint32_t r = _MIX_MULT_L * x - _MIX_MULT_R * y
    return r ^ (r >> 16)


def seed_children(const uint32_t[::1] prefix, uint64_t[::1] out):
    """``out[j] = SeedSequence(...).spawn(len(out))[j].generate_state(1, np.uint64)[0]`` for the
    parent whose assembled entropy (its entropy's 32-bit words, padded with zeros to the pool
    of 4 words, then its spawn key's words) is ``prefix``: child j's entropy is ``prefix``
    followed by j's words (j < 2**32: one word).  SeedSequence's mixing (pool of 4 words) and
    its state generation, compiled: the same values, without a Python object per child."""
    cdef Py_ssize_t m = out.shape[0], L = prefix.shape[0] + 1, j, i, i_src, i_dst
    cdef uint32_t mixer[4]
    cdef uint32_t hc, w, lo, hi
    if m > 0 and <uint64_t>(m - 1) >> 32:
        raise ValueError("seed_children: at most 2**32 children")
    with nogil:
        for j in range(m):
            hc = _INIT_A
            for i in range(4):
                if i < L - 1:
                    w = prefix[i]
                elif i == L - 1:
                    w = <uint32_t>j
                else:
                    w = 0
                mixer[i] = _hashmix(w, &hc)
            for i_src in range(4):
                for i_dst in range(4):
                    if i_src != i_dst:
                        mixer[i_dst] = _mix(mixer[i_dst], _hashmix(mixer[i_src], &hc))
            for i_src in range(4, L):
                w = prefix[i_src] if i_src < L - 1 else <uint32_t>j
                for i_dst in range(4):
                    mixer[i_dst] = _mix(mixer[i_dst], _hashmix(w, &hc))
            hc = _INIT_B
            lo = mixer[0] ^ hc
            hc *= _MULT_B
            lo *= hc
            lo ^= lo >> 16
            hi = mixer[1] ^ hc
            hc *= _MULT_B
            hi *= hc
            hi ^= hi >> 16
            out[j] = <uint64_t>lo | (<uint64_t>hi << 32)


def compact_float_rows(float[:, ::1] full, const int64_t[::1] keep):
    """Move row ``keep[i]`` of ``full`` to row i for every i, in place (``keep`` increasing, so
    ``keep[i] >= i``): runs of consecutive rows by one memmove each, in increasing order, so no
    row is overwritten before it has moved."""
    cdef Py_ssize_t n = keep.shape[0], w = full.shape[1], i = 0, j
    if n == 0:
        return
    if keep[0] < 0 or keep[n - 1] >= full.shape[0]:
        raise IndexError("compact_float_rows: a kept row lies outside the array")
    with nogil:
        while i < n:
            j = i + 1
            while j < n and keep[j] == keep[j - 1] + 1:
                j += 1
            if keep[i] != i:
                memmove(&full[i, 0], &full[keep[i], 0], <size_t>((j - i) * w) * sizeof(float))
            i = j


cdef inline int _bit_length(uint64_t v) noexcept nogil:
    cdef int b = 0
    while v:
        b += 1
        v >>= 1
    return b


cdef int _smallest_one(uint64_t seed, const int64_t *ids, Py_ssize_t n, Py_ssize_t count, uint64_t below,
                       _keyed *cand, _keyed *edge, int64_t *hist, int64_t *out) noexcept nogil:
    """out[0..count): the positions (increasing) of the count ids with the smallest keys
    (splitmix64 value ids[i] under seed), equal keys by position; 0 < count < n.  The ids with
    a key below ``below`` are the candidates (all ids when fewer than count pass); their keys
    are counted per bucket of their top bits (a few candidates a bucket), which finds the
    bucket the count-th smallest lies in; only that bucket is ordered (by insertion), and one
    pass over the candidates in position order writes the chosen ones.  Returns 0, or -1 if
    there were not count ids (cannot happen for 0 < count < n)."""
    cdef Py_ssize_t i, n_c = 0, n_edge = 0, w = 0
    cdef uint64_t k, span
    cdef int64_t cum = 0, nb, b = 0
    cdef int shift, nb_bits
    cdef _keyed tmp, cut
    cdef bint take
    for i in range(n):
        # written always, kept when below (no branch on a coin flip)
        k = _splitmix(seed, <uint64_t>ids[i])
        cand[n_c].key = k
        cand[n_c].index = i
        n_c += k < below
    span = below
    if n_c < count:
        span = 0  # the whole range: 2**64
        for i in range(n):
            cand[i].key = _splitmix(seed, <uint64_t>ids[i])
            cand[i].index = i
        n_c = n
    # buckets of the top bits of the keys' range: about n_c / 4 of them, 16 to 65,536
    nb_bits = _bit_length(<uint64_t>n_c) - 2
    nb_bits = 4 if nb_bits < 4 else (16 if nb_bits > 16 else nb_bits)
    shift = (64 if span == 0 else _bit_length(span - 1)) - nb_bits
    if shift < 0:
        shift = 0
    nb = (<int64_t>1) << nb_bits
    for i in range(nb + 1):
        hist[i] = 0
    for i in range(n_c):
        hist[cand[i].key >> shift] += 1
    while cum + hist[b] < count:
        cum += hist[b]
        b += 1
        if b > nb:
            return -1
    # the bucket of the count-th smallest, ordered; cut: the count-th smallest itself
    for i in range(n_c):
        tmp = cand[i]
        edge[n_edge] = tmp
        n_edge += <int64_t>(tmp.key >> shift) == b
    _insertion_sort(edge, n_edge)
    cut = edge[count - cum - 1]
    for i in range(n_c):
        k = cand[i].key >> shift
        take = <int64_t>k < b or (<int64_t>k == b and not _before(&cut, &cand[i]))
        if take:
            out[w] = cand[i].index
            w += 1
    return 0 if w == count else -1


def smallest_keys(const uint64_t[::1] seeds, const int64_t[::1] ids, uint64_t below, int64_t[:, ::1] out,
                  int n_threads=1):
    """Row j of ``out`` (m, count): the positions (increasing) of the ``count`` ids with the
    smallest keys under ``seeds[j]`` (value ``id`` of the splitmix64 stream,
    ``aflite_fast.phase.partitions.row_keys``), equal keys by position; 0 < count < len(ids).
    ``below``: the keys worth ordering (those of about the count-th smallest and under; when
    fewer than count ids pass it, all are ordered), which changes speed only.  Rows are drawn
    by ``n_threads`` OpenMP threads, each its own: the same result whatever the number."""
    cdef Py_ssize_t m = seeds.shape[0], n = ids.shape[0], count = out.shape[1], j
    cdef int bad = 0
    cdef _keyed *cand
    cdef _keyed *edge
    cdef int64_t *hist
    if out.shape[0] != m:
        raise ValueError(f"smallest_keys: out must have {m} rows")
    if not 0 < count < n:
        raise ValueError(f"smallest_keys: count must be between 1 and {n - 1}, got {count}")
    if n_threads < 1:
        n_threads = 1
    with nogil, parallel(num_threads=n_threads):
        cand = <_keyed *> malloc((n + 1) * sizeof(_keyed))
        edge = <_keyed *> malloc((n + 1) * sizeof(_keyed))
        hist = <int64_t *> malloc(((1 << 16) + 2) * sizeof(int64_t))
        for j in prange(m, schedule="static"):
            if cand == NULL or edge == NULL or hist == NULL:
                bad += 1000
            else:
                bad += _smallest_one(seeds[j], &ids[0], n, count, below, cand, edge, hist, &out[j, 0]) != 0
        free(cand)
        free(edge)
        free(hist)
    if bad >= 1000:
        raise MemoryError("smallest_keys: could not allocate scratch memory")
    if bad:
        raise RuntimeError("smallest_keys: a draw did not find count rows")
