"""Headers that lie about their data are refused in one line, never read shifted.

a. ``.npy``: a negative dimension, a shape whose size overflows int64 or a non-integer
   dimension is a ValueError naming the file (not numpy's OverflowError, nor a NumPy overflow
   warning), as EMB, LABELS and ``--eval-rows`` (exit 2, one line).  Format versions 1.0, 2.0
   and 3.0 are read alike.
b. safetensors: a negative or reversed ``data_offsets`` (which would read rows out of the
   header's padding, every later row shifted by one), a negative, fractional or boolean
   shape, and offsets or shapes that are not lists of integers are refused naming the tensor.
c. Label text: a lone CR ends a line as LF does; a NUL byte is refused naming its line.
"""
import json
import struct
import warnings

import numpy as np
import pytest

from aflite_fast.cli import main
from aflite_fast.io.arrayfile import open_array_file
from aflite_fast.io.inputs import open_embeddings
from aflite_fast.io.labelfile import read_labels_file


def write_npy(path, header, data=b"", version=(1, 0)):
    """A .npy file with the literal ``header`` text (padded with spaces to 64 bytes) and ``data``."""
    text = header.encode("latin1" if version < (3, 0) else "utf-8")
    length_format = "<H" if version == (1, 0) else "<I"
    prefix = 6 + 2 + struct.calcsize(length_format)
    text += b" " * ((-(prefix + len(text) + 1)) % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY" + bytes(version) + struct.pack(length_format, len(text)) + text + data)
    return path


def npy_header(shape, descr="<f4", fortran=False):
    return f"{{'descr': {descr!r}, 'fortran_order': {fortran}, 'shape': {shape}, }}"


@pytest.fixture
def rows(tmp_path, seed):
    rng = np.random.default_rng([seed, 36])
    X = rng.standard_normal((200, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    return tmp_path, X, y


def _filter(tmp_path, emb, labels, *extra):
    return main(["filter", str(emb), str(labels), "--out", str(tmp_path / "out"), "--target-size", "150",
                 "--train-size", "0.5", "--n-partitions", "4", "--n-jobs", "1", "--quiet", *map(str, extra)])


def _one_line(capsys):
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0]
    return lines[0]


@pytest.mark.parametrize("shape, words", [
    ("(-200, 4)", "negative"), ("(200, -4)", "negative"),
    ("(4611686018427387904, 4)", "promises"), ("(2**70, 4)", "does not describe"),
    ("(200.0, 4)", "does not describe"), ("(True, 4)", "does not describe"),
])
def test_npy_shape_that_lies_is_a_value_error(rows, shape, words):
    tmp_path, X, _ = rows
    path = write_npy(tmp_path / "bad.npy", npy_header(shape), X.tobytes())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NumPy overflow warning on the way
        with pytest.raises(ValueError, match=words) as info:
            open_array_file(path, "embeddings")
    assert str(path) in str(info.value)


def test_npy_negative_dimension_is_one_line_as_emb_labels_and_eval_rows(rows, capsys):
    tmp_path, X, y = rows
    bad_x = write_npy(tmp_path / "bad_x.npy", npy_header("(-200, 4)"), X.tobytes())
    bad_y = write_npy(tmp_path / "bad_y.npy", npy_header("(-200,)", "<i8"), y.tobytes())
    bad_e = write_npy(tmp_path / "bad_e.npy", npy_header("(-3,)", "<i8"), np.arange(3).tobytes())
    for args, flag in (((bad_x, tmp_path / "y.npy"), "embeddings"), ((tmp_path / "X.npy", bad_y), "labels"),
                       ((tmp_path / "X.npy", tmp_path / "y.npy", "--eval-rows", bad_e), "--eval-rows")):
        assert _filter(tmp_path, *args) == 2
        line = _one_line(capsys)
        assert flag in line and "negative" in line, line
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("descr", ["<f4", ">f4", "<f8", ">i2", "|u1"])
def test_npy_versions_and_byte_orders_read_alike(rows, version, descr):
    tmp_path, X, _ = rows
    values = X.astype(descr)
    for fortran in (False, True):
        data = (np.asfortranarray(values) if fortran else values).tobytes(order="F" if fortran else "C")
        path = write_npy(tmp_path / "v.npy", npy_header(X.shape, descr, fortran), data, version)
        got = open_array_file(path)
        assert got.dtype == np.dtype(descr) and got.shape == X.shape
        np.testing.assert_array_equal(got, values)
        assert np.asarray(open_embeddings(str(path))[:]).tobytes() == np.asarray(values).tobytes()


def test_npy_utf8_header_needs_version_3(rows):
    tmp_path, X, _ = rows
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (200, 4), 'note': '\u00e9'}"
    path = write_npy(tmp_path / "v.npy", header, X.tobytes(), (3, 0))
    with pytest.raises(ValueError, match="corrupt .npy header"):
        open_array_file(path)  # an extra key: not a .npy header


def test_npy_label_file_with_negative_dimension(rows):
    tmp_path, _, y = rows
    path = write_npy(tmp_path / "y_bad.npy", npy_header("(-200,)", "<i8"), y.tobytes())
    with pytest.raises(ValueError, match="negative"):
        read_labels_file(path)


# ----------------------------------------------------------------------------- safetensors

def write_safetensors(path, entry, data, padding=0, key="emb"):
    header = json.dumps({key: entry}).encode() + b" " * padding
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


@pytest.mark.parametrize("change, words", [
    ({"data_offsets": [-64, 200 * 4 * 4 - 64]}, "data_offsets"),
    ({"data_offsets": [64, 0]}, "data_offsets"),
    ({"data_offsets": [0.0, 3200.0]}, "data_offsets"),
    ({"data_offsets": [0, 3200, 6400]}, "data_offsets"),
    ({"data_offsets": "0-3200"}, "data_offsets"),
    ({"shape": [-200, -4]}, "shape"),
    ({"shape": [200.7, 4]}, "shape"),
    ({"shape": [200.0, 4]}, "shape"),
    ({"shape": [True, 4]}, "shape"),
    ({"shape": "200x4"}, "shape"),
    ({"dtype": ["F32"]}, "dtype"),
])
def test_safetensors_header_that_lies_is_refused(rows, capsys, change, words):
    tmp_path, X, y = rows
    entry = {"dtype": "F32", "shape": [200, 4], "data_offsets": [0, X.nbytes]}
    entry.update(change)
    path = write_safetensors(tmp_path / "bad.safetensors", entry, X.tobytes(), padding=64)
    with pytest.raises(ValueError, match=words) as info:
        open_embeddings(str(path))
    assert "'emb'" in str(info.value)
    assert _filter(tmp_path, path, tmp_path / "y.npy") == 2
    assert words in _one_line(capsys)


def test_safetensors_negative_offset_into_padding_is_refused(rows, capsys):
    """The header's 64 bytes of padding would be read as row 0 and every later row shifted."""
    tmp_path, X, _ = rows
    n = X.shape[0]
    entry = {"dtype": "F32", "shape": [n, 4], "data_offsets": [-16, X.nbytes - 16]}
    path = write_safetensors(tmp_path / "shifted.safetensors", entry, X.tobytes(), padding=64)
    with pytest.raises(ValueError, match=r"data_offsets \[-16, \d+\]"):
        open_embeddings(str(path))
    assert _filter(tmp_path, path, tmp_path / "y.npy") == 2
    _one_line(capsys)


def test_safetensors_entry_that_is_not_an_object(rows):
    tmp_path, X, _ = rows
    path = write_safetensors(tmp_path / "list.safetensors", ["F32", [200, 4], [0, X.nbytes]], X.tobytes())
    with pytest.raises(ValueError, match="'emb'"):
        open_embeddings(str(path))


def test_safetensors_duplicate_key_is_refused(rows):
    tmp_path, X, _ = rows
    entry = json.dumps({"dtype": "F32", "shape": [200, 4], "data_offsets": [0, X.nbytes]})
    header = f'{{"emb": {entry}, "emb": {entry}}}'.encode()
    path = tmp_path / "dup.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + X.tobytes())
    with pytest.raises(ValueError, match="more than once"):
        open_embeddings(str(path))


def test_safetensors_well_formed_with_padding_reads_the_rows(rows):
    tmp_path, X, _ = rows
    entry = {"dtype": "F32", "shape": [200, 4], "data_offsets": [0, X.nbytes]}
    path = write_safetensors(tmp_path / "good.safetensors", entry, X.tobytes(), padding=64)
    assert np.asarray(open_embeddings(str(path))[:]).tobytes() == X.tobytes()


# ----------------------------------------------------------------------------- label files

def test_label_file_with_lone_cr_line_endings_reads_as_lf(tmp_path):
    (tmp_path / "lf.txt").write_bytes(b"cat\ndog\ncat\n")
    (tmp_path / "cr.txt").write_bytes(b"cat\rdog\rcat\r")
    np.testing.assert_array_equal(read_labels_file(tmp_path / "cr.txt"), read_labels_file(tmp_path / "lf.txt"))


def test_label_file_with_a_nul_byte_is_refused_naming_the_line(tmp_path):
    (tmp_path / "nul.txt").write_bytes(b"0\n1\n\x00\n1\n")
    with pytest.raises(ValueError, match=r"line 3 of the labels file .*nul.txt.* NUL byte"):
        read_labels_file(tmp_path / "nul.txt")
