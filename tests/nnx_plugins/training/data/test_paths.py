"""Finding the files of a text path: folder links never followed while descending, bounded."""

import os
import time

import pytest

from nnx_plugins import DataError
from nnx_plugins.training.data import _paths
from nnx_plugins.training.data._paths import glob_files, walk_files
from nnx_plugins.training.data._text import TextDataset, text_files


@pytest.fixture
def loops(tmp_path):
    """A folder whose subfolders link back to it, several times over (glob's ** used to descend
    them until the path was too long: b**40 paths)."""
    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("alpha " * 20)
    (root / "sub" / "b.txt").write_text("beta " * 20)
    for name in ("l1", "l2", "l3", "sub/l4", "sub/l5"):
        (root / name).symlink_to(root, target_is_directory=True)
    (root / "self").symlink_to(root / "self")  # (a link to itself: not a file, not a folder)
    return root


def test_a_glob_over_symlink_loops_ends(loops):
    started = time.perf_counter()
    found = glob_files(f"{loops}/**/*.txt")
    assert [os.path.relpath(p, loops) for p in found] == ["a.txt", os.path.join("sub", "b.txt")]
    assert time.perf_counter() - started < 30  # (milliseconds here; a loop would never end)
    assert [os.path.relpath(p, loops) for p in glob_files(f"{loops}/*/*.txt")] == [
        os.path.join(name, "a.txt") for name in ("l1", "l2", "l3")
    ] + [os.path.join("sub", "b.txt")]  # (one level through a link: bounded by the pattern)


def test_a_folder_of_symlink_loops_ends_with_a_clear_error(loops):
    files = text_files(str(loops))
    assert [os.path.relpath(p, loops) for p in files] == [
        "a.txt",
        "self",
        os.path.join("sub", "b.txt"),
    ]
    with pytest.raises(DataError, match=r"cannot open '.*self': .*"):
        _ = TextDataset(str(loops)).tokens
    assert (
        TextDataset(f"{loops}/**/*.txt", seq_len=4).tokens.size == 120 + 1 + 100
    )  # (joined by a newline)


def test_a_search_visits_a_bounded_number_of_entries(loops, monkeypatch):
    monkeypatch.setattr(_paths, "MAX_ENTRIES", 5)
    with pytest.raises(
        DataError, match=r"makes the search visit more than 5 files and folders; name a smaller"
    ):
        glob_files(f"{loops}/**/*.txt")
    with pytest.raises(DataError, match=r"more than 5 files and folders"):
        walk_files(str(loops))


def test_hidden_entries_are_skipped_unless_named(tmp_path):
    (tmp_path / ".secret.txt").write_text("x")
    (tmp_path / "open.txt").write_text("x")
    assert [os.path.basename(p) for p in glob_files(f"{tmp_path}/*.txt")] == ["open.txt"]
    assert [os.path.basename(p) for p in glob_files(f"{tmp_path}/.*.txt")] == [".secret.txt"]
    assert glob_files(f"{tmp_path}/nothing/*.txt") == []
