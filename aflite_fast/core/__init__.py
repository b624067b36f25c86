"""The compiled kernel and its Python side: batched multinomial logistic regression.

- :mod:`.compiled`: the extension ``_kernel`` (Cython + ``csrc/``), imported with a readable
  error when it was not built.
- :mod:`.solver`: solver options and status names, training a block of models on their member
  rows (preconditioned L-BFGS), and the split solver the Dask backend drives.
- :mod:`.prediction`: held-out prediction and the per-row counts it accumulates.
- :mod:`.preconditioner`: the solver's shared initial inverse Hessian: its forms, its sample,
  its memory, and the choice of form under a budget.
- :mod:`.layout`: the kernel's row buffers, row blocks, super-blocks and the reduction tree of
  a phase's sums.
- :mod:`.losses`, :mod:`.loss_names`, :mod:`.user_losses`: the loss registry, its parameters
  and checks (the forward correction's T), Numba-compiled user losses.
- :mod:`.solver_status`, :mod:`.degenerate`: what callers may report from a solver result, and
  the inputs on which no model can learn.

Importing this package loads nothing; the NumPy-free :mod:`.loss_names` serves ``--help``.
"""
