"""Text in: text columns read and checked (aflite_fast.io.texts), featurized
(aflite_fast.filtering.text), filtered through the command line and filter_dataset.

sentence-transformers (and torch) are not installed where these tests run, and the tests never
download: a tiny stand-in module (``_TinyModel``) plays the model, a fixed projection of hashed
n-grams to 16 dense numbers.  The n-gram and tf-idf featurizers give sparse matrices, which the
package's phase takes once sparse rows are supported: their end-to-end tests run then
(``sparse_supported()``), and the featurizers themselves are tested now.
"""
import json
import os
import sys
import types
import warnings

import numpy as np
import pytest

from aflite_fast import aflite
from aflite_fast.cli import main
from aflite_fast.filtering.text import NGRAM_FEATURES, featurize, shard_folder
from aflite_fast.io.texts import read_text_table

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

N = 600
WORDS = np.array("the a of cat dog runs sat mat big small red blue green fast slow".split())


def sparse_supported():
    """True when the package scores sparse rows (a tiny run is the capability check)."""
    import scipy.sparse

    from aflite_fast import predictability

    X = scipy.sparse.csr_matrix(np.tile(np.eye(4, dtype=np.float32), (4, 1)))
    try:
        predictability(X, np.tile([0, 1], 8), n_partitions=2, train_size=8, random_state=0)
    except (TypeError, ValueError) as exc:
        if "sparse" in str(exc):
            return False
        raise
    return True


needs_sparse = pytest.mark.skipif("not sparse_supported()", reason="sparse rows are not supported by this build")


