"""The BM25 arm's terms and queries."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from semsearch.text import lexical
from semsearch.text.lexical import (
    chunk_defines,
    chunk_terms,
    definitions,
    identifier_terms,
    lexical_query,
    name_text,
    path_terms,
    query_words,
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


def test_identifier_terms_of_a_later_text_keep_words_met_before() -> None:
    """Parts are kept per identifier across texts: a later chunk with the same names gets them
    all again, and an identifier with ``_`` or of one part still adds nothing."""
    first = identifier_terms("getValue(); HTTPServer")
    assert identifier_terms("x = getValue() + plain_name + HTTPServer") == first
    assert first == ["get", "value", "http", "server"]
    assert identifier_terms("plain_name getvalue") == []


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
        ('say "hi', '"say" OR """hi"'),
        ('"retry budget"', '"retry budget"'),
        ('the "retry  budget" of a pool', '"retry budget" OR "pool"'),
        ('"the end" of', '"the end"'),
        ('""', ""),
        # a name typed alone: also its parts anywhere in the row, in any order
        ("ERR_ZORBLATT_7741", '"ERR_ZORBLATT_7741"'),
        ("retry_with_backoff", '"retry_with_backoff"'),
        ("std::HashMap", '"std::HashMap" OR "std hash map" OR ("std" AND "hash" AND "map")'),
        (
            "parseHeaderLine",
            '"parseHeaderLine" OR "parse header line" OR ("parse" AND "header" AND "line")',
        ),
        ("os.path.join", '"os.path.join" OR ("os" AND "path" AND "join")'),
        ("the parseHeader", '"parseHeader" OR "parse header" OR ("parse" AND "header")'),
        ("parseHeader line", '"parseHeader" OR "parse header" OR "line"'),
        ('"parseHeader" line', '"parseHeader" OR "line"'),
        ("ParseParse", '"ParseParse" OR "parse parse"'),
        ("* - ( )", ""),
        ("dup dup", '"dup"'),
        ("NEAR(\x00", '"NEAR( "'),  # found by fuzzing: FTS5 read the NUL as the string's end
    ],
)
def test_fts_query_quotes_every_word(query: str, expected: str) -> None:
    found = lexical_query(query)
    assert (found.fts5() if found is not None else "") == expected


