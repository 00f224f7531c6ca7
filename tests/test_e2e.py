"""End to end through the CLI with the real ONNX model on a mixed fixture corpus."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from semsearch.cli.commands import main
from semsearch.config import load_settings
from semsearch.index import Index
from semsearch.model.embedder import OnnxEmbedder
from tests.conftest import BACKENDS, write_tree
from tests.docgen import write_docx, write_pdf

SECRET = "hunter2-never-index-this"

CORPUS: dict[str, str | bytes] = {
    "lib/payment_service.dart": (
        "class PaymentService {\n"
        "  // Charges the customer's card during checkout.\n"
        "  Future<Receipt> chargeCard(Order order) async {\n"
        "    final response = await gateway.charge(order.total);\n"
        "    if (!response.ok) {\n"
        "      throw PaymentError('ERR_ZORBLATT_7741');\n"
        "    }\n"
        "    return Receipt(response.id);\n"
        "  }\n"
        "}\n"
    ),
    "src/Registration.kt": (
        "package app\n\n"
        "class Registration(private val repo: FollowRepository) {\n"
        "    // Following an account twice is a no-op: the operation is idempotent.\n"
        "    fun follow(userId: String, targetId: String) {\n"
        "        if (repo.isFollowing(userId, targetId)) return\n"
        "        repo.insertFollow(userId, targetId)\n"
        "    }\n"
        "}\n"
    ),
    "src/session.js": (
        "// Session handling for the web client.\n"
        "export function createSession(user) {\n"
        "  return { user, token: crypto.randomUUID(), expiresAt: Date.now() + 3600e3 };\n"
        "}\n\n"
        "export const parseHeaderLine = (line) => line.split(':').map((s) => s.trim());\n"
    ),
    "tools/cleanup.py": (
        "import shutil\n\n\n"
        "def remove_stale_builds(root):\n"
        '    """Delete build folders older than a week to free disk space."""\n'
        "    for child in root.iterdir():\n"
        "        shutil.rmtree(child)\n"
    ),
    "docs/retry.md": (
        "# Retries\n\n"
        "When a payment request keeps failing we retry it with exponential backoff:\n"
        "200 ms, 400 ms, then 800 ms. Every retry reuses the same idempotency key so the\n"
        "customer is never charged twice.\n\n"
        "After the third failure the order is marked as failed and support is notified.\n"
    ),
    "docs/caching.md": (
        "# Caching\n\nProduct pages are cached at the edge for five minutes.\n"
        "A deploy purges the whole cache.\n"
    ),
    "notes/windows.txt": (
        b"Line one of a Windows file\r\n\r\nThe quarterly budget review happens in March.\r\n"
    ),
    "notes/legacy.txt": "Le café de la gare ouvre à six heures.\n".encode("latin-1"),
    "generated/out.txt": f"generated marker {SECRET}\n",
    "private/secret.md": f"# Private\n\nthe private marker {SECRET}\n",
    "logo.png": b"\x89PNG\r\n\x1a\nfake png bytes\x00\x00binary marker",
    "data.bin.txt": b"binary content marker\x00\x01\x02 in a text-named file",
    ".gitignore": "generated/\n",
    ".indexignore": "private/\n",
}


def git(root: Path, *args: str) -> None:
    """Run git with a throwaway identity."""
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root), *args],
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git work tree with code, docs, a PDF, a DOCX and files that must never be indexed."""
    root = write_tree(tmp_path_factory.mktemp("e2e") / "shop", CORPUS)
    write_pdf(
        root / "manual.pdf",
        [
            "Installation guide\nUnpack the archive.",
            "Troubleshooting\nThe printer jams on wet paper.",
        ],
    )
    write_docx(
        root / "minutes.docx",
        ["Board meeting minutes", "The board approved the new warehouse in Rotterdam."],
        table=[["item", "owner"], ["forklift lease", "Marta"]],
    )
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "fixture")
    return root


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Call the CLI in-process; returns (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def search_json(
    capsys: pytest.CaptureFixture[str], query: str, k: int = 3
) -> list[dict[str, object]]:
    """Search through the CLI and parse its JSON."""
    code, out, err = run(capsys, "search", query, "-k", str(k), "--json")
    assert code == 0, err
    hits: list[dict[str, object]] = json.loads(out)["results"]
    return hits


@pytest.fixture
def indexed(corpus: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The corpus added and indexed with the real model."""
    assert run(capsys, "add", str(corpus))[0] == 0
    code, out, err = run(capsys, "index", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["filesIndexed"] >= 9
    assert summary["errors"] == 0
    return corpus


@pytest.mark.parametrize(
    ("query", "rel", "line"),
    [
        ("ERR_ZORBLATT_7741", "lib/payment_service.dart", 1),
        ("parseHeaderLine", "src/session.js", 1),
        ("remove_stale_builds", "tools/cleanup.py", 1),
        ("what happens when a payment request keeps failing", "docs/retry.md", 1),
        ("charging a card during checkout", "lib/payment_service.dart", 1),
        ("following another account is idempotent", "src/Registration.kt", 1),
        ("printer paper jam", "manual.pdf", None),
        ("warehouse approved by the board", "minutes.docx", 1),
        ("quarterly budget review", "notes/windows.txt", 1),
        ("café de la gare", "notes/legacy.txt", 1),
    ],
)
def test_queries_find_the_right_file_and_line(
    indexed: Path, capsys: pytest.CaptureFixture[str], query: str, rel: str, line: int | None
) -> None:
    hits = search_json(capsys, query)
    assert hits[0]["relPath"] == rel
    assert hits[0]["filePath"] == str(indexed / rel)
    if line is not None:
        assert hits[0]["startLine"] == line


def test_pdf_hit_carries_its_page(indexed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hits = search_json(capsys, "printer jams on wet paper", k=1)
    assert (hits[0]["relPath"], hits[0]["page"]) == ("manual.pdf", 2)


def test_crlf_and_latin1_text_is_stored_clean(
    indexed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    by_rel = {hit["relPath"]: hit for hit in search_json(capsys, "café budget review", k=10)}
    assert "\r" not in str(by_rel["notes/windows.txt"]["text"])
    assert "café" in str(by_rel["notes/legacy.txt"]["text"])


@pytest.mark.parametrize(
    "query",
    [SECRET, "generated marker", "private marker", "fake png bytes", "binary content marker"],
)
def test_ignored_and_binary_files_never_appear(
    indexed: Path, capsys: pytest.CaptureFixture[str], query: str
) -> None:
    hits = search_json(capsys, query, k=20)
    paths = {hit["relPath"] for hit in hits}
    assert not paths & {"generated/out.txt", "private/secret.md", "logo.png", "data.bin.txt"}
    assert all(SECRET not in str(hit["text"]) for hit in hits)


def test_second_index_embeds_nothing(indexed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "index", "--json")
    summary = json.loads(out)
    assert code == 0
    assert (summary["filesIndexed"], summary["chunksWritten"]) == (0, 0)
    assert summary["filesUnchanged"] >= 9


def test_removing_a_folder_purges_it(
    indexed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = write_tree(
        tmp_path / "extra", {"plan.md": "The zorblatt migration schedule is final.\n"}
    )
    assert run(capsys, "add", str(extra))[0] == 0
    assert run(capsys, "index")[0] == 0
    assert search_json(capsys, "zorblatt migration schedule", k=1)[0]["relPath"] == "plan.md"
    code, out, _ = run(capsys, "remove", "extra")
    assert code == 0
    assert "purged    1 file" in out
    assert all(
        hit["relPath"] != "plan.md" for hit in search_json(capsys, "zorblatt migration", k=10)
    )


def test_copied_index_searches_elsewhere(
    indexed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], isolated_env: Path
) -> None:
    source = isolated_env / ".local" / "share" / "semsearch" / "index.db"
    run(capsys, "status")  # opens and closes the index: WAL content is checkpointed on close
    copy = tmp_path / "copy.db"
    copy.write_bytes(source.read_bytes())
    code, out, err = run(capsys, "--index", str(copy), "search", "ERR_ZORBLATT_7741", "--json")
    assert code == 0, err
    assert json.loads(out)["results"][0]["relPath"] == "lib/payment_service.dart"


SAME_RESULT_QUERIES = (
    "ERR_ZORBLATT_7741",
    "parseHeaderLine",
    "remove_stale_builds",
    "what happens when a payment request keeps failing",
    "charging a card during checkout",
    "following another account is idempotent",
    "printer paper jam",
    "warehouse approved by the board",
    "quarterly budget review",
    "café de la gare",
    "session token expiry",
    "cache purge on deploy",
)


@pytest.mark.lancedb
def test_both_backends_return_the_same_top_results(
    corpus: Path, tmp_path: Path, isolated_env: Path
) -> None:
    # fp32: its vectors do not depend on the texts embedded in the same call. int8's move a
    # little with their batch companions, and LanceDB embeds one chunk alone first to learn the
    # dimension (Indexer._ensure_model), so its batches differ from SQLite's.
    embedder = OnnxEmbedder(variant="fp32")
    found: dict[str, list[list[tuple[str, int]]]] = {}
    for backend in BACKENDS:
        env = {**os.environ, "SS_STORE_BACKEND": backend}
        index = Index(load_settings(env, str(tmp_path / backend / "index.db")), embedder=embedder)
        index.update([corpus])
        found[backend] = [
            [(hit.rel, hit.start_line) for hit in index.search(query, k=3)]
            for query in SAME_RESULT_QUERIES
        ]
        index.close()
    assert found["lancedb"] == found["sqlite"]
