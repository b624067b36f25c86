"""Command line: outputs, exit codes, no partial output."""
import json
import os

import numpy as np
import pytest

from aflite_fast.cli import main


@pytest.fixture
def emb_files(tmp_path):
    rng = np.random.default_rng(0)
    n, d = 600, 8
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = (X[:, 0] + 0.3 * rng.standard_normal(n) > 0).astype(np.int64)
    np.save(tmp_path / "emb.npy", X)
    np.save(tmp_path / "labels.npy", y)
    with open(tmp_path / "labels.txt", "w") as fh:
        fh.write("\n".join(["pos" if v else "neg" for v in y]) + "\n")
    return tmp_path, X, y


ARGS = ["--target-size", "300", "--partitions", "8", "--train-size", "200", "--slice-size", "100",
        "--seed", "1", "--quiet"]


def test_filter_writes_outputs(emb_files, output_files):
    tmp, X, y = emb_files
    out = tmp / "out"
    assert main(["filter", str(tmp / "emb.npy"), str(tmp / "labels.npy"), "--out", str(out), *ARGS]) == 0
    keep = np.load(out / "keep.npy")
    scores = np.load(out / "scores.npy")
    report = json.loads((out / "report.json").read_text())
    assert keep.dtype == np.int64 and np.all(np.diff(keep) > 0)
    assert keep.size >= 300 and scores.shape == (X.shape[0],)
    assert report["n_kept"] == keep.size and report["parameters"]["n_partitions"] == 8
    assert len(report["history"]) >= 1 and "seconds" in report["history"][0]
    assert all(h["bytes_moved"] == 0 for h in report["history"])  # a local run sends nothing between processes
    assert output_files(out) == ["keep.npy", "report.json", "scores.npy"]  # nothing staged is left
    assert sorted(os.listdir(tmp)) == ["emb.npy", "labels.npy", "labels.txt", "out"]


def test_text_labels_give_same_result(emb_files):
    tmp, X, y = emb_files
    main(["filter", str(tmp / "emb.npy"), str(tmp / "labels.npy"), "--out", str(tmp / "a"), *ARGS])
    main(["filter", str(tmp / "emb.npy"), str(tmp / "labels.txt"), "--out", str(tmp / "b"), *ARGS])
    np.testing.assert_array_equal(np.load(tmp / "a" / "keep.npy"), np.load(tmp / "b" / "keep.npy"))


@pytest.mark.parametrize("case", ["missing", "complex_dtype", "nan", "length", "garbage"])
def test_bad_input_exit_2_without_output(emb_files, case, capsys):
    tmp, X, y = emb_files
    emb, labels = tmp / "emb.npy", tmp / "labels.npy"
    if case == "missing":
        emb = tmp / "nope.npy"
    elif case == "complex_dtype":
        emb = tmp / "complex.npy"
        np.save(emb, X.astype(np.complex64))
    elif case == "nan":
        emb = tmp / "nan.npy"
        Xn = X.copy()
        Xn[17, 3] = np.nan
        np.save(emb, Xn)
    elif case == "length":
        labels = tmp / "short.npy"
        np.save(labels, y[:-5])
    elif case == "garbage":
        emb = tmp / "garbage.npy"
        emb.write_bytes(b"not a numpy file at all")
    out = tmp / "out"
    before = sorted(os.listdir(tmp))
    assert main(["filter", str(emb), str(labels), "--out", str(out), *ARGS]) == 2
    err = capsys.readouterr().err
    assert "error" in err
    assert sorted(os.listdir(tmp)) == before  # no --out, nothing staged: the run removed what it made