def _texts():
    """Premises with a cue word in a quarter of class 1's rows, hypotheses of noise, labels."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, N)
    premise = [" ".join(rng.choice(WORDS, 6)) + (" surely" if i % 4 == 0 and y[i] else "") for i in range(N)]
    hypothesis = [" ".join(rng.choice(WORDS, 4)) for _ in range(N)]
    return premise, hypothesis, y


class _TinyModel:
    """Stands in for ``sentence_transformers.SentenceTransformer``: hashed n-grams projected to 16
    numbers by a fixed matrix.  ``calls`` counts the texts it embedded."""

    calls = 0
    devices = []

    def __init__(self, model, device=None):
        self.model = model
        _TinyModel.devices.append(device)
        self.projection = np.random.default_rng(7).normal(size=(NGRAM_FEATURES, 16)).astype(np.float32)

    def encode(self, sentences, batch_size=32, show_progress_bar=False, convert_to_numpy=True):
        _TinyModel.calls += len(sentences)
        H = featurize(list(sentences))
        return np.asarray(H @ self.projection, dtype=np.float32)


@pytest.fixture
def tiny_model(monkeypatch):
    module = types.ModuleType("sentence_transformers")
    module.SentenceTransformer = _TinyModel
    monkeypatch.setitem(sys.modules, "sentence_transformers", module)
    _TinyModel.calls, _TinyModel.devices = 0, []
    return _TinyModel


@pytest.fixture
def tables(tmp_path):
    """The same texts and labels as Parquet, CSV, TSV, JSON Lines and a saved Hugging Face dataset."""
    premise, hypothesis, y = _texts()
    table = pa.table({"premise": premise, "hypothesis": hypothesis, "label": y})
    paths = {"parquet": tmp_path / "t.parquet", "csv": tmp_path / "t.csv", "tsv": tmp_path / "t.tsv",
             "jsonl": tmp_path / "t.jsonl"}
    pq.write_table(table, paths["parquet"])
    import pyarrow.csv as pc

    pc.write_csv(table, paths["csv"])
    pc.write_csv(table, paths["tsv"], pc.WriteOptions(delimiter="\t"))
    with open(paths["jsonl"], "w", encoding="utf-8") as f:
        for p, h, label in zip(premise, hypothesis, y.tolist()):
            f.write(json.dumps({"premise": p, "hypothesis": h, "label": label}) + "\n")
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"premise": premise, "hypothesis": hypothesis, "label": y}).save_to_disk(
        str(tmp_path / "hf"))
    paths["hf"] = tmp_path / "hf"
    return paths, (premise, hypothesis, y)


# --- featurizers ----------------------------------------------------------------------------

def test_ngrams_are_hashed_counts_of_word_1_2_grams():
    X = featurize(["cat dog cat", "red red"])
    assert X.format == "csr" and X.dtype == np.float32 and X.shape == (2, NGRAM_FEATURES)
    # cat, dog, cat, "cat dog", "dog cat": 5 counts; red, red, "red red": 3
    np.testing.assert_array_equal(np.asarray(X.sum(axis=1)).ravel(), [5, 3])
    assert sorted(X[0].data.tolist()) == [1, 1, 1, 2]  # cat twice
    # stateless: a row's features depend on its own text only
    assert (featurize(["red red"]) != X[1]).nnz == 0


def test_tfidf_is_sparse_float32():
    premise, _, _ = _texts()
    X = featurize(premise, "tfidf")
    assert X.format == "csr" and X.dtype == np.float32 and X.shape[0] == N
    np.testing.assert_allclose(np.asarray(X.multiply(X).sum(axis=1)).ravel(), 1.0, rtol=1e-5)  # l2 rows


@pytest.mark.parametrize("featurizer", ["words", "sentence-transformers:", "", None])
def test_bad_featurizer(featurizer):
    with pytest.raises(ValueError, match="featurizer must be 'ngrams', 'tfidf' or 'sentence-transformers:MODEL'"):
        featurize(["a text"], featurizer)


def test_sentence_transformers_cached_as_float16_shards(tiny_model, tmp_path, monkeypatch):
    import aflite_fast.filtering.text as text

    monkeypatch.setattr(text, "SHARD_ROWS", 256)
    premise, _, _ = _texts()
    paths = featurize(premise, "sentence-transformers:tiny", name="premise", cache_dir=tmp_path, device="cpu",
                      progress=False)
    assert len(paths) == 3 and tiny_model.calls == N and tiny_model.devices == ["cpu"]
    rows = np.concatenate([np.load(p) for p in paths])
    assert rows.dtype == np.float16 and rows.shape == (N, 16)
    expected = np.asarray(featurize(premise) @ _TinyModel("tiny").projection, dtype=np.float32).astype(np.float16)
    np.testing.assert_array_equal(rows, expected)
    # a rerun reads the shards: nothing is embedded again
    assert featurize(premise, "sentence-transformers:tiny", name="premise", cache_dir=tmp_path,
                     progress=False) == paths
    assert tiny_model.calls == N
    # a run stopped midway keeps its finished shards: only the missing one is embedded
    os.remove(paths[1])
    featurize(premise, "sentence-transformers:tiny", name="premise", cache_dir=tmp_path, progress=False)
    assert tiny_model.calls == N + 256
    # other texts: another folder
    assert shard_folder(tmp_path, "premise", "tiny", premise[::-1]) != os.path.dirname(paths[0])
    # without a cache: the float16 array itself
    np.testing.assert_array_equal(featurize(premise, "sentence-transformers:tiny", progress=False), expected)


def test_sentence_transformers_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import raises ImportError
    with pytest.raises(ImportError, match=r"pip install '\.\[embed\]'"):
        featurize(["a text"], "sentence-transformers:tiny", progress=False)


# --- reading text columns ---------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["parquet", "csv", "tsv", "jsonl", "hf"])
def test_every_format_reads_the_same_texts(tables, fmt):
    paths, (premise, hypothesis, y) = tables
    texts, (labels,) = read_text_table(paths[fmt], ["premise", "hypothesis"], [("label", "labels")])
    assert texts == {"premise": premise, "hypothesis": hypothesis}
    np.testing.assert_array_equal(labels, y)


def test_a_dataset_in_memory_through_its_index_mapping(tables):
    datasets = pytest.importorskip("datasets")
    _, (premise, _, y) = tables
    ds = datasets.Dataset.from_dict({"premise": premise, "label": y}).select(range(N - 1, -1, -1))
    texts, (labels,) = read_text_table(ds, ["premise"], [("label", "labels")])
    assert texts["premise"] == premise[::-1]
    np.testing.assert_array_equal(labels, y[::-1])


def test_a_numeric_looking_csv_column_is_text(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text("text,label\n12,0\n007,1\n", encoding="utf-8")
    assert read_text_table(path, ["text"])[0]["text"] == ["12", "007"]


BAD = {
    "missing column": ("t.csv", b"premise,label\nfine text,0\n", "no column 'hypothesis'"),
    "empty csv": ("t.csv", b"hypothesis,label\nfine text,0\n,1\n", "empty text at row 1"),
    "blank": ("t.csv", b"hypothesis,label\nfine text,0\n\"   \",1\n", "empty text at row 1"),
    "null jsonl": ("t.jsonl", b'{"hypothesis": "fine", "label": 0}\n{"hypothesis": null, "label": 1}\n',
                   "missing text at row 1"),
    "non-utf8 csv": ("t.csv", b"hypothesis,label\nfine text,0\nbad \xff text,1\n", "not UTF-8 text: byte 0xff at line 3"),
    "non-utf8 jsonl": ("t.jsonl", b'{"hypothesis": "fine", "label": 0}\n{"hypothesis": "bad \xfe", "label": 1}\n',
                       "not UTF-8 text: byte 0xfe at line 2"),
    "not text": ("t.jsonl", b'{"hypothesis": 1, "label": 0}\n{"hypothesis": 2, "label": 1}\n', "not a text column"),
}


def _bad_file(tmp_path, case):
    name, data, message = BAD[case]
    path = tmp_path / name
    path.write_bytes(data)
    return path, message


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_texts_are_one_clear_error(tmp_path, case):
    path, message = _bad_file(tmp_path, case)
    with pytest.raises(ValueError, match=message):
        read_text_table(path, ["hypothesis"], [("label", "labels")])


def test_parquet_null_text(tmp_path):
    pq.write_table(pa.table({"text": ["fine", None, "also"], "label": [0, 1, 0]}), tmp_path / "t.parquet")
    with pytest.raises(ValueError, match="column 'text' of .* has a missing text at row 1"):
        read_text_table(tmp_path / "t.parquet", ["text"])


# --- the command line and filter_dataset ------------------------------------------------------

RUN = ["--target-size", "450", "--train-size", "0.5", "--slice-size", "50", "--tau", "0.8", "--n-partitions",
       "16", "--seed", "3", "--quiet"]
API = dict(target_size=450, train_size=0.5, slice_size=50, tau=0.8, n_partitions=16, random_state=3,
           progress=False)


def _api_keep(views, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return aflite(None, y, views=views, **API).keep


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_cli_text_with_an_embedding_model_matches_the_api(tables, tiny_model, tmp_path, fmt):
    paths, (premise, hypothesis, y) = tables
    out = tmp_path / f"out-{fmt}"
    argv = ["filter", str(paths[fmt]), "--text-column", "premise", "--text-column", "hypothesis",
            "--labels-column", "label", "--featurizer", "sentence-transformers:tiny", "--device", "cpu",
            "--out", str(out), *RUN]
    assert main(argv) == 0
    views = {name: featurize(texts, "sentence-transformers:tiny", progress=False)
             for name, texts in (("premise", premise), ("hypothesis", hypothesis))}
    keep = np.load(out / "keep.npy")
    np.testing.assert_array_equal(keep, _api_keep(views, y))
    assert keep.size < N
    report = json.loads((out / "report.json").read_text())
    assert list(report["views"]) == ["premise", "hypothesis"] and report["combine"] == "max"
    assert report["parameters"]["featurizer"] == "sentence-transformers:tiny"
    view = json.loads((out / "report-premise.json").read_text())
    assert view["view"] == "premise"
    assert [h["n_above_tau"] for h in view["history"]] == [h["n_above_tau"]
                                                            for h in report["views"]["premise"]["history"]]
    # the cached shards in DIR: a rerun does not embed again
    calls = tiny_model.calls
    assert main(argv) == 0 and tiny_model.calls == calls
    np.testing.assert_array_equal(np.load(out / "keep.npy"), keep)


@needs_sparse
@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_cli_text_ngrams_matches_the_api(tables, tmp_path, monkeypatch, fmt):
    import aflite_fast.filtering.text as text

    # fewer hashed columns keep the test to seconds (the default width: test_ngrams_are_hashed_counts...)
    monkeypatch.setattr(text, "NGRAM_FEATURES", 1 << 10)
    paths, (premise, hypothesis, y) = tables
    out = tmp_path / f"out-{fmt}"
    assert main(["filter", str(paths[fmt]), "--text-column", "premise", "--text-column", "hypothesis",
                 "--labels-column", "label", "--out", str(out), *RUN]) == 0
    views = {"premise": featurize(premise), "hypothesis": featurize(hypothesis)}
    np.testing.assert_array_equal(np.load(out / "keep.npy"), _api_keep(views, y))


def test_cli_ngrams_before_sparse_support_is_one_line(tables, tmp_path, capsys):
    if sparse_supported():
        pytest.skip("sparse rows are supported: test_cli_text_ngrams_matches_the_api runs instead")
    paths, _ = tables
    assert main(["filter", str(paths["csv"]), "--text-column", "premise", "--labels-column", "label",
                 "--out", str(tmp_path / "o"), *RUN]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sparse" in err[0] and "view 'premise'" in err[0]


@pytest.mark.parametrize("case", sorted(BAD))
def test_cli_bad_texts_exit_2_with_one_line(tmp_path, capsys, case):
    path, message = _bad_file(tmp_path, case)
    code = main(["filter", str(path), "--text-column", "hypothesis", "--labels-column", "label",
                 "--out", str(tmp_path / "o"), *RUN])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("aflite-fast filter: error: --text-column: ") and message.split(":")[0] in err[0]
    assert not (tmp_path / "o" / "keep.npy").exists()


@pytest.mark.parametrize("argv, message", [
    (["--featurizer", "tfidf"], "--featurizer applies to --text-column"),
    (["--text-column", "premise", "--featurizer", "bag"], "--featurizer: featurizer must be"),
    (["--text-column", "premise", "--column", "x"], "--column names the embedding column"),
    (["--combine", "mean"], "--combine applies to views"),
])
def test_cli_text_flag_errors(tables, tmp_path, capsys, argv, message):
    paths, _ = tables
    code = main(["filter", str(paths["csv"]), "--labels-column", "label", "--out", str(tmp_path / "o"), *RUN, *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0]


def test_filter_dataset_text_columns(tables, tiny_model, tmp_path):
    datasets = pytest.importorskip("datasets")
    from aflite_fast.filtering.hf_datasets import filter_dataset

    _, (premise, hypothesis, y) = tables
    ds = datasets.Dataset.from_dict({"premise": premise, "hypothesis": hypothesis, "label": y})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kept, result = filter_dataset(ds, text_columns=["premise", "hypothesis"], label_column="label",
                                      featurizer="sentence-transformers:tiny", cache_dir=tmp_path, **API)
    views = {name: featurize(texts, "sentence-transformers:tiny", progress=False)
             for name, texts in (("premise", premise), ("hypothesis", hypothesis))}
    np.testing.assert_array_equal(result.keep, _api_keep(views, y))
    assert kept["premise"] == [premise[i] for i in result.keep] and result.views == ["premise", "hypothesis"]
    with pytest.raises(ValueError, match="empty text at row 2"):
        filter_dataset(ds.map(lambda r, i: {"premise": "" if i == 2 else r["premise"]}, with_indices=True),
                       text_columns=["premise"], label_column="label", **API)
