"""Texts to feature matrices: each text column of a table becomes a view of its rows.

a. Featurizers (``featurizer=``, the command line's ``--featurizer``):

   - ``"ngrams"`` (the default): scikit-learn's ``HashingVectorizer``, word 1- and 2-grams
     hashed into :data:`NGRAM_FEATURES` columns, counts (no sign flipping, no normalisation),
     a float32 CSR matrix.  Stateless: a row's features depend on its text alone.
   - ``"tfidf"``: scikit-learn's ``TfidfVectorizer`` on word 1- and 2-grams, fitted on the
     column itself (no labels are read), a float32 CSR matrix.
   - ``"sentence-transformers:MODEL"``: the ``sentence-transformers`` model MODEL (a name of
     the Hugging Face hub or a local directory; the ``[embed]`` extra, imported only here), on
     ``device``, in batches, with a progress bar; the vectors are stored as float16.  With
     ``cache_dir`` they are written there as ``.npy`` shards of :data:`SHARD_ROWS` rows, named
     by the column, the model and a digest of the texts, so a rerun on the same texts reads
     them instead of embedding again (a run stopped midway keeps its finished shards); the view
     is then the list of shard paths, read a chunk at a time as any other shards.

b. The sparse matrices are passed as they are (never densified) to the same problem step as
   dense views (:mod:`aflite_fast.filtering.views`).
"""
import hashlib
import os
import re

import numpy as np

#: Hashed columns of ``featurizer="ngrams"``.
NGRAM_FEATURES = 1 << 18
#: Word n-grams of the scikit-learn featurizers.
NGRAM_RANGE = (1, 2)
#: The featurizers without a model (a).
FEATURIZERS = ("ngrams", "tfidf")
#: Prefix of a sentence-transformers featurizer: ``"sentence-transformers:MODEL"``.
ST_PREFIX = "sentence-transformers:"
#: Rows per cached embedding shard.
SHARD_ROWS = 4096
#: Texts per call of the embedding model.
BATCH_SIZE = 64
#: The extra that installs sentence-transformers.
EMBED_EXTRA = "embed"


def parse_featurizer(featurizer):
    """``(kind, model)`` of ``featurizer``: ``("ngrams", None)``, ``("tfidf", None)`` or
    ``("sentence-transformers", MODEL)``; ValueError for anything else."""
    if featurizer in FEATURIZERS:
        return featurizer, None
    if isinstance(featurizer, str) and featurizer.startswith(ST_PREFIX) and featurizer[len(ST_PREFIX):].strip():
        return "sentence-transformers", featurizer[len(ST_PREFIX):].strip()
    raise ValueError(f"featurizer must be 'ngrams', 'tfidf' or 'sentence-transformers:MODEL', got {featurizer!r}")


def featurize(texts, featurizer="ngrams", *, name="text", cache_dir=None, device=None, batch_size=BATCH_SIZE,
              progress=True):
    """The feature matrix of ``texts`` (a list of str, one per row) by ``featurizer`` (module
    docstring, a).

    Parameters
    ----------
    texts : list of str
    featurizer : str, default="ngrams"
        ``"ngrams"``, ``"tfidf"`` or ``"sentence-transformers:MODEL"``.
    name : str, default="text"
        The column's name (the cached shards' names start with it).
    cache_dir : str or os.PathLike, optional
        sentence-transformers only: where the embedding shards are cached.
    device : str, optional
        sentence-transformers only: the model's device (``"cpu"``, ``"cuda"``, ...; None: its choice).
    batch_size : int, default=64
        sentence-transformers only: texts per call of the model.
    progress : bool, default=True
        sentence-transformers only: a progress bar over the rows embedded.

    Returns
    -------
    scipy.sparse.csr_matrix (float32) for ``ngrams`` and ``tfidf``; for sentence-transformers a
    float16 ndarray (N, d), or with ``cache_dir`` the list of its ``.npy`` shard paths.
    """
    kind, model = parse_featurizer(featurizer)
    if kind != "sentence-transformers" and device is not None:
        raise ValueError(f"device applies to a sentence-transformers featurizer, not {featurizer!r}")
    if kind == "ngrams":
        from sklearn.feature_extraction.text import HashingVectorizer

        vectorizer = HashingVectorizer(n_features=NGRAM_FEATURES, ngram_range=NGRAM_RANGE, alternate_sign=False,
                                       norm=None, dtype=np.float32)
        return vectorizer.transform(texts).tocsr()
    if kind == "tfidf":
        from sklearn.feature_extraction.text import TfidfVectorizer

        try:
            return TfidfVectorizer(ngram_range=NGRAM_RANGE, dtype=np.float32).fit_transform(texts).tocsr()
        except ValueError as exc:  # "empty vocabulary": no text has a word of two letters or more
            raise ValueError(f"tfidf of column {name!r}: {exc}") from None
    return embed(texts, model, name=name, cache_dir=cache_dir, device=device, batch_size=batch_size,
                 progress=progress)


