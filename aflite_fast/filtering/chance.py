"""The chance check of every AFLite run: are phase 0's rows at or above tau more than chance gives?

Held-out predictions repeat across partitions, so even labels that carry nothing leave many rows
at or above tau, and the paper's stopping rule is passed by chance: on Gaussian X with labels
drawn independently, the default settings remove most of the rows, mostly of the majority class.
The check tells the user so, in every run, at the cost of a few more scorings of phase 0:

a. What: phase 0's partitions scored again with the labels permuted :data:`N_PERMUTATIONS`
   times, by the permutation null of :mod:`aflite_fast.filtering.null` (the same seeds, so permutation i
   is the one ``null="permutation"`` draws in phase 0; a run that already scores that many
   permutations in phase 0 reuses them and pays nothing more), and its rows at or above tau
   counted as the observed ones are.
b. The rule: the run "looks like chance" when phase 0's observed count does not exceed the
   permuted counts' mean by the margin of ``stop="null"``
   (:func:`aflite_fast.filtering.null.summarize`: ``3 * max(std, sqrt(mean)) * sqrt(1 + 1/n)``).
c. Then :func:`aflite` warns with :class:`ChanceWarning` (unless ``stop`` already applies the
   null, which removes nothing in that case) and the command line prints one line containing
   "chance"; both name ``stop="null"`` / ``--stop null``.  The check is recorded in the result
   (``AFLiteResult.chance``) and in report.json (``chance_check``).  It never changes what the
   run removes.
d. Cost: each permutation costs about one cold-started phase 0 (docs/null.md); benchmarks/RESULTS.md
   ("Chance check cost") gives its share of an SNLI-scale run.  ``chance_check=False``
   (``--no-chance-check``) skips it.
"""
import warnings
from dataclasses import dataclass, field
from typing import List, Optional

from aflite_fast.filtering.null import summarize

#: Label permutations of the chance check (at least 2, so that their spread is measured).
N_PERMUTATIONS = 3


class ChanceWarning(UserWarning):
    """Phase 0 of an AFLite run found no more rows at or above tau than permuted labels do
    (:mod:`aflite_fast.filtering.chance`): what the run removes may be chance, not bias."""


@dataclass
class ChanceCheck:
    """Phase 0's rows at or above tau, observed and under label permutations.

    Attributes
    ----------
    n_active : int
        Rows active in phase 0.
    tau : float
    n_above_tau : int
        Observed rows at or above tau in phase 0.
    null_above_tau : list of int
        The same count under each label permutation.
    null_mean, null_std, margin : float
        Mean and standard deviation (None for one permutation) of those counts, and the
        excess over the mean the observed count must reach (:func:`aflite_fast.filtering.null.summarize`).
    by_chance : bool
        True when ``n_above_tau <= null_mean + margin``.
    seconds : float
        Time spent scoring the permutations (0 when they were reused from ``null=``).
    """

    n_active: int
    tau: float
    n_above_tau: int
    null_above_tau: List[int] = field(default_factory=list)
    null_mean: float = 0.0
    null_std: Optional[float] = None
    margin: float = 0.0
    by_chance: bool = False
    seconds: float = 0.0

    @classmethod
    def from_counts(cls, n_active, tau, n_above_tau, counts, seconds=0.0):
        s = summarize(counts)
        return cls(n_active=int(n_active), tau=float(tau), n_above_tau=int(n_above_tau),
                   null_above_tau=s.counts, null_mean=s.mean, null_std=s.std, margin=s.margin,
                   by_chance=bool(s.within(n_above_tau)), seconds=float(seconds))

    @classmethod
    def from_dict(cls, d):
        return None if d is None else cls(**d)

    def as_dict(self):
        return dict(self.__dict__)

    def message(self):
        """One sentence for the warning (and the command line)."""
        verdict = "do not exceed" if self.by_chance else "exceed"
        return (f"chance check: phase 0 found {self.n_above_tau} of {self.n_active} rows at or above "
                f"tau={self.tau:g}, and {self.null_mean:.0f} (mean of {len(self.null_above_tau)} label "
                f"permutations) with the labels permuted; the observed rows {verdict} that by the "
                f"margin of the null stop rule ({self.margin:.0f})")


def _advice(check, stop, flags):
    """The warning's text, or None when no warning is due (module docstring, c)."""
    if check is None or not check.by_chance or stop != "paper":
        return None
    rerun = ("--null permutation --n-null 3 --stop null" if flags
             else "null='permutation', n_null=3, stop='null' (command line: --null permutation --n-null 3 --stop null)")
    return f"{check.message()}: what this run removes may be chance, not bias; rerun with {rerun}, which removes only what exceeds chance"


def warn_if_chance(check, stop, stacklevel=3):
    """:class:`ChanceWarning` when ``check`` looks like chance and ``stop`` does not use the null."""
    text = _advice(check, stop, flags=False)
    if text:
        warnings.warn(text, ChanceWarning, stacklevel=stacklevel)


def chance_line(check, stop):
    """The command line's one line (without its prefix), or None when no warning is due."""
    return _advice(check, stop, flags=True)
