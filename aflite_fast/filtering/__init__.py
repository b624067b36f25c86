"""Deciding what to drop: the public entry points and the AFLite loop.

- :mod:`.problem`: the problem step every entry point shares (open and validate the inputs,
  resolve the loss, scan the rows, check their scale) and the checked phase call.
- :mod:`.loop`: :func:`~aflite_fast.aflite`, the loop of phases, slices and stop rules;
  :mod:`.selection`: which rows a phase removes.
- :mod:`.predictability`: one phase of scores without removal.
- :mod:`.null`, :mod:`.chance`: label permutations and the chance check of phase 0.
- :mod:`.checkpoint`: the loop's state saved after every phase.
- :mod:`.modes`: the values of ``remove=``, ``null=``, ``stop=`` and ``tie_break=`` without NumPy.
- :mod:`.filter_evaluation`: :func:`~aflite_fast.evaluate_filter`, the kept set against random
  subsets.
- :mod:`.oof`, :mod:`.label_issues`: out-of-sample probabilities and the label issues ranked
  from them.
- :mod:`.estimators`: ``AFLite(...).fit_resample`` and ``RobustLogisticRegression``.
- :mod:`.hf_datasets`: ``filter_dataset`` for a Hugging Face ``datasets.Dataset``.

Importing this package loads nothing.
"""
