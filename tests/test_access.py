"""Tests for files/access.py: safe reads of listed files, and reads confined to the folders."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from semsearch.errors import ExtractError, PathRefusedError
from semsearch.files.access import Locator, read_file_bytes, read_text
from semsearch.files.ignore import IgnoreSettings
from semsearch.files.listing import FileEntry, list_files
from tests.conftest import write_tree

IGNORE = IgnoreSettings()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An empty folder of the test's own (conftest puts a HOME folder in tmp_path)."""
    path = tmp_path / "folder"
    path.mkdir()
    return path


@pytest.fixture
def alarm() -> Iterator[None]:
    """Fail instead of hanging forever if a read blocks."""
    if not hasattr(signal, "SIGALRM"):
        pytest.skip("needs SIGALRM")

    def on_alarm(signum: int, frame: object) -> None:
        raise TimeoutError("blocked")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(5)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def entry_for(path: Path, rel: str) -> FileEntry:
    return FileEntry(rel, str(path), 0, 0)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_read_file_bytes_refuses_fifo_promptly(folder: Path, alarm: None) -> None:
    os.mkfifo(folder / "pipe.txt")
    with pytest.raises(ExtractError, match=r"pipe\.txt: not a regular file"):
        read_file_bytes(entry_for(folder / "pipe.txt", "pipe.txt"))


def test_read_file_bytes_refuses_symlink(folder: Path) -> None:
    write_tree(folder, {"real.md": "r"})
    (folder / "link.md").symlink_to(folder / "real.md")
    with pytest.raises(ExtractError, match=r"link\.md: is a symlink"):
        read_file_bytes(entry_for(folder / "link.md", "link.md"))


def test_read_file_bytes_reads_within_cap(folder: Path) -> None:
    write_tree(folder, {"a.txt": "0123456789", "doc.pdf": "0123456789" * 3})
    settings = IgnoreSettings(max_file_size=10, max_document_size=30)
    assert read_file_bytes(entry_for(folder / "a.txt", "a.txt"), settings) == b"0123456789"
    assert len(read_file_bytes(entry_for(folder / "doc.pdf", "doc.pdf"), settings)) == 30


def test_read_file_bytes_refuses_file_that_grew(folder: Path) -> None:
    write_tree(folder, {"a.txt": "x" * 11})
    with pytest.raises(ExtractError, match=r"a\.txt: too large \(11 bytes > 10\)"):
        read_file_bytes(entry_for(folder / "a.txt", "a.txt"), IgnoreSettings(max_file_size=10))


def test_read_file_bytes_missing_file_raises_oserror(folder: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_file_bytes(entry_for(folder / "gone.txt", "gone.txt"))


def test_read_text_decodes_like_the_indexer(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "t", {"crlf.txt": b"one\r\ntwo\r\n", "nul.txt": b"a\x00b"})
    listing = {entry.rel: entry for entry in list_files(root, IGNORE).files}
    assert read_text(listing["crlf.txt"], IGNORE).text == "one\ntwo\n"
    with pytest.raises(ExtractError, match="binary content"):
        read_text(listing["nul.txt"], IGNORE)


@pytest.fixture
def confined(tmp_path: Path) -> tuple[Path, Path]:
    """A configured folder with a symlink out, and an outside sibling sharing its name prefix."""
    data = write_tree(
        tmp_path / "data",
        {"ok.md": "fine\n", "private/secret.md": "hidden\n", ".indexignore": "private/\n"},
    )
    outside = write_tree(tmp_path / "data-private", {"key.txt": "FAKE-KEY\n"})
    (data / "link.txt").symlink_to(outside / "key.txt")
    (data / "inner.txt").symlink_to(data / "ok.md")
    return data, outside


def test_locator_allows_listed_files(confined: tuple[Path, Path]) -> None:
    data, _ = confined
    located = Locator([data], IGNORE).locate(str(data / "ok.md"))
    assert (located.root, located.entry.rel) == (data, "ok.md")


def test_locator_follows_symlinks_inside_the_folder(confined: tuple[Path, Path]) -> None:
    data, _ = confined
    assert Locator([data], IGNORE).locate(str(data / "inner.txt")).entry.rel == "ok.md"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("{data}/../data-private/key.txt", "not inside any configured folder"),
        ("{outside}/key.txt", "not inside any configured folder"),
        ("{data}/link.txt", "not inside any configured folder"),
        ("/etc/passwd", "not inside any configured folder"),
        ("{data}/private/secret.md", "excluded from indexing .ignored by .indexignore"),
        ("{data}/missing.md", "not found"),
        ("{data}", "a folder, not a file"),
        ("ok.md", "not an absolute path"),
        ("{data}/ok.md\x00", "holds a NUL character"),  # found by fuzzing: a ValueError
    ],
)
def test_locator_refusals(confined: tuple[Path, Path], path: str, message: str) -> None:
    data, outside = confined
    with pytest.raises(PathRefusedError, match=message):
        Locator([data], IGNORE).locate(path.format(data=data, outside=outside))


