"""Tests for text/chunking.py: verbatim slices, window limits, overlap and the seed's bugs."""

from __future__ import annotations

import base64
import itertools
import random
import re
import statistics
import time
from pathlib import Path

import pytest
from tokenizers import Tokenizer

import semsearch
from semsearch.errors import ConfigError
from semsearch.model.builds import packaged_tokenizer
from semsearch.model.embedder import OnnxEmbedder
from semsearch.text.chunking import Chunk, ChunkSettings, TokenSpans, chunk_text
from tests.conftest import library_tokenizer

TOKENIZER_JSON = packaged_tokenizer()
MODEL_WINDOW = 256
# fmt: off
WORDS = [
    "the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "semantic",
    "search", "engines", "index", "embeddings", "of", "paragraphs", "tokenization",
    "unbelievably", "internationalization", "café", "naïve", "vector", "query", "result",
    "window", "model", "local", "file", "sentence",
]
# fmt: on


class RegexSpans:
    """Fake tokenizer: one token per word or punctuation mark; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        self.calls += 1
        return [m.span() for m in re.finditer(r"\w+|[^\w\s]", text)]


@pytest.fixture(scope="module")
def raw_tokenizer() -> Tokenizer:
    return library_tokenizer(TOKENIZER_JSON)


@pytest.fixture(scope="module")
def real() -> OnnxEmbedder:
    """The token spans the indexer chunks with (the ONNX session is never loaded here)."""
    return OnnxEmbedder()


def words(count: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(count))


def prose(paragraphs: int, seed: int = 0, wrap: bool = False) -> str:
    rng = random.Random(seed)
    paras = [
        words(rng.randint(20, 140), seed=rng.randrange(10**9)) + "." for _ in range(paragraphs)
    ]
    if wrap:
        paras = [re.sub(r"(.{60,79}) ", "\\1\n", para) for para in paras]
    return "\n\n".join(paras) + "\n"


def minified_js(size: int) -> str:
    body = "".join(
        f"function f{i}(a,b){{return a.map(x=>x*{i}).filter(Boolean)||b}};var v{i}=f{i}([1],0);"
        for i in range(size // 60 + 1)
    )
    return body[:size]


def naive_line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def assert_verbatim(text: str, chunks: list[Chunk]) -> None:
    for chunk in chunks:
        assert text[chunk.start_offset : chunk.end_offset] == chunk.text
        assert chunk.text == chunk.text.rstrip() and chunk.text.strip()
        assert chunk.start_line == naive_line(text, chunk.start_offset)
        assert chunk.end_line == naive_line(text, chunk.end_offset - 1)


def assert_covers(text: str, chunks: list[Chunk], tokenizer: TokenSpans) -> None:
    covered = bytearray(len(text))
    for chunk in chunks:
        covered[chunk.start_offset : chunk.end_offset] = b"\x01" * len(chunk.text)
    missed = [i for i, char in enumerate(text) if not covered[i] and not char.isspace()]
    assert missed == []
    assert all(covered[start] for start, _ in tokenizer.token_spans(text))


def overlap_tokens(previous: Chunk, chunk: Chunk, tokenizer: TokenSpans) -> int:
    if chunk.start_offset >= previous.end_offset:
        return 0
    return len(tokenizer.token_spans(chunk.text[: previous.end_offset - chunk.start_offset]))


def assert_overlaps(chunks: list[Chunk], tokenizer: TokenSpans, settings: ChunkSettings) -> None:
    for previous, chunk in itertools.pairwise(chunks):
        assert previous.start_offset < chunk.start_offset
        assert previous.end_offset < chunk.end_offset
        assert 0 < overlap_tokens(previous, chunk, tokenizer) <= settings.overlap_tokens


@pytest.mark.parametrize("text", ["", " ", "\n\n\n", " \r\n\t\r\n", "\u3000\n"])
def test_whitespace_only_gives_no_chunks(text: str) -> None:
    assert chunk_text(text, RegexSpans()) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hello", Chunk("hello", 0, 5, 1, 1, 1)),
        ("One, two.\nThree\n", Chunk("One, two.\nThree", 0, 15, 1, 2, 5)),
        ("\n\n  a b\n\n\n c\n \n", Chunk("  a b\n\n\n c", 2, 12, 3, 6, 3)),
        ("x\r\n\r\ny\r\n", Chunk("x\r\n\r\ny", 0, 6, 1, 3, 2)),
        ("中文😀 ok", Chunk("中文😀 ok", 0, 6, 1, 1, 3)),
    ],
)
def test_short_text_is_one_trimmed_chunk(text: str, expected: Chunk) -> None:
    assert chunk_text(text, RegexSpans()) == [expected]


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_chunks_are_verbatim_slices_with_naive_line_numbers(newline: str) -> None:
    rng = random.Random(3)
    parts = [words(rng.randint(1, 30), seed=i) for i in range(80)]
    text = "".join(part + newline * rng.randint(1, 4) for part in parts)
    settings = ChunkSettings(target_tokens=25, overlap_tokens=6, hard_token_limit=30)
    chunks = chunk_text(text, RegexSpans(), settings)
    assert len(chunks) > 10
    assert_verbatim(text, chunks)
    assert_covers(text, chunks, RegexSpans())


def test_crlf_text_splits_into_paragraphs_like_lf_text() -> None:
    lf_text = prose(30, seed=4)
    lf_chunks = chunk_text(lf_text, RegexSpans())
    crlf_chunks = chunk_text(lf_text.replace("\n", "\r\n"), RegexSpans())
    assert [c.text.replace("\r\n", "\n") for c in crlf_chunks] == [c.text for c in lf_chunks]
    assert [c.start_line for c in crlf_chunks] == [c.start_line for c in lf_chunks]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("prose", prose(60, seed=5)),
        ("wrapped prose", prose(60, seed=6, wrap=True)),
        ("minified js", minified_js(100_000)),
        ("cjk line", "中文字符的分词测试" * 334),
        ("emoji", " ".join("😀🎉 party🚀time 🇫🇷 naïve" for _ in range(1500))),
        ("base64", base64.b64encode(random.Random(7).randbytes(7500)).decode()),
        ("one long word", "x" * 10_000),
        ("long wordpieces", " ".join(["internationalizationunbelievably"] * 800)),
    ],
)
def test_no_chunk_exceeds_the_model_window(
    name: str, text: str, real: OnnxEmbedder, raw_tokenizer: Tokenizer
) -> None:
    chunks = chunk_text(text, real)
    assert_verbatim(text, chunks)
    assert_covers(text, chunks, real)
    for chunk in chunks:
        with_specials = len(raw_tokenizer.encode(chunk.text, add_special_tokens=True).ids)
        assert with_specials <= MODEL_WINDOW, name
        assert with_specials == chunk.token_count + 2, name


def test_long_lines_are_cut_between_words(real: OnnxEmbedder) -> None:
    text = words(3000, seed=8).replace(" ", "  ")
    chunks = chunk_text(text, real)
    assert len(chunks) > 10
    for chunk in chunks[1:]:
        assert text[chunk.start_offset - 1] == " "


def test_small_paragraphs_overlap_without_repeating_a_chunk() -> None:
    rng = random.Random(9)
    text = "\n\n".join(words(rng.randint(1, 12), seed=i) for i in range(300))
    settings = ChunkSettings()
    chunks = chunk_text(text, RegexSpans(), settings)
    assert len(chunks) > 5
    assert_overlaps(chunks, RegexSpans(), settings)
    for chunk in chunks[1:]:
        assert text[chunk.start_offset - 1] == "\n"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("single-line paragraphs", prose(40, seed=10)),
        ("one long line", words(5000, seed=11)),
        ("code lines", "\n".join(f"    value_{i} = compute(a, b[{i}])" for i in range(2000))),
    ],
)
def test_consecutive_chunks_overlap_within_budget(name: str, text: str) -> None:
    settings = ChunkSettings()
    chunks = chunk_text(text, RegexSpans(), settings)
    assert len(chunks) > 5, name
    assert_overlaps(chunks, RegexSpans(), settings)


def test_code_overlap_is_rounded_to_whole_lines() -> None:
    text = "\n".join(f"    value_{i} = compute(a, b[{i}])" for i in range(2000))
    chunks = chunk_text(text, RegexSpans())
    assert len(chunks) > 5  # else the loop below checks nothing
    for previous, chunk in itertools.pairwise(chunks):
        assert chunk.start_offset < previous.end_offset  # it overlaps, from a line start
        assert text[chunk.start_offset - 1] == "\n"
        assert chunk.text.startswith("    value_")


@pytest.mark.parametrize("wrap", [False, True])
def test_mean_chunk_size_is_near_target(wrap: bool, real: OnnxEmbedder) -> None:
    settings = ChunkSettings()
    chunks = chunk_text(prose(300, seed=12, wrap=wrap), real, settings)
    mean = statistics.mean(chunk.token_count for chunk in chunks)
    assert 0.6 * settings.target_tokens <= mean <= 1.1 * settings.target_tokens


@pytest.mark.parametrize("sizes", [(180, 20, 250), (250, 250, 250), (20, 250, 20), (254, 1)])
def test_seed_paragraph_sizes_stay_within_limit(sizes: tuple[int, ...]) -> None:
    text = "\n\n".join(words(size, seed=size) for size in sizes)
    settings = ChunkSettings()
    chunks = chunk_text(text, RegexSpans(), settings)
    assert all(chunk.token_count <= settings.hard_token_limit for chunk in chunks)
    assert all(len(RegexSpans().token_spans(c.text)) == c.token_count for c in chunks)
    assert_covers(text, chunks, RegexSpans())


@pytest.mark.parametrize("tokenizer_name", ["fake", "real"])
def test_seed_long_paragraph_is_split_and_covered(tokenizer_name: str, real: OnnxEmbedder) -> None:
    tokenizer: TokenSpans = RegexSpans() if tokenizer_name == "fake" else real
    text = "Intro line.\n\n" + words(1200, seed=13) + "\n\nOutro line.\n"
    chunks = chunk_text(text, tokenizer)
    assert len(chunks) > 1
    assert_covers(text, chunks, tokenizer)
    limit = ChunkSettings().hard_token_limit
    assert all(len(tokenizer.token_spans(c.text)) <= limit for c in chunks)


@pytest.mark.parametrize("seed", range(40))
def test_invariants_hold_on_random_documents(seed: int) -> None:
    rng = random.Random(seed)
    lines = [
        words(rng.choice([0, 0, 1, 3, 8, 40, 120]), seed=rng.randrange(10**9)) for _ in range(200)
    ]
    text = rng.choice(["\n", "\r\n"]).join(lines)
    target = rng.randint(2, 60)
    settings = ChunkSettings(target, rng.randint(0, target - 1), rng.randint(target, 80))
    chunks = chunk_text(text, RegexSpans(), settings)
    assert_verbatim(text, chunks)
    assert_covers(text, chunks, RegexSpans())
    for previous, chunk in itertools.pairwise(chunks):
        assert previous.start_offset < chunk.start_offset
        assert previous.end_offset < chunk.end_offset
        assert overlap_tokens(previous, chunk, RegexSpans()) <= settings.overlap_tokens
    assert all(0 < c.token_count <= settings.hard_token_limit for c in chunks)
    assert chunk_text(text, RegexSpans(), settings) == chunks


def starts_inside_a_line(text: str, chunk: Chunk) -> bool:
    return chunk.start_offset > 0 and text[chunk.start_offset - 1] != "\n"


@pytest.mark.parametrize("seed", range(40))
def test_whole_lines_chunks_start_inside_a_line_only_when_it_is_over_the_limit(seed: int) -> None:
    rng = random.Random(seed)
    lines = [
        words(rng.choice([0, 0, 1, 3, 8, 40, 120]), seed=rng.randrange(10**9)) for _ in range(200)
    ]
    text = rng.choice(["\n", "\r\n"]).join(lines)
    target = rng.randint(2, 60)
    limit = rng.randint(target, 80)
    settings = ChunkSettings(target, rng.randint(0, target - 1), limit, whole_lines=True)
    chunks = chunk_text(text, RegexSpans(), settings)
    assert_verbatim(text, chunks)
    assert_covers(text, chunks, RegexSpans())
    for previous, chunk in itertools.pairwise(chunks):
        assert previous.start_offset < chunk.start_offset
        assert previous.end_offset < chunk.end_offset
        assert overlap_tokens(previous, chunk, RegexSpans()) <= settings.overlap_tokens
    assert all(0 < c.token_count <= limit for c in chunks)
    long_lines = {n for n, line in enumerate(lines, 1) if len(line.split()) > limit}
    inside = [c.start_line for c in chunks if starts_inside_a_line(text, c)]
    assert set(inside) <= long_lines


def test_python_code_chunks_start_at_line_starts(real: OnnxEmbedder) -> None:
    """Real code (this package's modules, one long file) chunked by the model's tokenizer as the
    indexer chunks code: no chunk starts inside a line, cutting off a ``def``."""
    package = Path(semsearch.__file__).parent
    text = "\n\n".join(path.read_text("utf-8") for path in sorted(package.rglob("*.py")))
    before = chunk_text(text, real, ChunkSettings())
    assert sum(starts_inside_a_line(text, c) for c in before) > 50  # what whole_lines is for
    chunks = chunk_text(text, real, ChunkSettings(whole_lines=True))
    assert_verbatim(text, chunks)
    assert_covers(text, chunks, real)
    assert [c.start_line for c in chunks if starts_inside_a_line(text, c)] == []
    lines = text.split("\n")
    assert all(lines[c.start_line - 1].startswith(c.text.split("\n")[0]) for c in chunks)
    with_overlap = sum(c.start_offset < p.end_offset for p, c in itertools.pairwise(chunks))
    assert with_overlap > 0.9 * (len(chunks) - 1)


@pytest.mark.parametrize("text", ["tiny", prose(200, seed=14), minified_js(50_000)])
def test_tokenizer_is_called_once(text: str) -> None:
    tokenizer = RegexSpans()
    chunk_text(text, tokenizer)
    assert tokenizer.calls == 1


def test_400_kb_chunks_quickly(real: OnnxEmbedder) -> None:
    text = prose(1000, seed=15)
    text = (text * (400_000 // len(text) + 1))[:400_000]
    started = time.perf_counter()
    chunks = chunk_text(text, real)
    assert time.perf_counter() - started < 5
    assert chunks[-1].end_offset == len(text.rstrip())


@pytest.mark.parametrize(
    ("target", "overlap", "limit"),
    [(0, 0, 254), (300, 35, 254), (200, -1, 254), (200, 200, 254), (10, 20, 254)],
)
def test_invalid_settings_are_refused(target: int, overlap: int, limit: int) -> None:
    with pytest.raises(ConfigError):
        ChunkSettings(target_tokens=target, overlap_tokens=overlap, hard_token_limit=limit)


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("héllo wörld", ["héllo", "wörld"]),
        ("a 😀😀 b", ["a", "😀😀", "b"]),
        ("𝒳 中文", ["𝒳", "中", "文"]),
        ("Tokenization", ["Token", "##ization"]),
    ],
)
def test_word_piece_spans_are_character_offsets(
    text: str, pieces: list[str], real: OnnxEmbedder
) -> None:
    assert [text[start:end] for start, end in real.token_spans(text)] == [
        piece.removeprefix("##") for piece in pieces
    ]


def test_word_piece_spans_ignore_embedded_truncation(real: OnnxEmbedder) -> None:
    assert Tokenizer.from_file(str(TOKENIZER_JSON)).truncation is not None
    assert len(real.token_spans("word " * 500)) == 500
