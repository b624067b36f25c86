"""The documents a stranger reads hold up: links resolve, the Python runs, they speak of the package.

a. Every relative link of README.md, CHANGELOG.md and docs/*.md (``[text](target)`` and
   images) names a file of the repository, and a ``#anchor`` names one of its headings (as
   GitHub makes anchors from headings).
b. The Python blocks of README.md and of every docs/*.md run as written: a document's blocks
   in order, in one namespace (a reader pastes them one after another), in a temporary working
   directory that holds the files the documents name as the reader's own data (``FIXTURES``
   below: 1200 rows, 16 features, 3 classes).  A block can be left out only by an HTML comment
   on the line before it, ``<!-- docs-test: skip (why) -->``, with a reason; the test allows
   few.  The shell blocks are not run: they install the package or run for minutes
   (``tests/test_cli.py`` and ``tests/test_synthetic.py`` run the same commands on small data).
c. No local paths and no words of the team's own bookkeeping (issue numbers, roles,
   "uncommitted", "this session") in README.md, docs/*.md and benchmarks/RESULTS.md.
d. The documents speak of the package, not of the work on it: no verdicts on work targets
   ("the 10x target is met", "not met"), no "other people's jobs", no "rerun on an idle
   machine before quoting" in README.md, docs/*.md and benchmarks/*.md; no commit hashes and
   no machine paths in README.md and docs/*.md (benchmarks/RESULTS.md may name the commit it
   measured).  A failure names file:line and the words.
"""
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
READ_BY_STRANGERS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
                     ROOT / "benchmarks" / "RESULTS.md"]
WITH_CODE = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BENCHMARK_DOCS = sorted((ROOT / "benchmarks").glob("*.md"))

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def _rel(path):
    path = Path(path)
    return str(path.relative_to(ROOT)) if ROOT in path.parents else str(path)


def _anchors(markdown):
    """GitHub's anchors of the headings of ``markdown``: lowercase, punctuation dropped,
    spaces to dashes."""
    out = set()
    for heading in re.findall(r"^#+\s+(.*?)\s*$", _FENCE.sub("", markdown), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        out.add(slug)
    return out


def _links(path):
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    return [m.group(1) for m in _LINK.finditer(text)]


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_relative_links_resolve(doc):
    broken = []
    for target in _links(doc):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        path = (doc.parent / file_part).resolve() if file_part else doc
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path.read_text(encoding="utf-8")):
            broken.append(target)
    assert not broken, f"{doc.name}: broken links {broken}"


def test_links_are_found():
    """The link pattern sees the README's links (a pattern that finds none would pass (a))."""
    assert "docs/curation.md" in _links(ROOT / "README.md")
    assert "figure_synthetic.png" in _links(ROOT / "docs" / "synthetic.md")


# --- b. the Python blocks run -------------------------------------------------------------

_SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*\((?P<why>[^)]+)\)\s*-->")


