"""The BM25 arm's terms and queries."""

from __future__ import annotations

import pytest

from semsearch.lexical import (
    chunk_terms,
    definitions,
    identifier_terms,
    lexical_query,
    path_terms,
    split_identifier,
)


@pytest.mark.parametrize(
    ("word", "parts"),
    [
        ("parseHeaderLine", ["parse", "header", "line"]),
        ("HTTPServerError", ["http", "server", "error"]),
        ("snake_case_name", ["snake", "case", "name"]),
        ("ERR_ZORBLATT_7741", ["err", "zorblatt", "7741"]),
        ("utf8Decode", ["utf", "8", "decode"]),
        ("plain", ["plain"]),
    ],
)
def test_split_identifier(word: str, parts: list[str]) -> None:
    assert split_identifier(word) == parts


def test_path_terms_are_stem_and_last_three_folders() -> None:
    assert path_terms("a/b/web_app/client/ClientSession.py") == [
        "clientsession",
        "client",
        "session",
        "b",
        "web_app",
        "web",
        "app",
        "client",
    ]


def test_identifier_terms_split_camel_case_once_each() -> None:
    assert identifier_terms("parseHeaderLine(x); parseHeaderLine(y); snake_case; ok") == [
        "parse",
        "header",
        "line",
    ]


def test_chunk_terms_join_path_and_identifiers() -> None:
    assert chunk_terms("src/retryPolicy.ts", "const maxRetries = 3") == (
        "retrypolicy retry policy src max retries"
    )


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("retry logic", '"retry" OR "logic"'),
        ("how does the retry logic work", '"retry" OR "logic" OR "work"'),
        ("the and of", '"the" OR "and" OR "of"'),
        ("foo AND (bar", '"foo" OR "(bar"'),
        ('say "hi"', '"say" OR """hi"""'),
        ("ERR_ZORBLATT_7741", '"ERR_ZORBLATT_7741"'),
        ("parseHeaderLine", '"parseHeaderLine" OR "parse header line"'),
        ("os.path.join", '"os.path.join"'),
        ("* - ( )", ""),
        ("dup dup", '"dup"'),
    ],
)
def test_fts_query_quotes_every_word(query: str, expected: str) -> None:
    found = lexical_query(query)
    assert (found.fts5() if found is not None else "") == expected


@pytest.mark.parametrize(
    ("line", "names"),
    [
        ("class BaseModel(metaclass=Meta):", ["BaseModel"]),
        ("    async def fetch_all(self):", ["fetch_all"]),
        ("export default async function handler(req) {", ["handler"]),
        ("func (r *Router) ServeHTTP(w http.ResponseWriter) {", ["ServeHTTP"]),
        ("pub(crate) fn parse_header(x: &str) -> u8 {", ["parse_header"]),
        ("pub const Allocator = struct {", ["Allocator"]),
        ("template <typename T> class basic_json", ["basic_json"]),
        ("MAX_RETRIES: int = 3", ["MAX_RETRIES"]),
        ("bats_test_begin() {", ["bats_test_begin"]),
        ("    local_alias = make_thing()", []),
        ("if retries == 3:", []),
        ("result = compute(x)  # a call", ["result"]),
    ],
)
def test_definitions(line: str, names: list[str]) -> None:
    assert definitions(line) == names
