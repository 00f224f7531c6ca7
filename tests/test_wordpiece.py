"""semsearch.model.wordpiece against the ``tokenizers`` library it replaces: same ids, same offsets.

Every comparison runs both libraries on the same ``tokenizer.json`` (truncation and padding off)
and compares whole results, for real text (this repository and Python's standard library), a
hand list of edge cases, every code point, and a seeded fuzz.
"""

from __future__ import annotations

import copy
import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from semsearch.model.builds import packaged_tokenizer
from semsearch.model.wordpiece import Encoding, WordPiece
from tests.conftest import library_tokenizer

TOKENIZER_JSON = packaged_tokenizer()
REPO = Path(__file__).resolve().parent.parent
STDLIB = Path(os.__file__).parent
SUFFIXES = {".py", ".md", ".txt", ".rst", ".c", ".h", ".js", ".rs", ".toml", ".json", ".xml"}
CHUNK = 2000

EDGE_CASES = [
    "",
    " ",
    " \t\n\r ",
    "Hello, World!",
    "def foo(self, x: int) -> int:\n\treturn x ** 2  # squared\r\n",
    "3.14e-10 1,000,000 0x1F 1e+5 -42 v1.2.3",
    "https://example.com/path?q=a&b=c#frag user@example.org",
    "snake_case camelCase PascalCase kebab-case SCREAMING_CASE",
    "[CLS] [SEP] [MASK] [PAD] [UNK]",
    "x[UNK]y",
    "a[CLS]b[SEP]c[MASK]d",
    "[CLS][SEP][CLS]",
    "[cls] [Sep] [ MASK] [MASK [MASK]]",
    "tab\there nul\x00here del\x7fhere bell\x07 esc\x1b[0m",
    "vt\x0bff\x0cfs\x1cgs\x1drs\x1eus\x1f",
    "nbsp\u00a0nel\x85ls\u2028ps\u2029ideographic\u3000space",
    "zero\u200bwidth\u200cjoiner\u200dmark\u200eend\ufeffbom",
    "soft\u00adhyphen replacement\ufffdchar private\ue000use",
    "中文字符 和 日本語のテキスト 한국어 텍스트",
    "CJK\u4e00inside\u9fffwords\U00020000and\U0002b820gap\U0002b920",
    "\uf900\ufa10 compatibility ideographs",
    "مرحبا بالعالم",
    "שָׁלוֹם עוֹלָם",
    "नमस्ते दुनिया",
    "Ελληνικά: άέήίόύώ ΐΰ Σίσυφος ΣΑΣ",
    "Straße STRASSE ẞ",
    "İstanbul ıi İİİ",
    "Ǆemal ǅ ǆ ﬁ ﬂ Å K Ω",
    "café cafe\u0301 naïve résumé",
    "\u0301\u0302\u0303",
    "a\u0301\u0316\u0328 e\u0308\u0304",
    "a\U0001d165\u0321 b a\u302e\u0321\u0321 x\U0001e000\u0316y \U0001d15e\u0321",
    "\u00c3\u1b44% \u01d6\u0316 a\u0344\u302e\u0316b",  # NFD reorders a mark that stays
    "😀 👍🏽 👨‍👩‍👧‍👦 ❤️ 🇫🇷 🏳️‍🌈",
    "emoji🙂inside😀words",
    "x" * 150,
    "é" * 101,
    "a" * 100 + " " + "b" * 101,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "qqqqzzzzxxxx ʘʘʘ ⅧⅨ ①②③",
    "\U0010fffd\U000e0001\U000e0020 tags",
    "\ua7cb\u1c89 newer case pairs",
    "«quotes» “curly” ‘single’ — dash … ellipsis ¿qué? ¡sí!",
    "\u2e43\u2e52 newer punctuation",
    "lone\u0378unassigned\U0001fae0newer emoji",
]


def _text_files(root: Path) -> list[Path]:
    """The text files under ``root``, sorted, skipping site-packages (not the standard library)."""
    paths: list[Path] = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = sorted(name for name in subfolders if name != "site-packages")
        paths += [Path(folder, name) for name in sorted(names) if Path(name).suffix in SUFFIXES]
    return paths


def _chunks(path: Path, size: int = CHUNK) -> list[str]:
    text = path.read_bytes().decode("utf-8", errors="replace")
    return [text[i : i + size] for i in range(0, len(text), size)]


