"""The documents a stranger reads hold up: links resolve, the README's Python runs, no jargon.

a. Every relative link of README.md, CHANGELOG.md and docs/*.md (``[text](target)`` and
   images) names a file of the repository, and a ``#anchor`` names one of its headings (as
   GitHub makes anchors from headings).
b. The README's Python blocks run, in order, in one namespace, on small data the test builds:
   ``embeddings.npy`` / ``labels.npy`` in a temporary working directory (1200 x 16, 2 classes)
   and the names the README leaves to the reader bound by the test (``X_train``, ``y_train``,
   ``premise_id``).  The README's sizes are for a large dataset, so 100_000 / 50_000 / 10_000
   become 600 / 300 / 100 (the same proportions to one another); nothing else is changed.
   The shell blocks are not run: they install the package or run for minutes
   (``tests/test_cli.py`` and ``tests/test_synthetic.py`` run the same commands on small data).
c. No local paths and no words of the team's own bookkeeping (issue numbers, roles,
   "uncommitted", "this session") in README.md, docs/*.md and benchmarks/RESULTS.md.
"""
import os
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
READ_BY_STRANGERS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
                     ROOT / "benchmarks" / "RESULTS.md"]

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


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


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
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


#: The README's sizes (for a large dataset) -> the small data's.
SMALL_SIZES = {"100_000": "600", "50_000": "300", "10_000": "100"}


def test_readme_python_runs(tmp_path, monkeypatch, seed):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 3
    rng = np.random.default_rng([seed, 8])
    n = 1200
    X = rng.standard_normal((n, 16)).astype(np.float32)
    y = np.where(X[:, 0] + X[:, 1] + 0.7 * rng.standard_normal(n) > 0, "entailment", "contradiction")
    monkeypatch.chdir(tmp_path)
    np.save("embeddings.npy", X)
    np.save("labels.npy", y)
    namespace = {"X_train": X[:800], "y_train": y[:800], "premise_id": np.arange(n) // 3}
    for block in blocks:
        code = block
        for big, small in SMALL_SIZES.items():
            code = code.replace(big, small)
        exec(compile(code, "README.md", "exec"), namespace)
    res = namespace["res"]
    assert res.keep.size >= 600 and len(res.history) >= 1
    assert namespace["X_kept"].shape[1] == 16 and namespace["clf"].predict(X[:5]).shape == (5,)
    assert os.path.exists("run.ckpt.npz")  # the resumable run's checkpoint


#: What a stranger should never read: local paths and the team's own bookkeeping.
INTERNAL = [r"/work/", r"/home/\w", r"\b[Ii]ssue \d+", r"\bissue's\b", r"\bissue-\d", r"\bthe lead\b",
            r"kernel's owner", r"\buncommitted\b", r"\bthis session\b", r"\breviewer\b",
            r"\bother engineers\b"]


@pytest.mark.parametrize("doc", READ_BY_STRANGERS, ids=lambda p: str(p.relative_to(ROOT)))
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
