"""Embedding-like benchmark data: skewed feature variances, a shared offset, noisy linear labels.

Why not isotropic Gaussians: on ``N(0, I)`` features a multinomial logistic regression is
well conditioned and L-BFGS converges in under ten steps, which hides the solver's cost and
flatters every implementation. Real embeddings from a warm-up model look different:

a. their covariance spectrum decays like a power law (a few directions carry most of the
   variance, hundreds carry little), and the principal axes are not aligned with the
   coordinates;
b. all rows share a large common offset (nonzero mean; e.g. the anisotropy of transformer
   embeddings), which couples the intercept with every weight;
c. labels depend on the features linearly but noisily, and part of the signal lies in
   low-variance directions.

Each of these worsens the conditioning of the logistic loss; together they make
``sklearn.linear_model.LogisticRegression(C=1.0)`` (lbfgs) need 100+ iterations at
N=20000, d=768, C=3, t=10000, as the design document measured on real-looking data.

Run ``python benchmarks/skewed_data.py`` to print sklearn's ``n_iter_`` on this data.
"""

import numpy as np

__all__ = ["make_skewed_embeddings", "write_skewed_embeddings"]


def make_skewed_embeddings(
    n_samples=20000,
    n_features=768,
    n_classes=3,
    *,
    decay=1.0,
    offset_scale=1.0,
    signal=1.0,
    low_variance_signal=0.5,
    random_state=0,
):
    """Generate an embedding-like classification problem.

    Parameters
    ----------
    n_samples : int
        Number of rows N.
    n_features : int
        Embedding dimension d.
    n_classes : int
        Number of classes C (>= 2).
    decay : float
        Exponent of the power-law variance spectrum: the i-th principal direction has
        standard deviation ``(i + 1) ** (-decay / 2)`` (variance ``(i + 1) ** -decay``).
    offset_scale : float
        Norm of the shared offset added to every row, relative to the total standard
        deviation of the centred data.
    signal : float
        Scale of the class logits; larger means labels are more predictable.
    low_variance_signal : float
        Share of the weight vector placed on directions in whitened coordinates
        (so that low-variance directions are informative too), in [0, 1].
    random_state : int
        Seed; the data are a function of the parameters and this seed alone.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features), float32
        Embeddings, C-contiguous.
    y : ndarray of shape (n_samples,), int64
        Labels in 0..n_classes-1.
    """
    if n_classes < 2:
        raise ValueError(f"n_classes must be >= 2, got {n_classes}")
    rng = np.random.default_rng(random_state)
    d = n_features

    # (a) power-law spectrum, random rotation
    std = (np.arange(1, d + 1, dtype=np.float64)) ** (-decay / 2.0)
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    q *= np.sign(np.diag(r))  # Haar-distributed rotation
    z = rng.standard_normal((n_samples, d))  # latent whitened coordinates

    # (c) class logits: a mix of weights on the raw (variance-weighted) latent and on the
    # whitened latent, so that both high- and low-variance directions carry signal.
    w_raw = rng.standard_normal((d, n_classes)) * std[:, None]
    w_raw /= np.linalg.norm(z[:2000] * std @ w_raw, axis=0).mean() / np.sqrt(2000)
    w_white = rng.standard_normal((d, n_classes)) / np.sqrt(d)
    logits = (1.0 - low_variance_signal) * (z * std) @ w_raw + low_variance_signal * z @ w_white
    logits *= signal * 3.0
    # Gumbel noise: labels drawn from softmax(logits), i.e. a true multinomial logit model
    logits += rng.gumbel(size=logits.shape)
    y = np.argmax(logits, axis=1).astype(np.int64)

    x = (z * std) @ q.T
    # (b) shared offset
    offset = rng.standard_normal(d)
    offset *= offset_scale * np.sqrt(np.sum(std**2)) / np.linalg.norm(offset)
    x += offset
    return np.ascontiguousarray(x, dtype=np.float32), y