def python_blocks(path):
    """``[(line, code, skip_reason)]`` of the ```python blocks of ``path``: ``line`` is the line
    of the block's first code line; ``skip_reason`` the reason of a ``docs-test: skip`` comment
    on the last non-blank line before the fence, else None."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i + 1
            end = start
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            skip = _SKIP.search(before)
            blocks.append((start + 1, "\n".join(lines[start:end]) + "\n", skip and skip.group("why").strip()))
            i = end + 1
        else:
            i += 1
    return blocks


#: The reader's own data that the documents name, written by ``fixtures`` for each run of the
#: blocks.  Every file holds the same 1200 rows: 16 float32 features and a label in 0..2 that
#: the first features predict for part of the rows (so filters have something to remove).
FIXTURES = {
    "embeddings.npy": "X, 1200 x 16 float32",
    "labels.npy": "y, 1200 int64 labels 0..2",
    "bow.npy": "a second representation of the same rows, 1200 x 32 float32",
    "premise_ids.npy": "group ids, three consecutive rows per premise",
    "emb/part_0.npy, emb/part_1.npy": "the rows of embeddings.npy in two shards (700 + 500)",
    "vectors.parquet": "a Parquet table: column embedding (the rows), label",
    "my_dataset/": "a Hugging Face dataset (save_to_disk): columns embedding, label",
    "probs.npy": "out-of-fold probabilities (1200 x 3), what `aflite-fast oof` writes",
}


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory):
    """A folder holding ``FIXTURES``, written once for this module (pyarrow and datasets, for
    the Parquet table and the Hugging Face dataset, come with the test extras)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    datasets = pytest.importorskip("datasets")
    from aflite_fast import oof_predict_proba

    base = tmp_path_factory.mktemp("docs_data")
    rng = np.random.default_rng([int(os.environ.get("AFLITE_FAST_TEST_SEED", "0")), 8])
    n, d = 1200, 16
    X = rng.standard_normal((n, d)).astype(np.float32)
    signal = X[:, :3] * 1.5 + rng.standard_normal((n, 3))
    y = np.argmax(signal, axis=1).astype(np.int64)
    np.save(base / "embeddings.npy", X)
    np.save(base / "labels.npy", y)
    np.save(base / "bow.npy", np.hstack([X[:, ::-1], rng.standard_normal((n, 16))]).astype(np.float32))
    np.save(base / "premise_ids.npy", np.arange(n) // 3)
    (base / "emb").mkdir()
    np.save(base / "emb" / "part_0.npy", X[:700])
    np.save(base / "emb" / "part_1.npy", X[700:])
    table = pa.table({"embedding": pa.array(list(X), type=pa.list_(pa.float32())), "label": y})
    pq.write_table(table, base / "vectors.parquet")
    datasets.Dataset.from_dict({"embedding": [row.tolist() for row in X], "label": y.tolist()}).save_to_disk(
        str(base / "my_dataset"))
    np.save(base / "probs.npy", oof_predict_proba(X, y, cv=5, random_state=0))
    return base


def test_fixtures_are_what_the_docstring_says(fixture_dir):
    for names in FIXTURES:
        for name in names.split(", "):
            assert (fixture_dir / name).exists(), name


def _run_blocks(doc, workdir, monkeypatch):
    """Run the Python blocks of ``doc`` in ``workdir``; return the namespace."""
    monkeypatch.chdir(workdir)
    namespace = {"__name__": "__main__"}
    blocks = python_blocks(doc)
    for line, code, skip in blocks:
        if skip:
            continue
        # line numbers of the document in tracebacks: "docs/oof.md", line 77
        exec(compile("\n" * (line - 1) + code, str(doc), "exec"), namespace)
    return namespace


@pytest.mark.parametrize("doc", [d for d in WITH_CODE[1:] if python_blocks(d)], ids=_rel)
def test_docs_python_blocks_run(doc, fixture_dir, tmp_path, monkeypatch):
    work = tmp_path / "work"
    shutil.copytree(fixture_dir, work)
    _run_blocks(doc, work, monkeypatch)


def test_readme_python_runs_and_does_what_it_says(fixture_dir, tmp_path, monkeypatch):
    """The README's blocks run, and their results are what the README says they are."""
    work = tmp_path / "work"
    shutil.copytree(fixture_dir, work)
    ns = _run_blocks(ROOT / "README.md", work, monkeypatch)
    n = len(ns["y"])
    res = ns["res"]
    assert res.keep.size >= ns["target"] and len(res.history) >= 1
    assert ns["X_kept"].shape[1] == 16 and len(ns["X_kept"]) >= ns["target"]
    assert ns["clf"].predict(np.load(work / "embeddings.npy")[:5]).shape == (5,)
    assert ns["scores"].shape == (n,)
    assert (work / "run.ckpt.npz").exists()  # the resumable run's checkpoint


def test_blocks_are_found_and_skips_are_rare():
    """The block pattern sees the documents' blocks (a pattern that finds none would pass (b)),
    and skipping a block is the exception, always with a reason."""
    blocks = {_rel(d): python_blocks(d) for d in WITH_CODE}
    assert len(blocks["README.md"]) >= 5
    assert sum(map(len, blocks.values())) >= 20
    skipped = [(doc, line, why) for doc, found in blocks.items() for line, _, why in found if why]
    assert len(skipped) <= 2, skipped
    marked = [(d, i) for d in WITH_CODE for i, text in enumerate(d.read_text(encoding="utf-8").splitlines(), 1)
              if "docs-test" in text]
    assert len(marked) == len(skipped), f"a docs-test comment not right before a ```python fence: {marked}"


def test_block_finder_reads_a_skip_comment(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("text\n\n<!-- docs-test: skip (needs a cluster) -->\n```python\na = 1\n```\n\n"
                   "```python\nb = 2\nc = 3\n```\n", encoding="utf-8")
    assert python_blocks(doc) == [(5, "a = 1\n", "needs a cluster"), (9, "b = 2\nc = 3\n", None)]


# --- c. no local paths or bookkeeping --------------------------------------------------------

#: What a stranger should never read: local paths and the team's own bookkeeping.
INTERNAL = [r"/work/", r"/home/\w", r"\b[Ii]ssue \d+", r"\bissue's\b", r"\bissue-\d", r"\bthe lead\b",
            r"kernel's owner", r"\buncommitted\b", r"\bthis session\b", r"\breviewer\b",
            r"\bother engineers\b"]


@pytest.mark.parametrize("doc", READ_BY_STRANGERS, ids=_rel)
def test_no_local_paths_or_internal_words(doc):
    text = doc.read_text(encoding="utf-8")
    found = [(pattern, m.group(0), text.count("\n", 0, m.start()) + 1)
             for pattern in INTERNAL for m in re.finditer(pattern, text)]
    assert not found, f"{doc.name}: {found}"


def test_install_commands_work_from_a_clone():
    """The package is not on a package index: extras are installed from the clone ('.[x]')."""
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        assert not re.search(r"pip install ['\"]?aflite_fast\[", text), doc.name


# --- d. the package, not the work ----------------------------------------------------------

_APOS = "['\N{RIGHT SINGLE QUOTATION MARK}]"

#: Words about the work on the package, anywhere in README.md, docs/*.md and benchmarks/*.md:
#: (pattern, what to write instead).
ABOUT_THE_WORK = [
    (r"\btargets?\b[^.\n|]*?\b(?:met|missed)\b",
     "a verdict on a work target: state the figure against what it is compared with"),
    (r"\bnot\s+met\b|\*\*met\*\*|,\s*met\b|\|\s*met\b",
     "a verdict on a work target: state the figure against what it is compared with"),
    (r"\b\d+(?:\.\d+)?x target\b", "a work target: state the figure against what it is compared with"),
    (rf"\bother people(?:{_APOS}s)?\b|\bother jobs\b",
     "the machine's other users: say how the machine was loaded, if it matters"),
    (r"\brerun on an? (?:idle|quiet) machine\b|\bbefore quoting\b",
     "advice to the team: state the conditions of the measurement"),
]

#: Only in README.md and docs/*.md (benchmarks/RESULTS.md may name the commit it measured).
NOT_IN_USER_DOCS = [
    (r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b",
     "a commit hash: the documents describe the package as it is"),
    (r"(?<![\w.])/(?:work|root|home|Users|mnt|opt|srv|scratch|tmp)/",
     "a path of one machine"),
]


def _matches(text, rules):
    """``[(offset, words, why)]`` of every match of ``rules`` in ``text``, in text order (the
    target and other-people rules ignore case)."""
    found = []
    for pattern, why in rules:
        flags = re.I if "target" in pattern or "other" in pattern else 0
        found += [(m.start(), m.group(0), why) for m in re.finditer(pattern, text, flags)]
    return sorted(found)


def words_about_the_work(path, rules):
    """``["file:line: 'words' (why)"]`` for every match of ``rules`` in ``path``."""
    text = path.read_text(encoding="utf-8")
    return [f"{_rel(path)}:{text.count(chr(10), 0, start) + 1}: {words!r} ({why})"
            for start, words, why in _matches(text, rules)]


@pytest.mark.parametrize(
    "doc", [*WITH_CODE, *BENCHMARK_DOCS], ids=lambda d: _rel(d) if isinstance(d, Path) else None)
def test_speaks_of_the_package_not_of_the_work(doc):
    rules = ABOUT_THE_WORK + (NOT_IN_USER_DOCS if doc in WITH_CODE else [])
    found = words_about_the_work(doc, rules)
    assert not found, "words about the work, not the package:\n" + "\n".join(found)


@pytest.mark.parametrize("words", [
    "so the 10x target is met", "**6.8x: the 10x target is not met**", "| 1.5, not met |", "| 3, met |",
    "Target: under 100 s, **not met**", "5.5x, below the 10x target", "By bytes the target is met (3 passes)",
    "shared with other people's jobs", "shared with other people\N{RIGHT SINGLE QUOTATION MARK}s benchmarks",
    "rerun on an idle machine before quoting a number as final", "at commit 380e83b (after ...)",
    "commit after 0932aee", "python /work/wt/benchmarks/x.py", "see /home/me/data", "in /tmp/prof.py",
])
def test_words_about_the_work_are_found(words):
    assert _matches(f"Some text.\n\n{words}\n", ABOUT_THE_WORK + NOT_IN_USER_DOCS), words


def test_failure_names_file_and_line(tmp_path):
    doc = tmp_path / "notes.md"
    doc.write_text("# Notes\n\nFast.\nSo the target is met.\n", encoding="utf-8")
    assert words_about_the_work(doc, ABOUT_THE_WORK) == [
        f"{doc}:4: 'target is met' (a verdict on a work target: state the figure against what it is "
        "compared with)"]


@pytest.mark.parametrize("words", [
    "stops at the target size", "the target of 25% equals the share of unbiased rows", "target 180,000",
    "above the 1200 of its target", "the conditions are met by every input", "float32, 16 features",
    "set-20261203T121058Z-21458-f37ddf", "cafe babe", "/proc/PID/io", "docs/oof.md", "1.5e-3",
])
def test_words_about_the_package_pass(words):
    assert not _matches(words, ABOUT_THE_WORK + NOT_IN_USER_DOCS), words