@pytest.mark.parametrize(
    ("line", "names"),
    [
        # Python, JavaScript, Go, Rust, Zig, C++, Bash, and what is not a definition
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
        ("  alias Ecto.Query.{Builder, Planner}", []),  # Elixir: an import
        ("export declare function fetchUser(id: string): User;", ["fetchUser"]),
        ("#  define CURL_MAX_WRITE_SIZE 16384", ["CURL_MAX_WRITE_SIZE"]),
        ("if retries == 3:", []),
        ("result = compute(x)  # a call", ["result"]),
        # Kotlin
        ("data class User(val name: String)", ["User"]),
        ("enum class Color { RED }", ["Color"]),
        ("suspend fun <T> Flow<T>.first(): T {", ["first"]),
        ("    fun launch(block: () -> Unit): Job", ["launch"]),
        ("object Dispatchers {", ["Dispatchers"]),
        # Scala
        ("sealed trait Json", ["Json"]),
        ("final case class Foo(a: Int)", ["Foo"]),
        ("implicit def catsStdInstances: Monad[List] = x", ["catsStdInstances"]),
        ("  def map[A, B](fa: F[A])(f: A => B): F[B]", ["map"]),
        # Swift
        ("public protocol RequestInterceptor {", ["RequestInterceptor"]),
        ("extension Session {", []),  # extends a type defined elsewhere
        ("@discardableResult public func request(_ url: URL) -> DataRequest {", ["request"]),
        ("open class Session {", ["Session"]),
        # Elixir
        ("defmodule Plug.SSL do", ["SSL"]),
        ("  defp rewrite(conn, opts) do", ["rewrite"]),
        ("  defmacro __using__(opts) do", ["__using__"]),
        # Haskell
        ("data Value = Object Object | Array Array", ["Value"]),
        ("newtype Parser a = Parser { runParser :: Int }", ["Parser"]),
        ("encode :: ToJSON a => a -> ByteString", ["encode"]),
        ("instance FromJSON Value where", []),  # an instance of a class defined elsewhere
        # Lua
        ("function M.load(plugins, opts)", ["load"]),
        ("local function get_opts(opts)", ["get_opts"]),
        ("function Picker:find()", ["find"]),
        ("M.setup = function(config)", ["setup"]),
        # PHP, Java, C#
        ("    public function handle(Request $request): Response", ["handle"]),
        ("public static String join(final Object[] array, final char sep) {", ["join"]),
        ("    private final Map<String, List<Integer>> cache(int size) {", ["cache"]),
        ("    void run() throws IOException {", ["run"]),
        ("    public T Deserialize<T>(ref MessagePackReader reader)", ["Deserialize"]),
        ("public interface IMessagePackFormatter<T>", ["IMessagePackFormatter"]),
        # C and C++: a return type on the line, on the line above, and a prototype
        ("absl::Status Cord::Append(absl::string_view src) {", ["Append"]),
        ("static CURLcode http_perhapsrewind(struct Curl_easy *data,", ["http_perhapsrewind"]),
        ("Curl_http(struct Curl_easy *data, bool *done)", ["Curl_http"]),
        ("int curl_easy_setopt(CURL *curl, CURLoption tag, ...);", ["curl_easy_setopt"]),
        # Rust
        ("impl<T> Semaphore<T> {", ["Semaphore"]),
        ("macro_rules! try_join {", ["try_join"]),
        ("pub(crate) static GLOBAL_QUEUE: Inject = Inject::new();", ["GLOBAL_QUEUE"]),
        ("static mut COUNTER: usize = 0;", ["COUNTER"]),
        # TypeScript: a generator, a static field
        ("export function* walkTree(node: Node) {", ["walkTree"]),
        ("  static defaultOptions: Options = {}", ["defaultOptions"]),
        # C: an export macro or a tag before the return type, typedefs
        ("CURL_EXTERN CURL *curl_easy_init(void)", ["curl_easy_init"]),
        ("struct Curl_easy *Curl_open(void)", ["Curl_open"]),
        ("static unsigned int hash_key(const char *key)", ["hash_key"]),
        ("typedef struct Curl_easy Curl_easy;", ["Curl_easy"]),
        ("typedef CURLcode (*Curl_cft_connect)(struct Curl_cfilter *cf,", ["Curl_cft_connect"]),
        ("typedef unsigned int curl_off_t;", ["curl_off_t"]),
        ("typedef struct Curl_share {", ["Curl_share"]),
        ("} CURLcode;", ["CURLcode"]),
        # Scala's qualified access, Kotlin's functional interface, Java's annotation type
        ("private[circe] final class ObjectCursor(obj: JsonObject)", ["ObjectCursor"]),
        ("public fun interface FlowCollector<in T> {", ["FlowCollector"]),
        ("public @interface JsonProperty {", ["JsonProperty"]),
        # a namespace is opened in every file that adds to it: it is defined in none of them
        ("namespace Newtonsoft.Json", []),
        ("namespace Dapper;", []),
        ("namespace absl {", []),
        ("namespace App\\Http;", []),
        # Haskell: a class with a context
        ("class (Monad m) => MonadIO m where", ["MonadIO"]),
        # Lua: a module table, and an import without parentheses
        ("local Semver = {}", ["Semver"]),
        ('local resolve = require "telescope.config.resolve"', []),
        # JavaScript and TypeScript: an untyped method in a class body or an object literal
        ("  handleClick(event) {", ["handleClick"]),
        ("  static from(thing, options = {}) {", ["from"]),
        ("  async *entries() {", ["entries"]),
        ("  set size(value) {", ["size"]),
        ("  #flush(): void {", ["flush"]),
        ("  toJSON(asStrings) {", ["toJSON"]),
        # ... and the statements and calls of that shape, in JavaScript and beside it
        ("  if (done) {", []),
        ("    for (const key of keys) {", []),
        ("  } catch (err) {", []),
        ("  foo(function () {", []),
        ("  it('works', async () => {", []),
        ("  describe(`suite`, () => {", []),
        ("    when (state) {", []),  # Kotlin
        ("    require(n > 0) {", []),
        ("    lock (sync) {", []),  # C#
        (" *     install(Auth) {", []),  # a line of a doc comment
        ("  init(request: Request) {", []),  # Swift: a constructor names nothing
        # calls, statements and prose are not definitions
        ("setup(name='x')", []),
        ("main()", []),
        ("    return foo(bar)", []),
        ("    new Foo(bar)", []),
        ("    } else if (x) {", []),
        ("    puts foo(bar)", []),
        ("    String s = foo(bar);", []),
        ("            try expectEqual(1.0, r.ipart);", []),
        ("    foo(new Bar());", []),
        ("Call parse_header(x) to read one line", []),
        ("Use parse_header(x).", []),
    ],
)
def test_definitions_in_each_language(line: str, names: list[str]) -> None:
    assert definitions(line) == names


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("how are failed payments retried", ["payments", "retried", "failed"]),
        (
            "retry_payment in parseHeaderLine",
            ["parseheaderline", "retry_payment", "payment", "header", "parse", "retry", "line"],
        ),
        ("a I ? the", []),
    ],
)
def test_query_words_are_the_words_to_point_out(query: str, words: list[str]) -> None:
    assert query_words(query) == words


CODE_PIECES = (
    *("def ", "class ", "fn ", "struct ", "typedef ", "#define ", "export const ", "int "),
    *("parseHeader", "HTTPServer", "x_y", "Foo::Bar", "<T>", "$v", "é", "\ud800"),
    *("(", ")", " {", "}", " = ", ";", ":", "*", "\n", "\t", "    "),
)


@given(
    pieces=st.lists(st.sampled_from(CODE_PIECES), max_size=40),
    rel=st.sampled_from(["", "a", "_", "src/HttpClient.py", "x/y/z/w/parseURL.ts", "n\udcffé.c"]),
)
def test_the_columns_from_the_memo_are_the_rules_applied_afresh(
    pieces: list[str], rel: str
) -> None:
    """``chunk_terms`` and ``chunk_defines`` (asked once, then from the memo) are the path's
    words then the identifiers' parts, and the defined names, as derived from scratch."""
    text = "".join(pieces)
    terms = " ".join([*path_terms(name_text(rel)), *identifier_terms(text)])
    for _ in range(2):
        assert chunk_terms(rel, text) == terms
        assert chunk_defines(text) == " ".join(definitions(text))


def test_the_memo_of_derived_columns_keeps_the_texts_seen_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    derived: list[str] = []

    def counted(text: str) -> list[str]:
        derived.append(text)
        return definitions(text)

    monkeypatch.setattr(lexical, "definitions", counted)
    memo = lexical.TextColumns(3)
    texts = [f"def name{n}(self):\n    return fetchValue{n}()\n" for n in range(10)]
    for text in texts:
        memo(text)
    memo(texts[7])  # seen again: kept over 8 and 9 when a new text comes
    memo("def other(): pass\n")
    assert len(memo) == 3 and len(derived) == 11
    derived.clear()
    memo(texts[7]), memo(texts[9])
    assert derived == []
    for text in texts:
        assert memo(text) == (" ".join(definitions(text)), " ".join(identifier_terms(text)))
    assert len(memo) == 3 and len(derived) == 10