def write_skewed_embeddings(path, n_samples, n_features=1024, n_classes=3, *, chunk=25_000, decay=1.0,
                            offset_scale=1.0, signal=1.0, low_variance_signal=0.5, random_state=0):
    """The recipe of :func:`make_skewed_embeddings`, written to a float32 ``.npy`` chunk by chunk.

    For files larger than memory (SNLI scale: 550,000 x 1024 is 2.25 GB): the spectrum,
    rotation, class weights and offset are drawn once from ``random_state``; rows are drawn
    chunk by chunk from ``SeedSequence(random_state).spawn`` children.  The data follow the
    same distribution as ``make_skewed_embeddings`` (not the same values).  Returns the
    labels (int64).
    """
    rng = np.random.default_rng(random_state)
    d = n_features
    std = (np.arange(1, d + 1, dtype=np.float64)) ** (-decay / 2.0)
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    q *= np.sign(np.diag(r))
    z0 = rng.standard_normal((2000, d))
    w_raw = rng.standard_normal((d, n_classes)) * std[:, None]
    w_raw /= np.linalg.norm(z0 * std @ w_raw, axis=0).mean() / np.sqrt(2000)
    w_white = rng.standard_normal((d, n_classes)) / np.sqrt(d)
    offset = rng.standard_normal(d)
    offset *= offset_scale * np.sqrt(np.sum(std**2)) / np.linalg.norm(offset)
    qt = (q.T * 1.0).astype(np.float64)
    X = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n_samples, d))
    y = np.empty(n_samples, dtype=np.int64)
    seeds = np.random.SeedSequence(random_state).spawn(-(-n_samples // chunk))
    for i, s0 in enumerate(range(0, n_samples, chunk)):
        s1 = min(n_samples, s0 + chunk)
        g = np.random.default_rng(seeds[i])
        z = g.standard_normal((s1 - s0, d))
        logits = (1.0 - low_variance_signal) * (z * std) @ w_raw + low_variance_signal * z @ w_white
        logits = logits * (signal * 3.0) + g.gumbel(size=logits.shape)
        y[s0:s1] = np.argmax(logits, axis=1)
        X[s0:s1] = (z * std) @ qt + offset
    X.flush()
    del X
    return y


def _report(n_samples=20000, n_features=768, n_classes=3, train_size=10000, seed=0):
    """Fit sklearn's LogisticRegression on a random training set and print its n_iter_."""
    import time

    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    X, y = make_skewed_embeddings(n_samples, n_features, n_classes, random_state=seed)
    rng = np.random.default_rng(seed + 1)
    tr = np.sort(rng.choice(n_samples, train_size, replace=False))
    te = np.setdiff1d(np.arange(n_samples), tr)
    print(f"N={n_samples} d={n_features} C={n_classes} t={train_size}")
    print(f"class shares: {np.bincount(y, minlength=n_classes) / n_samples}")
    print(f"mean row norm {np.linalg.norm(X, axis=1).mean():.3f}, "
          f"norm of mean {np.linalg.norm(X.mean(0)):.3f}")
    ev = np.linalg.eigvalsh(np.cov(X[:5000].T.astype(np.float64)))[::-1]
    print(f"covariance eigenvalues: top {ev[0]:.3g}, 10th {ev[9]:.3g}, 100th {ev[99]:.3g}, "
          f"last {ev[-1]:.3g}")
    with threadpool_limits(limits=2):
        for tol in (1e-4, 1e-6):
            clf = LogisticRegression(C=1.0, max_iter=10000, tol=tol)
            t0 = time.perf_counter()
            clf.fit(X[tr], y[tr])
            dt = time.perf_counter() - t0
            acc_tr = clf.score(X[tr], y[tr])
            acc_te = clf.score(X[te], y[te])
            print(f"tol={tol:g}: n_iter_={clf.n_iter_[0]} fit {dt:.2f} s "
                  f"train acc {acc_tr:.3f} held-out acc {acc_te:.3f}")
        # for contrast: isotropic Gaussian data with the same labels' structure
        Xi = rng.standard_normal(X.shape).astype(np.float32)
        yi = np.argmax(Xi[:, :n_classes] * 2 + rng.gumbel(size=(n_samples, n_classes)), 1)
        clf = LogisticRegression(C=1.0, max_iter=10000, tol=1e-4).fit(Xi[tr], yi[tr])
        print(f"isotropic Gaussian contrast (tol=1e-4): n_iter_={clf.n_iter_[0]}")


if __name__ == "__main__":
    _report()
