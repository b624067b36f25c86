"""Label files behave as ``filter --help`` documents (issue 14, item 4): reader and command line.

a. A UTF-8 byte-order mark is not part of the first label.
b. ``--labels-header`` skips a header line; ``--labels-column`` picks a column by header name
   or 0-based index; a header left in without the flag is refused with a hint.
c. A file with several columns is refused without a column choice (an ``id,label`` file
   once used the ids silently); rows of unequal width and blank lines inside are refused,
   naming the line; blank lines at the end are ignored.
d. ``1``, ``1.0`` and ``01`` are one class; ``1.5`` makes the labels float, a word makes them
   strings.  Tabs separate the fields of a ``.tsv`` file.
Every accepted file gives the command line the result of the same labels saved as ``.npy``.
"""
import itertools

import numpy as np
import pytest

from aflite_fast.cli import main
from aflite_fast.io.labelfile import read_labels_file

N = 200
_RUNS = itertools.count()
ARGS = ["--target-size", "100", "--partitions", "4", "--train-size", "80", "--slice-size", "30",
        "--tau", "0.6", "--seed", "0", "--threads", "1", "--quiet"]


@pytest.fixture
def files(tmp_path, seed, make_problem):
    X, y = make_problem(np.random.default_rng([seed, 14]), N, 5, 2, signal=1.0)
    np.save(tmp_path / "emb.npy", X)
    np.save(tmp_path / "y.npy", y)
    return tmp_path, y


def write(tmp_path, name, lines, *, bom=False, end="\n"):
    path = tmp_path / name
    path.write_bytes((("\ufeff" if bom else "") + "\n".join(lines) + end).encode("utf-8"))
    return path


def filter_run(tmp_path, labels, capsys, *extra):
    out = tmp_path / f"out{next(_RUNS)}"
    code = main(["filter", str(tmp_path / "emb.npy"), str(labels), "--out", str(out), *ARGS, *extra])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    return code, err, out


def assert_same_as_npy(tmp_path, labels, capsys, *extra):
    ref_code, _, ref = filter_run(tmp_path, tmp_path / "y.npy", capsys)
    code, err, out = filter_run(tmp_path, labels, capsys, *extra)
    assert ref_code == 0 and code == 0 and err == []
    np.testing.assert_array_equal(np.load(out / "keep.npy"), np.load(ref / "keep.npy"))
    np.testing.assert_array_equal(np.load(out / "scores.npy"), np.load(ref / "scores.npy"))


def assert_refused(tmp_path, labels, capsys, match, *extra):
    code, err, out = filter_run(tmp_path, labels, capsys, *extra)
    assert code == 2 and len(err) == 1, err
    assert match in err[0]
    assert not out.exists()


def test_bom_is_not_part_of_the_first_label(files, capsys):
    tmp, y = files
    names = np.array(["neg", "pos"])[y]
    path = write(tmp, "bom.txt", names, bom=True)
    got = read_labels_file(path)
    assert got[0] == names[0] and set(got) == {"neg", "pos"}
    numeric = write(tmp, "bom_num.txt", [str(v) for v in y], bom=True)
    np.testing.assert_array_equal(read_labels_file(numeric), y)
    assert_same_as_npy(tmp, path, capsys)


def test_header_and_column_by_name_or_index(files, capsys):
    tmp, y = files
    rows = ["id,label"] + [f"{1000 + i},{v}" for i, v in enumerate(y)]
    path = write(tmp, "idlabel.csv", rows)
    np.testing.assert_array_equal(read_labels_file(path, column="label", header=True), y)
    np.testing.assert_array_equal(read_labels_file(path, column=1, header=True), y)
    np.testing.assert_array_equal(read_labels_file(path, column="1", header=True), y)
    np.testing.assert_array_equal(read_labels_file(path, column="id", header=True), 1000 + np.arange(N))
    assert_same_as_npy(tmp, path, capsys, "--labels-header", "--labels-column", "label")
    assert_same_as_npy(tmp, path, capsys, "--labels-header", "--labels-column", "1")
    with pytest.raises(ValueError, match=r"no such column in the header .*\(id, label\)"):
        read_labels_file(path, column="class", header=True)
    with pytest.raises(ValueError, match="out of range: .* has 2 column"):
        read_labels_file(path, column=2, header=True)
    with pytest.raises(ValueError, match="pass --labels-header"):
        read_labels_file(path, column="label")
    assert_refused(tmp, path, capsys, "--labels-column 'class': no such column",
                   "--labels-header", "--labels-column", "class")


def test_single_column_header(files, capsys):
    tmp, y = files
    path = write(tmp, "header.txt", ["label"] + [str(v) for v in y])
    np.testing.assert_array_equal(read_labels_file(path, header=True), y)
    assert_same_as_npy(tmp, path, capsys, "--labels-header")
    with pytest.raises(ValueError, match=r"line 1 .*\('label'\) is not a number .* pass --labels-header"):
        read_labels_file(path)
    assert_refused(tmp, path, capsys, "if it is a header, pass --labels-header")


def test_two_columns_need_a_choice(files, capsys):
    tmp, y = files
    path = write(tmp, "two.csv", [f"{i},{v}" for i, v in enumerate(y)])
    with pytest.raises(ValueError, match="has 2 columns .* choose the label column with --labels-column"):
        read_labels_file(path)
    assert_refused(tmp, path, capsys, "has 2 columns")
    assert_same_as_npy(tmp, path, capsys, "--labels-column", "1")


