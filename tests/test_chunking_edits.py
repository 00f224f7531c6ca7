"""Tests for chunking an edited text so that it keeps the chunks of its earlier version."""

from __future__ import annotations

import itertools
import random

import pytest

from semsearch.text.chunking import Chunk, ChunkSettings, chunk_text
from tests.test_chunking import RegexSpans, assert_covers, assert_verbatim, overlap_tokens, words


def dense_code(lines: int, seed: int) -> list[str]:
    """Short lines with no blank line between them: the text greedy packing cascades on."""
    rng = random.Random(seed)
    return [
        "    " * rng.randint(0, 3) + f"value_{n} = call_{rng.randrange(99)}(arg, {n})"
        for n in range(lines)
    ]


def changed(lines: list[str], kind: str, at: int) -> list[str]:
    edited = list(lines)
    if kind == "edit":
        edited[at] += "  # and a comment"
    elif kind == "insert":
        edited.insert(at, "    inserted = helper(1, 2, 3)")
    else:
        del edited[at]
    return edited


def new_texts(before: list[Chunk], after: list[Chunk]) -> int:
    return len({c.text for c in after} - {c.text for c in before})


@pytest.mark.parametrize("seed", range(20))
def test_unchanged_text_keeps_exactly_its_chunks(seed: int) -> None:
    rng = random.Random(seed)
    lines = [
        words(rng.choice([0, 0, 1, 3, 8, 40, 120]), seed=rng.randrange(10**9)) for _ in range(300)
    ]
    text = "\n".join(lines)
    target = rng.randint(5, 60)
    settings = ChunkSettings(target, rng.randint(0, target - 1), rng.randint(target, 80))
    fresh = chunk_text(text, RegexSpans(), settings)
    assert chunk_text(text, RegexSpans(), settings, [c.text for c in fresh]) == fresh


@pytest.mark.parametrize("whole_lines", [False, True])
@pytest.mark.parametrize("kind", ["edit", "insert", "delete"])
def test_a_one_line_change_without_blank_lines_changes_at_most_three_chunks(
    kind: str, whole_lines: bool
) -> None:
    settings = ChunkSettings(whole_lines=whole_lines)  # at the default chunk size
    worst_fresh, worst_kept = 0, 0
    for seed in range(6):
        lines = dense_code(1200, seed)
        before = chunk_text("\n".join(lines), RegexSpans(), settings)
        assert len(before) > 40
        for at in random.Random(seed).sample(range(1, 999), 8):
            text = "\n".join(changed(lines, kind, at))
            fresh = chunk_text(text, RegexSpans(), settings)
            worst_fresh = max(worst_fresh, new_texts(before, fresh))
            kept = chunk_text(text, RegexSpans(), settings, [c.text for c in before])
            worst_kept = max(worst_kept, new_texts(before, kept))
    assert worst_kept <= 3
    assert worst_fresh > 10  # what the old chunks are passed for: fresh packing cascades


@pytest.mark.parametrize("whole_lines", [False, True])
@pytest.mark.parametrize("seed", range(30))
def test_chunks_of_an_edited_text_keep_every_invariant(seed: int, whole_lines: bool) -> None:
    rng = random.Random(seed)
    lines = [
        words(rng.choice([0, 1, 3, 8, 40, 120]), seed=rng.randrange(10**9)) for _ in range(200)
    ]
    target = rng.randint(5, 60)
    limit = rng.randint(target, 80)
    settings = ChunkSettings(target, rng.randint(0, target - 1), limit, whole_lines=whole_lines)
    before = chunk_text("\n".join(lines), RegexSpans(), settings)
    for _ in range(rng.randint(1, 20)):  # a branch switch: many changes at once
        lines = changed(lines, rng.choice(["edit", "insert", "delete"]), rng.randrange(len(lines)))
    text = "\n".join(lines)
    chunks = chunk_text(text, RegexSpans(), settings, [c.text for c in before])
    assert_verbatim(text, chunks)
    assert_covers(text, chunks, RegexSpans())
    for previous, chunk in itertools.pairwise(chunks):
        assert previous.start_offset < chunk.start_offset < previous.end_offset + len(text)
        assert previous.end_offset < chunk.end_offset
        assert overlap_tokens(previous, chunk, RegexSpans()) <= settings.overlap_tokens
    assert all(0 < c.token_count <= settings.hard_token_limit for c in chunks)
    if whole_lines:  # a chunk starts inside a line only when the line is over the limit
        for chunk in chunks:
            if chunk.start_offset and text[chunk.start_offset - 1] != "\n":
                assert len(lines[chunk.start_line - 1].split()) > limit


def test_old_chunks_chunked_inside_lines_are_not_kept_with_whole_lines() -> None:
    text = "\n".join(f"value_{n} = " + words(45, seed=n) for n in range(300))
    old = chunk_text(text, RegexSpans())
    assert any(text[c.start_offset - 1] != "\n" for c in old[1:])  # word-start overlaps
    settings = ChunkSettings(whole_lines=True)
    kept = chunk_text(text, RegexSpans(), settings, [c.text for c in old])
    assert kept == chunk_text(text, RegexSpans(), settings)


def test_old_chunks_from_another_text_change_nothing() -> None:
    text = "\n".join(dense_code(400, seed=1))
    unrelated = [c.text for c in chunk_text("\n".join(dense_code(400, seed=2)), RegexSpans())]
    assert chunk_text(text, RegexSpans(), previous=unrelated) == chunk_text(text, RegexSpans())


def test_a_long_insertion_is_chunked_afresh_and_the_rest_kept() -> None:
    lines = dense_code(600, seed=3)
    before = chunk_text("\n".join(lines), RegexSpans())
    inserted = [f"block_{n} = other({n})" for n in range(150)]
    text = "\n".join([*lines[:300], *inserted, *lines[300:]])
    after = chunk_text(text, RegexSpans(), previous=[c.text for c in before])
    fresh_inserted = chunk_text("\n".join(inserted), RegexSpans())
    assert new_texts(before, after) <= len(fresh_inserted) + 3
    assert max(c.token_count for c in after) <= ChunkSettings().hard_token_limit
