"""AFLite on a Hugging Face ``datasets.Dataset``: :func:`filter_dataset`."""
from aflite_fast.io.arrow import dataset_column, dataset_rows
from aflite_fast.io.sparse import is_sparse


def filter_dataset(ds, embedding_column=None, label_column=None, *, text_columns=None, featurizer="ngrams",
                   cache_dir=None, device=None, groups_column=None, sources_column=None, card=False,
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
    embedding_column : str or scipy.sparse matrix, optional
        A column holding one embedding (a list of d numbers) per row; or the rows' features
        themselves as a sparse matrix with one row per row of ``ds`` (e.g. a vectorizer's output
        on a text column; docs/sparse.md).  Needed unless ``text_columns`` is given; with both,
        the embeddings are one more view, named by the column (a column name only).
    label_column : str
        A column holding one label per row (a ``ClassLabel``, integers or strings).
    text_columns : list of str, optional
        Columns of texts: each becomes a view of the rows (``aflite(..., views=)``), featurized by
        ``featurizer`` (:func:`aflite_fast.filtering.text.featurize`); a missing, empty or blank
        text is a ValueError naming its column and row.
    featurizer : str, default="ngrams"
        With ``text_columns``: ``"ngrams"`` (hashed word 1-2-gram counts, sparse), ``"tfidf"``
        (sparse) or ``"sentence-transformers:MODEL"`` (float16 vectors; the ``[embed]`` extra).
    cache_dir, device : optional
        With a sentence-transformers featurizer: where its embedding shards are cached (a rerun
        on the same texts reads them), and the model's device.
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

    if label_column is None:
        raise ValueError("filter_dataset needs label_column (the column of labels)")
    if text_columns is None:
        if embedding_column is None:
            raise ValueError("filter_dataset needs embedding_column or text_columns")
        if is_sparse(embedding_column):
            X = embedding_column
            if X.shape[0] != len(ds):
                raise ValueError(f"the sparse features have {X.shape[0]} rows, the dataset {len(ds)}: give one "
                                 "row of features per row of the dataset")
        else:
            X = dataset_rows(ds, embedding_column)
        y = dataset_column(ds, label_column, "labels")
    else:
        if is_sparse(embedding_column):
            raise ValueError("with text_columns, embedding_column must name a column of the dataset (a sparse "
                             "matrix of features goes without text_columns, or as views=)")
        from aflite_fast.filtering.text import text_views
        from aflite_fast.io.texts import read_text_table

        if "views" in aflite_kwargs:
            raise ValueError("give text_columns or views, not both")
        texts, (y,) = read_text_table(ds, list(text_columns), [(label_column, "labels")])
        views = {} if embedding_column is None else {embedding_column: dataset_rows(ds, embedding_column)}
        overlap = set(views) & set(texts)
        if overlap:
            raise ValueError(f"column {overlap.pop()!r} is both embedding_column and a text column")
        views.update(text_views(texts, featurizer, cache_dir=cache_dir, device=device,
                                progress=aflite_kwargs.get("progress", True)))
        X, aflite_kwargs["views"] = None, views
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
    if text_columns is not None:
        parameters.update(text_columns=list(text_columns), featurizer=featurizer)
    parameters.update((k, v) for k, v in aflite_kwargs.items()
                      if k not in ("groups", "sources", "client", "progress", "views"))
    return ds.select(result.keep), result, dataset_card(result, parameters)