def _corpus() -> list[str]:
    """Chunks of real text: this repository's text files (up to 10 chunks each) and every text
    file of Python's standard library: its first chunk with non-ASCII text, else its first 600
    characters (the ASCII-only files are the many; they are kept short to keep the test fast)."""
    chunks: list[str] = []
    for path in [
        *_text_files(REPO / "semsearch"),
        *_text_files(REPO / "tests"),
        REPO / "README.md",
    ]:
        chunks += _chunks(path)[:10]
    for path in _text_files(STDLIB):
        parts = _chunks(path)
        chunks += [next((c for c in parts if not c.isascii()), parts[0][:600])] if parts else []
    return chunks


def _fuzz(seed: int, count: int, vocab: list[str]) -> list[str]:
    """Random strings mixing ASCII, Latin-1, CJK, combining marks, controls, emoji, ..."""
    rng = random.Random(seed)

    def one_of(*bases: int, spread: int = 1) -> Callable[[], str]:
        return lambda: chr(rng.choice(bases) + rng.randrange(spread))

    def choice(*items: str) -> Callable[[], str]:
        return lambda: rng.choice(items)

    pools = [  # (weight, draw one item)
        (30, choice(*"abcdefghijklmnopqrstuvwxyzABCXYZ0123456789_")),
        (12, choice(*" \t\n\r  ")),
        (8, choice(*"!\"#$%&'()*+,-./:;<=>?@[\\]^`{|}~")),
        (4, one_of(0xA0, spread=96)),  # Latin-1
        (3, one_of(0x4E00, 0x3400, 0xF900, 0x20000, 0x2B820, 0x2B920, spread=300)),  # CJK
        (4, one_of(0x300, 0x483, 0x591, 0x1DC0, 0x20D0, 0xFE20, spread=16)),  # combining
        (1, one_of(0x302E, 0x302F, 0x1D165, 0x1D16D, 0x1E000, 0x1E944, 0x8D4, 0x1B44)),
        (2, one_of(0, 0x7F, 0x80, 0x200B, 0xFEFF, 0xFFFD, 0xAD, 0xE000, spread=5)),  # controls
        (2, one_of(0xB, 0xC, 0x1C, 0x85, 0xA0, 0x2028, 0x3000, 0x1680)),  # whitespace
        (2, choice("😀", "👍", "🏽", "\u200d", "❤", "\ufe0f", "👨", "🇫", "🇷", "🫠")),
        (4, one_of(0x391, 0x410, 0x5D0, 0x627, 0x905, 0xAC00, 0x1100, 0xE01, spread=40)),
        (2, choice("İ", "ß", "ẞ", "Σ", "ς", "ǅ", "ﬁ", "K", "Å", "\U0001d15e", "\ua7cb")),
        (1, choice("[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]", "[cls]", "[CLS")),
        (12, lambda: rng.choice(vocab).removeprefix("##")),
        (3, lambda: chr(rng.choice([rng.randrange(0xD800), rng.randrange(0xE000, 0x110000)]))),
    ]
    weights = [weight for weight, _ in pools]
    draws = [draw for _, draw in pools]
    texts = []
    for _ in range(count):
        picks = rng.choices(draws, weights, k=rng.randint(0, 60))
        texts.append("".join(pick() for pick in picks))
    return texts


def _every_code_point() -> list[str]:
    """Every code point of planes 0, 1 and 14 (but surrogates) as "a?a ", and a sample of the
    others: CJK extensions, unassigned and private-use planes (each a single class here)."""
    points = [*range(0xD800), *range(0xE000, 0x20000), *range(0xE0000, 0xE1000)]
    points += [*range(0x20000, 0xE0000, 31), *range(0xE1000, 0x110000, 31)]
    return [
        "".join(f"a{chr(cp)}a " for cp in points[i : i + 500]) for i in range(0, len(points), 500)
    ]


@pytest.fixture(scope="module")
def reference() -> Tokenizer:
    return library_tokenizer(TOKENIZER_JSON)


@pytest.fixture(scope="module")
def ours() -> WordPiece:
    return WordPiece.from_file(TOKENIZER_JSON)