def test_bad_parameter_exit_2(emb_files, capsys):
    tmp, X, y = emb_files
    args = ["filter", str(tmp / "emb.npy"), str(tmp / "labels.npy"), "--out", str(tmp / "o"),
            "--target-size", "10", "--train-size", "600", "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--train-size (600)" in err and "train_size" not in err  # the flag, not the parameter
    args[-2] = "0.5"
    assert main(args + ["--tau", "1.5"]) == 2
    assert "--tau must be in [0, 1]" in capsys.readouterr().err


def test_demo_runs_and_reports(capsys):
    assert main(["demo", "--n-samples", "1200", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "share with spurious feature" in out and "linear model accuracy" in out


# -- usability: help, units, flags, threads, sizes, lazy start ------------------------------

HEAVY = ("numpy", "numba", "scipy", "sklearn", "tqdm", "threadpoolctl", "aflite_fast.core._kernel",
         "aflite_fast.core.solver", "aflite_fast.phase.local", "aflite_fast.filtering.loop", "aflite_fast.io.inputs")


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["filter", "--help"], ["demo", "--help"],
                                  ["synthetic", "--help"], ["noise-robust", "--help"],
                                  ["report", "--help"], ["label-issues", "--help"]])
def test_help_and_version_import_nothing_heavy(argv, child_process):
    """``aflite-fast --version``/``--help`` (and each subcommand's help) start without the
    kernel, NumPy or Numba: a fresh interpreter's sys.modules after the call says so."""
    import subprocess
    import sys

    code = ("import sys\nfrom aflite_fast.cli import main\ntry:\n    main(sys.argv[1:])\n"
            "except SystemExit:\n    pass\n"
            f"heavy = [m for m in sys.modules if m in {HEAVY!r} or m.split('.')[0] in {HEAVY!r}]\n"
            "print('HEAVY', heavy)\n")
    proc = subprocess.run([sys.executable, "-c", code, *argv], **child_process, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "HEAVY []"
    assert "aflite-fast" in proc.stdout


def test_package_names_load_on_first_use():
    import aflite_fast
    import aflite_fast.core.user_losses  # a submodule import binds no public name over the decorator
    from aflite_fast import LOSS_NAMES, user_loss
    from aflite_fast.core import losses

    assert callable(user_loss) and user_loss.__module__ == "aflite_fast.core.user_losses"
    assert aflite_fast.user_loss is user_loss
    assert tuple(losses._PARAMS) == LOSS_NAMES  # the light name list follows the registry
    assert set(aflite_fast.__all__) <= set(dir(aflite_fast))
    with pytest.raises(AttributeError):
        aflite_fast.no_such_name


def test_earlier_module_paths_import_the_modules_that_hold_them_now():
    import aflite_fast
    import aflite_fast.synthetic as old
    from aflite_fast.experiments import synthetic_data
    from aflite_fast.oof import oof_predict_proba

    assert old is synthetic_data and aflite_fast.synthetic is synthetic_data
    assert synthetic_data.__spec__.name == "aflite_fast.experiments.synthetic_data"
    assert oof_predict_proba is aflite_fast.oof_predict_proba
    with pytest.raises(ModuleNotFoundError):
        import aflite_fast.no_such_module  # noqa: F401


def _help(capsys, *argv):
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert exc.value.code == 0
    return capsys.readouterr().out


def test_filter_help_shows_defaults_and_guides(capsys):
    text = " ".join(_help(capsys, "filter", "--help").split())
    for default in ("(default: 64)", "(default: 500)", "(default: 0.75)", "(default: 1.0)",
                    "(default: ce)", "(default: 1000)", "(default: 0)", "(default: RAM / 4)"):
        assert default in text
    assert "never keep fewer" in text and "must be below the number of rows" in text  # --target-size
    assert "fraction in (0, 1) of the active rows" in text and "warm-up" in text  # --train-size
    assert "lower it to filter harder" in text  # --tau
    assert "powers of 1000" in text and "powers of 1024" in text  # --max-memory units
    assert "(default: None)" not in text and "(default: False)" not in text


def _filter_args(tmp, out, *extra):
    return ["filter", str(tmp / "emb.npy"), str(tmp / "labels.npy"), "--out", str(tmp / out), *ARGS, *extra]


def test_max_memory_forms(emb_files):
    tmp, X, y = emb_files
    keeps = []
    for size, nbytes in [("1G", 10**9), ("1GiB", 2**30), ("500M", 5 * 10**8), ("2GB", 2 * 10**9),
                         ("123456789", 123456789)]:
        assert main(_filter_args(tmp, size, "--max-memory", size)) == 0
        report = json.loads((tmp / size / "report.json").read_text())
        assert report["parameters"]["max_memory"] == nbytes
        keeps.append(np.load(tmp / size / "keep.npy"))
    assert all(np.array_equal(k, keeps[0]) for k in keeps)  # the budget never changes results


def test_tol_flag_is_the_api_argument(emb_files):
    """--tol: "auto" by default (recorded in report.json), a number given is the run's tol."""
    from aflite_fast import aflite

    tmp, X, y = emb_files
    assert main(_filter_args(tmp, "auto")) == 0
    assert main(_filter_args(tmp, "tight", "--tol", "1e-6")) == 0
    assert json.loads((tmp / "auto" / "report.json").read_text())["parameters"]["tol"] == "auto"
    assert json.loads((tmp / "tight" / "report.json").read_text())["parameters"]["tol"] == 1e-6
    report = json.loads((tmp / "tight" / "report.json").read_text())["parameters"]
    run = {k: report[k] for k in ("target_size", "n_partitions", "train_size", "slice_size", "tau", "C",
                                  "random_state", "tie_break", "chance_check")}
    res = aflite(X, y, tol=1e-6, progress=False, **run)
    np.testing.assert_array_equal(np.load(tmp / "tight" / "keep.npy"), res.keep)


@pytest.mark.parametrize("flag,value,message", [
    # refused by argparse, at parse time
    ("--max-memory", "2XB", "argument --max-memory: cannot read a memory size from '2XB'"),
    ("--threads", "0", "argument --threads: must be a positive integer, got '0'"),
    ("--max-iter", "-3", "argument --max-iter: must be a positive integer"),
    ("--tol", "fast", "argument --tol: must be 'auto' or a non-negative number, got 'fast'"),
    ("--tol", "nan", "argument --tol: must be 'auto' or a non-negative number, got 'nan'"),
    ("--n-null", "0", "argument --n-null: must be a positive integer, got '0'"),
    ("--stop", "never", "argument --stop: invalid choice: 'never'"),
    # refused by the library, whose parameter names become the flags
    ("--partitions", "0", "--n-partitions must be >= 1, got 0"),
    ("--n-partitions", "0", "--n-partitions must be >= 1, got 0"),
    ("--n-jobs", "0", "argument --n-jobs: must be a positive integer, got '0'"),
    ("--slice-size", "0", "--slice-size must be >= 1, got 0"),
    ("--C", "0", "--C must be a positive number, got 0.0"),
    ("--seed", "-1", "--seed must be None, a non-negative int"),
    ("--target-size", "-1", "--target-size must be >= 0, got -1")])
def test_bad_flag_values_are_one_line_naming_the_flag(emb_files, capsys, flag, value, message):
    """Whoever refuses a value (argparse or the run), it is one line on stderr naming the flag
    (no usage block) and exit code 2, and nothing is written."""
    tmp, X, y = emb_files
    assert main(_filter_args(tmp, "o", flag, value)) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("aflite-fast filter: error: ") and message in lines[0]
    assert not (tmp / "o").exists()


def test_name_flags_replaces_whole_names_only():
    from aflite_fast.cli._args import name_flags

    flags = {"C": "--C", "n_jobs": "--threads", "tau": "--tau"}
    flags["T"] = "--transition"
    assert name_flags("C must be > 0; n_jobs=3; a C-contiguous array; n_jobs_max; tau.", flags) == \
        "--C must be > 0; --threads=3; a C-contiguous array; n_jobs_max; --tau."
    assert name_flags("pass T.npy; T must have shape", flags) == "pass T.npy; --transition must have shape"


def test_name_flags_keeps_ordinary_words_that_are_parameter_names():
    """groups, null, stop, checkpoint: replaced where they name the parameter, not in prose."""
    from aflite_fast.cli._args import name_flags
    from aflite_fast.cli._filter import PARAMETER_FLAGS as flags

    assert name_flags("groups: the largest of the 3 groups has 9 rows; need train_size <= 4", flags) == \
        "--groups: the largest of the 3 groups has 9 rows; need --train-size <= 4"
    assert name_flags("stop='null' needs null='permutation' (the null count it compares with)", flags) == \
        "--stop='null' needs --null='permutation' (the null count it compares with)"
    assert name_flags("checkpoint 'c.npz' was written by a run with other parameters (parameters.tau: "
                      "checkpoint 0.75, this run 0.7); give another checkpoint path", flags) == \
        ("--checkpoint 'c.npz' was written by a run with other parameters (parameters.tau: "
         "checkpoint 0.75, this run 0.7); give another checkpoint path")
    assert name_flags("cannot read 'c.npz' (bad data); remove it or give another path", flags) == \
        "cannot read 'c.npz' (bad data); remove it or give another path"
    assert name_flags("n_null must be an integer >= 1, got 0; remove must be 'row'", flags) == \
        "--n-null must be an integer >= 1, got 0; --remove must be 'row'"


def test_threads_above_the_cores_are_capped_with_a_note(emb_files, capsys):
    from aflite_fast.runtime.threads import effective_n_threads

    tmp, X, y = emb_files
    cores = effective_n_threads(None)
    args = [a for a in _filter_args(tmp, "t", "--threads", str(cores + 7)) if a != "--quiet"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"note: --n-jobs {cores + 7} is more than the {cores} core(s) available; using {cores}" in err
    assert json.loads((tmp / "t" / "report.json").read_text())["parameters"]["n_jobs"] == cores
    assert main(_filter_args(tmp, "q", "--threads", str(cores + 7))) == 0
    assert capsys.readouterr().err == ""  # --quiet: no note


def test_target_size_not_below_the_rows_is_an_error(emb_files, capsys):
    tmp, X, y = emb_files
    args = _filter_args(tmp, "o")
    args[args.index("--target-size") + 1] = str(X.shape[0])
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"--target-size ({X.shape[0]}) must be smaller than the number of rows" in err
    assert "nothing would be filtered" in err and not (tmp / "o").exists()


def test_forward_loss_takes_a_transition_file(emb_files, capsys):
    tmp, X, y = emb_files
    np.save(tmp / "T.npy", np.array([[0.9, 0.1], [0.2, 0.8]]))
    np.save(tmp / "T3.npy", np.full((3, 3), 1 / 3))
    assert main(_filter_args(tmp, "f", "--loss", "forward", "--transition", str(tmp / "T.npy"))) == 0
    report = json.loads((tmp / "f" / "report.json").read_text())
    assert report["parameters"]["loss"] == "forward" and report["transition"] == str(tmp / "T.npy")
    assert main(_filter_args(tmp, "f2", "--loss", "forward", "--transition", str(tmp / "T.npy"),
                             "--seed", "1")) == 0
    cases = [(["--loss", "forward"], "--loss forward needs --transition T.npy (a 2 x 2"),
             (["--transition", str(tmp / "T.npy")], "--transition applies to --loss forward only"),
             (["--loss", "forward", "--transition", str(tmp / "T3.npy")], "--transition must have shape (2, 2)"),
             (["--loss", "forward", "--transition", str(tmp / "nope.npy")], "--transition: cannot read")]
    for extra, message in cases:
        assert main(_filter_args(tmp, "bad", *extra)) == 2
        assert message in capsys.readouterr().err
        assert not (tmp / "bad").exists()


SUBCOMMAND_THREAD_FLAGS = {"filter": ("--n-jobs", "--n-partitions"), "demo": ("--n-jobs",),
                           "synthetic": ("--n-jobs", "--n-partitions"), "noise-robust": ("--n-jobs",),
                           "oof": ("--n-jobs", "--n-partitions"), "label-issues": ("--n-jobs",)}


@pytest.mark.parametrize("command", sorted(SUBCOMMAND_THREAD_FLAGS))
def test_one_flag_vocabulary_with_old_spellings_as_hidden_aliases(command, capsys):
    """--n-jobs / --n-partitions everywhere; --threads / --partitions still parse to the same
    value, and --help names only the canonical spelling."""
    from aflite_fast.cli import build_parser

    text = _help(capsys, command, "--help")
    parser = build_parser()
    required = {"filter": ["E", "L", "--out", "o", "--target-size", "1", "--train-size", "1"],
                "synthetic": ["--out", "o"], "noise-robust": ["--out", "o"], "demo": [],
                "oof": ["E", "L", "--out", "o.npy"], "label-issues": ["E", "L", "--out", "o.csv"]}[command]
    for flag in SUBCOMMAND_THREAD_FLAGS[command]:
        old = {"--n-jobs": "--threads", "--n-partitions": "--partitions"}[flag]
        assert flag in text and old not in text
        dest = flag[2:].replace("-", "_")
        assert getattr(parser.parse_args([command, *required, flag, "3"]), dest) == 3
        assert getattr(parser.parse_args([command, *required, old, "3"]), dest) == 3
        default = getattr(parser.parse_args([command, *required]), dest)
        assert default == (64 if flag == "--n-partitions" and command != "oof" else None)
