"""Values of the loop's mode parameters (``remove=``, ``null=``, ``stop=``), importable without NumPy.

The command line offers them as choices in ``--help`` without importing the numerical
modules; their meaning is in :mod:`aflite_fast.phase.groups` and :mod:`aflite_fast.filtering.null`.
"""

#: ``remove=``: single rows (the paper's rule) or whole groups.
REMOVE_MODES = ("row", "group")
#: ``null=``: no null (None) or label permutations.
NULL_MODES = (None, "permutation")
#: ``stop=``: the paper's "fewer than k rows reach tau", the permutation null, or either; or the
#: phase's held-out balanced accuracy within a margin of chance (:mod:`aflite_fast.filtering.curation`).
STOP_RULES = ("paper", "null", "both", "chance")
#: ``class_quota=``: none, or remove from each class in proportion so the input's distribution stays.
CLASS_QUOTAS = (None, "prior")
#: ``tie_break=``: rows of equal score by the label's held-out probability, or in a random order.
TIE_BREAKS = ("label_prob", "random")
#: ``combine=`` (with ``views``): a row's combined score is the largest of its views' scores or their mean.
COMBINE_RULES = ("max", "mean")