@pytest.fixture(scope="module")
def vocab() -> list[str]:
    return sorted(json.loads(TOKENIZER_JSON.read_text(encoding="utf-8"))["model"]["vocab"])


def _assert_same(reference: Tokenizer, ours: WordPiece, texts: list[str], special: bool) -> None:
    """Both tokenizers give the same ids and offsets for every text (batch and one by one)."""
    expected = reference.encode_batch(texts, add_special_tokens=special)
    got = ours.encode_batch(texts, add_special_tokens=special)
    assert len(got) == len(texts)
    for text, want, have in zip(texts, expected, got, strict=True):
        assert (have.ids, have.offsets) == (want.ids, want.offsets), repr(text)
    for text, have in list(zip(texts, got, strict=True))[:50]:
        assert ours.encode(text, add_special_tokens=special) == have


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return _corpus()


@pytest.mark.parametrize("special", [False, True])
def test_matches_on_real_text(
    reference: Tokenizer, ours: WordPiece, corpus: list[str], special: bool
) -> None:
    assert len(corpus) > 500 and any(not chunk.isascii() for chunk in corpus)
    _assert_same(reference, ours, corpus, special)


@pytest.mark.parametrize("special", [False, True])
@pytest.mark.parametrize("text", EDGE_CASES)
def test_matches_on_edge_case(
    reference: Tokenizer, ours: WordPiece, text: str, special: bool
) -> None:
    want = reference.encode(text, add_special_tokens=special)
    assert ours.encode(text, add_special_tokens=special) == Encoding(want.ids, want.offsets)


@pytest.mark.parametrize("special", [False, True])
def test_matches_on_fuzz(
    reference: Tokenizer, ours: WordPiece, vocab: list[str], special: bool
) -> None:
    _assert_same(reference, ours, _fuzz(0, 3000, vocab), special)


def test_matches_on_every_code_point(reference: Tokenizer, ours: WordPiece) -> None:
    _assert_same(reference, ours, _every_code_point(), special=False)


def test_matches_on_long_text(reference: Tokenizer, ours: WordPiece) -> None:
    text = (REPO / "semsearch" / "model" / "wordpiece.py").read_text(encoding="utf-8") * 5
    _assert_same(reference, ours, [text, "ab " * 30_000, "é" * 30_000, "中" * 20_000], True)


def test_special_tokens_wrap_the_text(ours: WordPiece) -> None:
    plain = ours.encode("hello world", add_special_tokens=False)
    wrapped = ours.encode("hello world")
    assert wrapped.ids == [101, *plain.ids, 102]
    assert wrapped.offsets == [(0, 0), *plain.offsets, (0, 0)]


def test_lone_surrogate_is_refused(reference: Tokenizer, ours: WordPiece) -> None:
    """The library raises TypeError ("TextInputSequence must be str"); we raise ValueError."""
    with pytest.raises(TypeError):
        reference.encode("a\ud800b")
    with pytest.raises(ValueError, match="surrogate"):
        ours.encode("a\ud800b")


def _config() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TOKENIZER_JSON.read_text(encoding="utf-8"))
    return data


def _changed(changes: list[tuple[str, Any]]) -> dict[str, Any]:
    """The packaged config with the item at each dotted path set to its value ("-": append)."""
    data = _config()
    for path, value in changes:
        *parents, last = [int(key) if key.isdigit() else key for key in path.split(".")]
        node: Any = data
        for key in parents:
            node = node[key]
        if last == "-":
            node.append(copy.deepcopy(value))
        else:
            node[last] = copy.deepcopy(value)
    return data


def _added(number: int, content: str) -> dict[str, Any]:
    flags = dict.fromkeys(["single_word", "lstrip", "rstrip", "normalized"], False)
    return {"id": 30522 + number, "content": content, "special": number != 1, **flags}


# Tokens that make the library's own case mapping, NFD and reordering show in the ids: the
# lowercase of U+A7CB, U+A7DC and U+1C89 (new in Unicode 16), U+11938 and its decomposition
# (which the library does not know), marks that NFD reorders but strip_accents keeps.
NEWER_TOKENS = ["\u0264", "\u019b", "\u1c8a", "\U00011938", "\U00011935", "##\U00011930",
                "##\u1b44", "##\U0001d165", "##\u302e", "a\u302e", "##a", "##\u0264"]  # fmt: skip