def _sentence_transformers():
    try:
        import sentence_transformers
    except ImportError as exc:
        raise ImportError("featurizer 'sentence-transformers:MODEL' needs sentence-transformers, which is not "
                          f"installed: pip install '.[{EMBED_EXTRA}]' in a clone of aflite_fast (or pip install "
                          "sentence-transformers)") from exc
    return sentence_transformers


def texts_digest(texts):
    """SHA-256 of the texts in order (each prefixed by its length, so no two lists share one)."""
    h = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def shard_folder(cache_dir, name, model, texts):
    """The folder of the cached shards of column ``name`` embedded by ``model``."""
    safe = lambda s: re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("._") or "_"  # noqa: E731
    key = hashlib.sha256(f"{model}\0{texts_digest(texts)}".encode()).hexdigest()[:16]
    return os.path.join(os.fspath(cache_dir), "embeddings", f"{safe(name)}-{safe(model)}-{key}")


def embed(texts, model, *, name="text", cache_dir=None, device=None, batch_size=BATCH_SIZE, progress=True):
    """``texts`` embedded by the sentence-transformers ``model`` as float16 (module docstring, a)."""
    from tqdm.auto import tqdm

    n = len(texts)
    folder = None if cache_dir is None else shard_folder(cache_dir, name, model, texts)
    paths = [None if folder is None else os.path.join(folder, f"part-{i:05d}.npy")
             for i in range((n + SHARD_ROWS - 1) // SHARD_ROWS)]
    todo = [i for i, p in enumerate(paths) if p is None or not os.path.isfile(p)]
    encoder, parts = None, {}
    if todo:
        encoder = _sentence_transformers().SentenceTransformer(model, device=device)
        if folder is not None:
            os.makedirs(folder, exist_ok=True)
    with tqdm(total=sum(min(SHARD_ROWS, n - i * SHARD_ROWS) for i in todo), disable=not progress, unit="text",
              desc=f"embedding {name}") as bar:
        for i in todo:
            chunk = texts[i * SHARD_ROWS:(i + 1) * SHARD_ROWS]
            vectors = np.asarray(encoder.encode(chunk, batch_size=batch_size, show_progress_bar=False,
                                                convert_to_numpy=True))
            if vectors.ndim != 2 or vectors.shape[0] != len(chunk):
                raise ValueError(f"model {model!r} returned an array of shape {vectors.shape} for {len(chunk)} texts")
            half = vectors.astype(np.float16)
            if not np.isfinite(half).all():
                raise ValueError(f"model {model!r} gave values that are not finite in float16 (beyond 65504) "
                                 f"for column {name!r}")
            if folder is None:
                parts[i] = half
            else:  # written whole or not at all: a shard that exists is complete
                tmp = paths[i] + ".tmp.npy"
                np.save(tmp, half)
                os.replace(tmp, paths[i])
            bar.update(len(chunk))
    if folder is not None:
        return paths
    return np.concatenate([parts[i] for i in range(len(paths))]) if paths else np.empty((0, 0), np.float16)


def text_views(texts, featurizer="ngrams", **kwargs):
    """{column: feature matrix} of ``texts`` ({column: list of str}), each column by
    :func:`featurize` (``kwargs`` its keywords)."""
    return {name: featurize(column, featurizer, name=name, **kwargs) for name, column in texts.items()}
