"""AFLite on a Hugging Face ``datasets.Dataset``: :func:`filter_dataset`."""
from aflite_fast.io.arrow import dataset_column, dataset_rows
from aflite_fast.io.sparse import is_sparse


def filter_dataset(ds, embedding_column, label_column, *, groups_column=None, sources_column=None, card=False,
                   **aflite_kwargs):
    """Filter a ``datasets.Dataset`` with AFLite; return the kept rows as a Dataset, and the result.

    The embedding column is read where the dataset holds it (its Arrow buffers, memory-mapped
    for a dataset loaded from disk): a column of fixed-length lists, or of lists that all have
    the same length, is not copied, and rows are converted to float32 a chunk at a time as for
    any other input.  A dataset with an index mapping (after ``select``, ``shuffle`` or
    ``filter``) is read through it.

    Parameters
    ----------
    ds : datasets.Dataset
    embedding_column : str or scipy.sparse matrix
        A column holding one embedding (a list of d numbers) per row; or the rows' features
        themselves as a sparse matrix with one row per row of ``ds`` (e.g. a vectorizer's output
        on a text column; docs/sparse.md).
    label_column : str
        A column holding one label per row (a ``ClassLabel``, integers or strings).
    groups_column : str, optional
        A column holding a group id per row, passed as ``groups=`` (see :func:`aflite_fast.aflite`).
    sources_column : str, optional
        A column holding a source id per row, passed as ``sources=``.
    card : bool, default=False
        Also return the dataset-card section describing the run
        (:func:`aflite_fast.filtering.card.dataset_card`: method and citation, parameters,
        seeds, rows per class and source, phases, the chance check).
    **aflite_kwargs
        Passed to :func:`aflite_fast.aflite` (``target_size`` and ``train_size`` are required).

    Returns
    -------
    kept : datasets.Dataset
        ``ds.select(result.keep)``: the rows AFLite keeps, in their original order.
    result : aflite_fast.AFLiteResult
    card : str
        With ``card=True`` only: the Markdown section, to add to the dataset's README.md.

    Examples
    --------
    >>> kept, result = filter_dataset(ds, "embedding", "label", target_size=10_000,
    ...                               train_size=0.5, random_state=0)  # doctest: +SKIP
    """
    from aflite_fast.filtering.loop import aflite

    if is_sparse(embedding_column):
        X = embedding_column
        if X.shape[0] != len(ds):
            raise ValueError(f"the sparse features have {X.shape[0]} rows, the dataset {len(ds)}: give one row "
                             "of features per row of the dataset")
    else:
        X = dataset_rows(ds, embedding_column)
    y = dataset_column(ds, label_column, "labels")
    if groups_column is not None:
        if "groups" in aflite_kwargs:
            raise ValueError("give groups_column or groups, not both")
        aflite_kwargs["groups"] = dataset_column(ds, groups_column, "group ids")
    if sources_column is not None:
        if "sources" in aflite_kwargs:
            raise ValueError("give sources_column or sources, not both")
        aflite_kwargs["sources"] = dataset_column(ds, sources_column, "source ids")
    result = aflite(X, y, **aflite_kwargs)
    if not card:
        return ds.select(result.keep), result
    from aflite_fast.filtering.card import dataset_card

    features = (f"sparse matrix {X.shape[0]} x {X.shape[1]}, {X.nnz} non-zeros" if is_sparse(embedding_column)
                else embedding_column)
    parameters = dict(embedding_column=features, label_column=label_column, groups_column=groups_column,
                      sources_column=sources_column)
    parameters.update((k, v) for k, v in aflite_kwargs.items() if k not in ("groups", "sources", "client", "progress"))
    return ds.select(result.keep), result, dataset_card(result, parameters)