def test_locator_uses_the_innermost_folder(confined: tuple[Path, Path]) -> None:
    data, _ = confined
    nested = write_tree(data / "sub", {"n.md": "nested\n"})
    located = Locator([data, nested], IGNORE).locate(str(nested / "n.md"))
    assert (located.root, located.entry.rel) == (nested, "n.md")


SECRET_REFUSED = (
    "Refused: {path} is a secret file (matches {pattern}); semsearch never reads secret files. "
    "To read it anyway, add a pattern for it to `allowSecretPatterns` in the config file."
)


@pytest.mark.parametrize("is_git", [False, True])
@pytest.mark.parametrize(
    ("rel", "pattern"),
    [(".env", ".env"), ("config/.env.production", ".env.*"), ("deploy/id_rsa", "id_rsa*")],
)
def test_locator_refuses_secret_files(tmp_path: Path, is_git: bool, rel: str, pattern: str) -> None:
    data = write_tree(tmp_path / "data", {rel: "SECRET=hunter2\n", "ok.md": "fine\n"})
    if is_git:  # committed, so git lists it: still refused
        for args in (["init", "-q"], ["add", "-A"]):
            subprocess.run(["git", "-C", str(data), *args], check=True, capture_output=True)
    path = str(data / rel)
    with pytest.raises(PathRefusedError) as refused:
        Locator([data], IGNORE).locate(path)
    assert str(refused.value) == SECRET_REFUSED.format(path=path, pattern=pattern)


def test_locator_refuses_a_symlink_to_a_secret_file(tmp_path: Path) -> None:
    data = write_tree(tmp_path / "data", {".env": "SECRET=hunter2\n"})
    (data / "notes.txt").symlink_to(data / ".env")
    with pytest.raises(PathRefusedError, match=r"is a secret file \(matches \.env\)"):
        Locator([data], IGNORE).locate(str(data / "notes.txt"))


def test_locator_reads_an_opted_in_secret_and_env_templates(tmp_path: Path) -> None:
    data = write_tree(tmp_path / "data", {".env.test": "X=1\n", ".env.example": "X=\n"})
    allowing = IgnoreSettings(allow_secret_patterns=(".env.test",))
    assert Locator([data], allowing).locate(str(data / ".env.test")).entry.rel == ".env.test"
    assert Locator([data], IGNORE).locate(str(data / ".env.example")).entry.rel == ".env.example"


def test_locator_refuses_skipped_kinds_with_their_reason(tmp_path: Path) -> None:
    data = write_tree(tmp_path / "data", {"yarn.lock": "x\n"})
    with pytest.raises(PathRefusedError, match=r"excluded from indexing \(lockfile\)"):
        Locator([data], IGNORE).locate(str(data / "yarn.lock"))
    opted = IgnoreSettings(index_kinds=frozenset({"lockfile"}))
    assert Locator([data], opted).locate(str(data / "yarn.lock")).entry.rel == "yarn.lock"
