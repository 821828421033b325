"""Every committed run names a commit of this repository's history (issue 66): the git_sha of
each row of a committed results.csv, and of each committed final.json, under docs/results.
A run whose commit is not here cannot be rerun by anyone: its code is gone.

Only files git tracks count (`git ls-files`): a results.csv left in a checkout is nobody's
claim. A run that never finished (status incomplete: no final.json, so nothing recorded its
commit) names none and is left out; a finished run that names none is a problem."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.helpers import REPO

RESULTS = "docs/results"
RUN_FILES = ("results.csv", "final.json")
UNFINISHED = "incomplete"  # results.py's status for a run dir without final.json
NO_SHA = ("", "nan", "none", "null")  # how a missing value reads in a csv row or final.json
# A sha with one of these ends is a tree with uncommitted changes: no commit holds that code.
DIRTY = ("-dirty", "+")


def git(*args: str) -> str | None:
    """git's stdout in the checkout, or None where git is missing or fails."""
    if shutil.which("git") is None:
        return None
    r = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                       timeout=60)
    return r.stdout if r.returncode == 0 else None


def runs_of(path: Path) -> list[tuple[str, str]]:
    """(status, git_sha) of each run a committed results.csv or final.json records."""
    if path.name == "final.json":
        final = json.loads(path.read_text())
        return [(str(final.get("status", "")), str(final.get("git_sha") or ""))]
    with path.open(newline="") as f:
        return [(row.get("status") or "", row.get("git_sha") or "") for row in csv.DictReader(f)]


def named_commits(files: Iterable[tuple[str, Path]]) -> tuple[list[tuple[str, str]], int]:
    """The (file, sha) of every finished run in files ((name, path) pairs), and how many runs
    were left out as unfinished without a sha."""
    pairs, unfinished = [], 0
    for name, path in files:
        for status, sha in runs_of(path):
            if sha.strip().lower() in NO_SHA and status == UNFINISHED:
                unfinished += 1
            else:
                pairs.append((name, sha.strip()))
    return pairs, unfinished


def not_in_history(pairs: Iterable[tuple[str, str]], commits: set[str]) -> list[str]:
    """One line per (file, sha) whose sha is no commit of `commits` (full shas; a recorded sha
    may be a prefix of one), each (file, sha) once, in order."""
    problems: list[str] = []
    for name, sha in dict.fromkeys(pairs):
        if sha.lower() in NO_SHA:
            why = "a finished run that names no commit"
        elif sha.endswith(DIRTY):
            why = "a tree with uncommitted changes, which no commit holds"
        elif len(sha) < 7 or not any(c.startswith(sha.lower()) for c in commits):
            why = "not a commit of this repository's history (HEAD's ancestors)"
        else:
            continue
        problems.append(f"{name}: git_sha {sha or '(none)'}: {why}; rerun it at a commit of "
                        "main, or drop it")
    return problems


def test_a_sha_outside_the_history_is_named_with_its_file():
    known = {"1e50a888223f7af3093b63809e6ab3fdabc5f09b", "ec74fe7908a16ff53b6d4a8346d734c3f34eaf23"}
    pairs = [("a/results.csv", "1e50a888223f7af3093b63809e6ab3fdabc5f09b"),
             ("a/results.csv", "1e50a888223f7af3093b63809e6ab3fdabc5f09b"),  # its next row
             ("b/results.csv", "ec74fe7"),  # a prefix, as the records write them
             ("c/results.csv", "5001ca66d55943af27ca642eaacbf17f45c9f94c"),
             ("c/results.csv", "5001ca66d55943af27ca642eaacbf17f45c9f94c"),
             ("d/run/final.json", "ec74fe7908a16ff53b6d4a8346d734c3f34eaf23-dirty"),
             ("e/results.csv", ""),
             ("f/results.csv", "1e5")]  # too short to name one commit
    assert not_in_history(pairs, known) == [
        "c/results.csv: git_sha 5001ca66d55943af27ca642eaacbf17f45c9f94c: not a commit of this "
        "repository's history (HEAD's ancestors); rerun it at a commit of main, or drop it",
        "d/run/final.json: git_sha ec74fe7908a16ff53b6d4a8346d734c3f34eaf23-dirty: a tree with "
        "uncommitted changes, which no commit holds; rerun it at a commit of main, or drop it",
        "e/results.csv: git_sha (none): a finished run that names no commit; rerun it at a "
        "commit of main, or drop it",
        "f/results.csv: git_sha 1e5: not a commit of this repository's history (HEAD's "
        "ancestors); rerun it at a commit of main, or drop it"]
    assert not_in_history(pairs[:3], known) == []


def test_an_unfinished_run_without_a_sha_is_left_out_and_counted(tmp_path):
    table = tmp_path / "results.csv"
    table.write_text("norm.p,status,git_sha\n2.0,completed,abc1234\n4.0,incomplete,\n"
                     "inf,completed,\n")
    final = tmp_path / "final.json"
    final.write_text(json.dumps({"status": "pruned", "git_sha": "def5678"}))
    pairs, unfinished = named_commits([("t/results.csv", table), ("t/final.json", final)])
    assert pairs == [("t/results.csv", "abc1234"), ("t/results.csv", ""),
                     ("t/final.json", "def5678")]
    assert unfinished == 1


def test_every_committed_run_names_a_commit_of_this_history():
    if git("--version") is None:
        pytest.skip("git is not installed: no history to check the runs' commits against")
    shallow = git("rev-parse", "--is-shallow-repository")
    if shallow is None or shallow.strip() != "false":
        pytest.skip("the checkout has no full git history (not a repository, or shallow)")
    listed = git("ls-files", "-z", "--", RESULTS)
    assert listed is not None
    files = [(name, REPO / name) for name in listed.split("\0")
             if name and name.rsplit("/", 1)[-1] in RUN_FILES]
    assert len(files) >= 20, files  # the walk found the committed tables (paths, not a glob)
    pairs, unfinished = named_commits(files)
    commits = set((git("rev-list", "HEAD") or "").split())
    assert commits, "git rev-list HEAD gave no commit"
    problems = not_in_history(pairs, commits)
    # Left out: runs that never finished, which wrote no final.json and so no sha (6 when this
    # was written: 4 in the lr_width grid, 2 in the attention study); -rP shows the count.
    print(f"{len(pairs)} finished runs checked; {unfinished} unfinished ones name no commit")
    assert not problems, "\n".join(problems)
