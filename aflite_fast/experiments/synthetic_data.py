"""Synthetic data of the AFLite paper, section 3: concentric circles plus planted biases.

Le Bras et al. (ICML 2020, section 3 and Figure 2) build two-class data whose true signal is
2-D and not linearly separable (two concentric rings; the label is the ring a point lies on)
and plant a spurious, linearly usable shortcut on part of it:

a. Two rings, class 0 outside (radius 1), class 1 inside (radius ``1 - separation``), each
   point moved by isotropic Gaussian noise; the smaller ``separation``, the more the rings
   overlap. The paper shows four separation levels (:func:`separation_levels`).
b. ``bias_share`` (75% in the paper) of each class carries class-specific spurious features
   drawn from one Gaussian per class; the means lie ``spurious_strength`` standard
   deviations apart, so a linear model can read the label off them. The other rows get
   noise features from one distribution shared by both classes (standard normal, centred
   between the two class means), which carry no information about the label.
c. For the most separated set the paper flips "the labels of some biased samples". A flipped
   row keeps its position on the ring of its original class but its label and its spurious
   features are those of the other class: the bias agrees with the (wrong) label, the
   geometry does not. This is the reading under which the paper's observation holds that
   AFLite removes most flipped rows: a linear model predicts their label from the bias, so
   their predictability score is high. (Were the spurious features left at the original
   class, the flipped rows would be unpredictable and AFLite would keep them all.)

Only a :class:`numpy.random.Generator` is used, seeded from ``random_state``; no global
state. The generator is vectorised NumPy; Numba would add nothing here.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["SyntheticChoices", "SyntheticData", "make_biased_circles", "make_multiple_choice",
           "separation_levels"]

# The four separation levels, most separated first as in the paper's Figure 2. With the
# default noise of 0.1 the two rings are about 5, 3, 2 and 1 noise standard deviations
# apart: from cleanly separable to heavily overlapping for any model of the 2-D points.
_SEPARATION_LEVELS = (0.5, 0.3, 0.2, 0.1)


def separation_levels():
    """Return the four standard separation levels, most separated first.

    Returns
    -------
    levels : tuple of float
        Radial gaps between the outer ring (radius 1) and the inner ring, in the order of
        the paper's Figure 2 (first column: largest separation, the one with flipped labels).
    """
    return _SEPARATION_LEVELS


@dataclass(frozen=True)
class SyntheticData:
    """One synthetic dataset and the truth about how it was made.

    Attributes
    ----------
    X : ndarray of shape (n_samples, 2 + n_spurious), float32
        Columns 0 and 1 are the 2-D ring coordinates; the remaining columns are the spurious
        features (class-specific on biased rows, label-independent noise elsewhere).
    y : ndarray of shape (n_samples,), int64
        Labels in {0, 1}; 0 is the outer ring, 1 the inner ring (before flipping).
    is_biased : ndarray of shape (n_samples,), bool
        True where the spurious features were drawn from the Gaussian of the row's label.
    is_flipped : ndarray of shape (n_samples,), bool
        True where the label was flipped away from the row's ring (always a biased row).
    separation, noise, n_spurious, bias_share, spurious_strength, flip_rate : float or int
        The parameters the data was generated with.
    random_state : int, Generator or None
        The ``random_state`` argument as given.
    """

    X: np.ndarray
    y: np.ndarray
    is_biased: np.ndarray
    is_flipped: np.ndarray
    separation: float
    noise: float
    n_spurious: int
    bias_share: float
    spurious_strength: float
    flip_rate: float
    random_state: object = None

    @property
    def ring(self):
        """Ring each row was drawn on (the label before flipping), int64 array."""
        return np.where(self.is_flipped, 1 - self.y, self.y)


def _check_rings(size_name, size, n_spurious, separation, noise, strength_name, strength):
    """The checks both generators make; returns (size, n_spurious) as ints."""
    size, n_spurious = int(size), int(n_spurious)
    if size < 4:
        raise ValueError(f"{size_name} must be at least 4, got {size}")
    if n_spurious < 1:
        raise ValueError(f"n_spurious must be at least 1, got {n_spurious}")
    if not (np.isfinite(separation) and 0.0 < separation < 1.0):
        raise ValueError(f"separation must lie in (0, 1), got {separation!r}")
    if not (np.isfinite(noise) and noise >= 0.0):
        raise ValueError(f"noise must be a finite number >= 0, got {noise!r}")
    if not (np.isfinite(strength) and strength >= 0.0):
        raise ValueError(f"{strength_name} must be a finite number >= 0, got {strength!r}")
    return size, n_spurious


def _check_fraction(name, value, *, closed_right=True):
    # Plain checks with a readable message; ``assert`` would vanish under ``python -O``.
    ok = 0.0 <= value <= 1.0 if closed_right else 0.0 <= value < 1.0
    if not np.isfinite(value) or not ok:
        bound = "[0, 1]" if closed_right else "[0, 1)"
        raise ValueError(f"{name} must lie in {bound}, got {value!r}")


def make_biased_circles(
    n_samples=5000,
    *,
    separation=0.3,
    noise=0.1,
    n_spurious=4,
    bias_share=0.75,
    spurious_strength=4.0,
    flip_rate=0.0,
    random_state=None,
):
    """Generate concentric rings with planted class-specific spurious features.

    Parameters
    ----------
    n_samples : int, default=5000
        Total number of rows; the two classes get ``n_samples // 2`` and the rest.
    separation : float, default=0.3
        Radial gap between the outer ring (radius 1, class 0) and the inner ring
        (radius ``1 - separation``, class 1). Must lie in (0, 1).
    noise : float, default=0.1
        Standard deviation of the isotropic Gaussian noise added to the 2-D points.
    n_spurious : int, default=4
        Number of spurious feature columns appended after the two ring coordinates.
    bias_share : float, default=0.75
        Share of each class that carries the class-specific spurious features (the paper
        uses 75%). The count per class is rounded to the nearest integer.
    spurious_strength : float, default=4.0
        Distance between the two class means of the spurious Gaussians, in units of their
        (unit) standard deviation. At 4.0 a linear model classifies biased rows about 98%
        correctly from the spurious features alone.
    flip_rate : float, default=0.0
        Share of the biased rows (per class, rounded) whose label is flipped; their
        spurious features follow the flipped label (see the module docstring, c.).
    random_state : int, numpy.random.Generator or None, default=None
        Seed or generator; the output is a function of it alone.

    Returns
    -------
    data : SyntheticData
        The features, labels and masks of biased and flipped rows, plus the parameters.

    Raises
    ------
    ValueError
        If a parameter lies outside its valid range.

    Examples
    --------
    >>> from aflite_fast.experiments.synthetic_data import make_biased_circles
    >>> data = make_biased_circles(1000, separation=0.5, flip_rate=0.1, random_state=0)
    >>> data.X.shape, round(float(data.is_biased.mean()), 2)
    ((1000, 6), 0.75)
    """
    n_samples, n_spurious = _check_rings("n_samples", n_samples, n_spurious, separation, noise,
                                         "spurious_strength", spurious_strength)
    _check_fraction("bias_share", bias_share)
    _check_fraction("flip_rate", flip_rate)

    rng = np.random.default_rng(random_state)
    n_per_class = (n_samples - n_samples // 2, n_samples // 2)
    ring = np.repeat(np.array([0, 1], dtype=np.int64), n_per_class)

    # a. Points on the two rings, uniform in angle, then isotropic noise.
    radius = np.where(ring == 0, 1.0, 1.0 - separation)
    angle = rng.uniform(0.0, 2.0 * np.pi, size=n_samples)
    points = np.column_stack([radius * np.cos(angle), radius * np.sin(angle)])
    points += rng.normal(0.0, noise, size=points.shape)

    # b./c. Choose biased rows per class (an exact share, so "75% of each class" holds), and
    # flipped rows among them; then draw the spurious block from the final label.
    is_biased = np.zeros(n_samples, dtype=bool)
    is_flipped = np.zeros(n_samples, dtype=bool)
    start = 0
    for n_c in n_per_class:
        rows = start + rng.permutation(n_c)
        n_biased = int(round(bias_share * n_c))
        n_flipped = int(round(flip_rate * n_biased))
        is_biased[rows[:n_biased]] = True
        is_flipped[rows[:n_flipped]] = True
        start += n_c
    y = np.where(is_flipped, 1 - ring, ring)

    # Class means +-strength/2 along the diagonal unit vector: their distance is exactly
    # ``spurious_strength`` whatever n_spurious is, so the bias is equally strong.
    direction = np.full(n_spurious, 1.0 / np.sqrt(n_spurious))
    spurious = rng.standard_normal((n_samples, n_spurious))
    sign = np.where(y == 1, 1.0, -1.0)
    spurious[is_biased] += (0.5 * spurious_strength * sign[is_biased])[:, None] * direction

    # Shuffle so that row order says nothing about class or bias.
    order = rng.permutation(n_samples)
    X = np.hstack([points, spurious])[order].astype(np.float32)
    return SyntheticData(
        X=X,
        y=y[order].astype(np.int64),
        is_biased=is_biased[order],
        is_flipped=is_flipped[order],
        separation=float(separation),
        noise=float(noise),
        n_spurious=n_spurious,
        bias_share=float(bias_share),
        spurious_strength=float(spurious_strength),
        flip_rate=float(flip_rate),
        random_state=random_state,
    )


@dataclass(frozen=True)
class SyntheticChoices:
    """One synthetic multiple-choice dataset (:func:`make_multiple_choice`) and its truth.

    Attributes
    ----------
    X : ndarray of shape (n_items, n_candidates, 2 + n_spurious), float32
        Per candidate: its 2-D point (columns 0, 1) and the spurious columns (the artifact is
        column 2).
    y : ndarray of shape (n_items,), int64
        The right candidate of each item.
    has_artifact : ndarray of shape (n_items,), bool
        True where the right candidate carries the planted artifact.
    separation, noise, n_spurious, artifact_share, artifact_strength : float or int
        The parameters the data was generated with.
    """

    X: np.ndarray
    y: np.ndarray
    has_artifact: np.ndarray
    separation: float
    noise: float
    n_spurious: int
    artifact_share: float
    artifact_strength: float


def make_multiple_choice(
    n_items=4000,
    *,
    n_candidates=4,
    separation=0.4,
    noise=0.1,
    n_spurious=4,
    artifact_share=0.5,
    artifact_strength=3.0,
    random_state=None,
):
    """Generate multiple-choice items whose real signal a linear scorer cannot read, with a
    planted artifact on the right answer of a share of them.

    a. Every candidate is a 2-D point at a uniform angle: the right one on the inner ring
       (radius ``1 - separation``), the others on the outer ring (radius 1), each moved by
       isotropic Gaussian noise.  Which candidate is right is a function of its distance from
       the origin: a non-linear scorer reads it, a linear scorer ``w . x`` cannot (its scores
       do not depend on the radius, the angles being uniform).
    b. ``n_spurious`` more columns per candidate, standard normal; in ``artifact_share`` of
       the items (an exact count, rounded) the right candidate's first spurious column is
       shifted by ``artifact_strength``: an annotation artifact that a linear scorer reads.
    c. The right candidate's position is uniform over the ``n_candidates`` positions.

    Parameters
    ----------
    n_items : int, default=4000
    n_candidates : int, default=4
        K, at least 2.
    separation : float, default=0.4
        Radial gap between the rings, in (0, 1).
    noise : float, default=0.1
        Standard deviation of the noise of the 2-D points.
    n_spurious : int, default=4
        Spurious columns (at least 1; the first carries the artifact).
    artifact_share : float, default=0.5
        Share of the items whose right candidate carries the artifact, in [0, 1].
    artifact_strength : float, default=3.0
        Shift of the artifact column, in standard deviations.
    random_state : int, numpy.random.Generator or None

    Returns
    -------
    SyntheticChoices

    Examples
    --------
    >>> from aflite_fast.experiments.synthetic_data import make_multiple_choice
    >>> data = make_multiple_choice(1000, random_state=0)
    >>> data.X.shape, round(float(data.has_artifact.mean()), 2)
    ((1000, 4, 6), 0.5)
    """
    n_items, n_spurious = _check_rings("n_items", n_items, n_spurious, separation, noise, "artifact_strength",
                                       artifact_strength)
    n_candidates = int(n_candidates)
    if n_candidates < 2:
        raise ValueError(f"n_candidates must be at least 2, got {n_candidates}")
    _check_fraction("artifact_share", artifact_share)

    rng = np.random.default_rng(random_state)
    n, K = n_items, n_candidates
    y = rng.integers(0, K, size=n)
    right = np.zeros((n, K), dtype=bool)
    right[np.arange(n), y] = True
    radius = np.where(right, 1.0 - separation, 1.0)
    angle = rng.uniform(0.0, 2.0 * np.pi, size=(n, K))
    points = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=-1)
    points += rng.normal(0.0, noise, size=points.shape)
    spurious = rng.standard_normal((n, K, n_spurious))
    has_artifact = np.zeros(n, dtype=bool)
    has_artifact[rng.permutation(n)[:int(round(artifact_share * n))]] = True
    spurious[np.flatnonzero(has_artifact), y[has_artifact], 0] += artifact_strength
    X = np.concatenate([points, spurious], axis=-1).astype(np.float32)
    return SyntheticChoices(X=X, y=y.astype(np.int64), has_artifact=has_artifact, separation=float(separation),
                            noise=float(noise), n_spurious=n_spurious, artifact_share=float(artifact_share),
                            artifact_strength=float(artifact_strength))
