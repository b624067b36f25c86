"""What stops a backend's phase for good (as opposed to a lost worker, which a phase survives)."""


class ClusterLost(RuntimeError):
    """The cluster can no longer score a phase: every worker was lost (and none joined in
    time), the rows of X could not be read on any worker left, or the workers holding the
    same rows kept being lost.  A lost worker alone is not this: its rows go to the other
    workers and the phase goes on (docs/dask.md).  ``aflite-fast`` exits with
    :data:`aflite_fast.cli.EXIT_CLUSTER_LOST` on it; a run with a checkpoint resumes from
    the last phase it finished."""


__all__ = ["ClusterLost"]