NEWER_TEXT = "\ua7cb \ua7dc\ua7cb \u1c89 \U00011938 \u00c3\u1b44 a\U0001d165\u0321 a\u302e\u0316a"
BERT_PROCESSING = {"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]}
VARIANTS: dict[str, list[tuple[str, Any]]] = {
    "cased": [("normalizer.lowercase", False)],
    "no-strip": [("normalizer.strip_accents", False)],
    "strip-cased": [("normalizer.lowercase", False), ("normalizer.strip_accents", True)],
    "no-chinese": [("normalizer.handle_chinese_chars", False)],
    "short-words": [("model.max_input_chars_per_word", 5)],
    "bert-processing": [("post_processor", BERT_PROCESSING)],
    "no-post-processor": [("post_processor", None)],
    "newer-letters-in-vocab": [(f"model.vocab.{token}", 30522 + n) for n, token in
                               enumerate(NEWER_TOKENS)],
    "more-added-tokens": [("added_tokens.-", _added(n, c)) for n, c in
                          enumerate(["[CLS]]", "Xyz", "é!"])],
}  # fmt: skip


@pytest.mark.parametrize("variant", VARIANTS)
def test_matches_on_other_settings(tmp_path: Path, vocab: list[str], variant: str) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(_changed(VARIANTS[variant])), encoding="utf-8")
    reference = library_tokenizer(path)
    ours = WordPiece.from_file(path)
    texts = [*EDGE_CASES, "aXyzb [CLS]]] é!é! xyz", NEWER_TEXT, *_fuzz(1, 300, vocab)]
    for special in (False, True):
        _assert_same(reference, ours, texts, special)


FAKE_BPE: dict[str, Any] = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True},
    "post_processor": None,
    "decoder": None,
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
}

CLS_ONLY = [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}]
REFUSED = [  # (path, value, what the message names)
    ("pre_tokenizer", {"type": "Metaspace", "replacement": "▁"}, "pre_tokenizer"),
    ("model", {"type": "Unigram", "vocab": [["a", 0.0]], "unk_id": 0}, "model"),
    ("normalizer", None, "normalizer"),
    ("normalizer", {"type": "Lowercase"}, "normalizer"),
    ("normalizer.clean_text", False, "clean_text"),
    ("post_processor", {"type": "RobertaProcessing"}, "post_processor"),
    ("model.unk_token", "<unk>", "unknown token"),
    ("added_tokens.0.normalized", True, "normalized"),
    ("post_processor.single", CLS_ONLY, "sequence A"),
    ("post_processor.special_tokens.[CLS].tokens", ["<s>"], "[CLS]"),
    ("model.vocab", {}, "vocab"),
    ("model.max_input_chars_per_word", "100", "max_input_chars_per_word"),
    ("post_processor", {**BERT_PROCESSING, "cls": ["<s>", 0]}, "BertProcessing"),
    ("post_processor", {**BERT_PROCESSING, "cls": None}, "malformed"),
    ("post_processor.single", [42], "malformed"),
    ("post_processor.special_tokens", [], "malformed"),
    ("model.vocab.[UNK]", "100", "vocab"),
]


@pytest.mark.parametrize(("path", "value", "message"), REFUSED)
def test_refuses_other_kinds_of_tokenizer(
    tmp_path: Path, path: str, value: Any, message: str
) -> None:
    file = tmp_path / "tokenizer.json"
    file.write_text(json.dumps(_changed([(path, value)])), encoding="utf-8")
    with pytest.raises(ValueError, match="Unsupported tokenizer") as error:
        WordPiece.from_file(file)
    assert message in str(error.value) and str(file) in str(error.value)


def test_refuses_a_bpe_tokenizer(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(FAKE_BPE), encoding="utf-8")
    Tokenizer.from_file(str(path))  # a valid file, just not a BERT one
    with pytest.raises(ValueError, match="normalizer is None, not 'BertNormalizer'"):
        WordPiece.from_file(path)


@pytest.mark.parametrize(
    "content",
    [b"{not json", TOKENIZER_JSON.read_bytes()[:5000], b"\xff\xfe\x00binary", b"[]", b"", b"null"],
)
def test_refuses_a_malformed_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"not a valid tokenizer\.json|Unsupported tokenizer"):
        WordPiece.from_file(path)