def test_shape_rules_name_the_line(files, capsys):
    tmp, y = files
    lines = [str(v) for v in y]
    inner = write(tmp, "inner_blank.txt", lines[:7] + [""] + lines[7:])
    with pytest.raises(ValueError, match="line 8 of the labels file .* is blank"):
        read_labels_file(inner)
    assert_refused(tmp, inner, capsys, "line 8")
    trailing = write(tmp, "trailing.txt", lines, end="\n\n  \n")
    np.testing.assert_array_equal(read_labels_file(trailing), y)
    assert_same_as_npy(tmp, trailing, capsys)
    ragged = write(tmp, "ragged.csv", [f"{i},{v}" for i, v in enumerate(y[:5])] + ["5,1,x"])
    with pytest.raises(ValueError, match="line 6 .* has 3 field"):
        read_labels_file(ragged, column=1)
    empty_label = write(tmp, "empty_label.csv", ["0,1", "1,", "2,0"])
    with pytest.raises(ValueError, match="line 2 .* has an empty label"):
        read_labels_file(empty_label, column=1)
    with pytest.raises(ValueError, match="is empty"):
        read_labels_file(write(tmp, "nothing.txt", [], end=""))


def test_one_and_one_point_zero_are_one_class(files, capsys):
    tmp, y = files
    spelled = [("1.0" if i % 3 == 0 else "01" if i % 3 == 1 else "1") if v else ("0" if i % 2 else "0.0")
               for i, v in enumerate(y)]
    path = write(tmp, "mixed_numbers.txt", spelled)
    got = read_labels_file(path)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, y)
    assert_same_as_npy(tmp, path, capsys)
    frac = read_labels_file(write(tmp, "frac.txt", ["1", "1.5", "1.0", "-2e1"]))
    assert frac.dtype == np.float64 and frac.tolist() == [1.0, 1.5, 1.0, -20.0]
    words = read_labels_file(write(tmp, "words.txt", ["1", "1.0", "one", "inf"]))
    assert words.tolist() == ["1", "1.0", "one", "inf"]  # not all numbers: compared as written


def test_tsv_and_quoted_fields(files, capsys):
    tmp, y = files
    tsv = write(tmp, "labels.tsv", ["id\tlabel"] + [f"{i}\t{v}" for i, v in enumerate(y)])
    np.testing.assert_array_equal(read_labels_file(tsv, column="label", header=True), y)
    assert_same_as_npy(tmp, tsv, capsys, "--labels-header", "--labels-column", "label")
    quoted = read_labels_file(write(tmp, "quoted.csv", ['0,"a, b"', '1, c', '2,  "a, b" ']), column=1)
    assert quoted.tolist() == ["a, b", "c", "a, b"]


def test_array_label_files(files, capsys):
    tmp, y = files
    np.savez(tmp / "labels.npz", y=y)
    np.testing.assert_array_equal(read_labels_file(tmp / "labels.npz"), y)
    assert_same_as_npy(tmp, tmp / "labels.npz", capsys)
    with pytest.raises(ValueError, match="apply to text/CSV label files"):
        read_labels_file(tmp / "y.npy", column=0)
    (tmp / "empty.npy").write_bytes(b"")
    assert_refused(tmp, tmp / "empty.npy", capsys, "cannot read labels from")


def test_groups_files_follow_the_same_rules(files, capsys):
    """``filter --groups FILE`` reads group ids as LABELS are read, with --groups-column and
    --groups-header, and its messages name those flags."""
    tmp, y = files
    groups = np.arange(N) // 2  # twins
    np.save(tmp / "groups.npy", groups)
    base = ["--groups", str(tmp / "groups.npy")]
    ref_code, _, ref = filter_run(tmp, tmp / "y.npy", capsys, *base)
    assert ref_code == 0
    spelled = [f"{g}.0" if i % 2 else f"0{g}" for i, g in enumerate(groups)]  # 1, 1.0, 01: one group
    table = write(tmp, "groups.csv", ["row,premise"] + [f"{i},{g}" for i, g in enumerate(spelled)], bom=True)
    for flags in (["--groups-header", "--groups-column", "premise"], ["--groups-header", "--groups-column", "1"]):
        code, err, out = filter_run(tmp, tmp / "y.npy", capsys, "--groups", str(table), *flags)
        assert code == 0 and err == []
        np.testing.assert_array_equal(np.load(out / "keep.npy"), np.load(ref / "keep.npy"))
    np.testing.assert_array_equal(read_labels_file(table, column="premise", header=True, kind="groups"), groups)
    two = write(tmp, "groups2.csv", [f"{i},{g}" for i, g in enumerate(groups)])
    assert_refused(tmp, tmp / "y.npy", capsys, "--groups: the groups file", "--groups", str(two))
    with pytest.raises(ValueError, match="choose the group id column with --groups-column NAME "
                                         r"\(with --groups-header\)"):
        read_labels_file(two, kind="groups")
    headed = write(tmp, "groups_header.txt", ["premise"] + [str(g) for g in groups])
    assert_refused(tmp, tmp / "y.npy", capsys, "if it is a header, pass --groups-header", "--groups", str(headed))
    assert_refused(tmp, tmp / "y.npy", capsys, "--groups-column needs --groups FILE", "--groups-column", "1")
    assert_refused(tmp, tmp / "y.npy", capsys, "--groups-column and --groups-header apply to text/CSV",
                   *base, "--groups-column", "0")
