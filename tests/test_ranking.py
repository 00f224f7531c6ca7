"""The ranking priors on small fixtures: file-name matches, re-exports, the score ceiling."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from semsearch.config import Settings
from semsearch.index import Index
from semsearch.search import ranking
from semsearch.search.ranking import (
    STEM_NOTE,
    best_prior,
    chunk_priors,
    coherence_weight,
    embedding_text,
    file_coherence,
    file_name_words,
    names_file,
    query_info,
    stem_words,
)
from tests.conftest import write_tree


@pytest.mark.parametrize(
    ("words", "same"),
    [
        (["deserialization", "deserializer", "deserializing"], True),
        (["Headers", "header"], True),
        (["routes", "routing", "route"], True),
        (["process", "processes"], True),
        (["class", "classes"], True),
        (["parse", "parser", "parsing"], True),
        (["serialized", "serializer", "serialization", "serializes", "serialize"], True),
        (["formatter", "formatters", "formatting", "formatted", "format"], True),
        (["validate", "validator", "validation", "validated"], True),
        (["mapper", "mapping", "maps", "map"], True),
        (["keys", "key"], True),
        (["dependencies", "dependency"], True),
        (["queries", "query"], True),
        (["install", "installs", "installed"], True),  # ll stays doubled
        (["bus", "bu"], False),  # a stem keeps three letters
        (["valid", "value"], False),
    ],
)
def test_stem_words_meet_derived_forms(words: list[str], same: bool) -> None:
    assert (len(set(stem_words(words))) == 1) is same


@pytest.mark.parametrize(
    ("query", "embedded"),
    [
        ("how does the router resolve a route", "router resolve route"),
        ("Where is the cache invalidated?", "cache invalidated?"),
        ("how vitest discovers and runs test files", "vitest discovers and runs test files"),
        ("what is the conversion of a value to JSON", "conversion value JSON"),
        ("conversion of a value to JSON", "conversion of a value to JSON"),  # not a question
        ("is the is_active A.b do_work", "is_active A.b do_work"),  # identifiers stay whole
        ("retry_with_backoff", "retry_with_backoff"),
        ("what is the", "what is the"),  # nothing but framing: the query as typed
    ],
)
def test_the_model_embeds_the_query_without_its_framing_words(query: str, embedded: str) -> None:
    assert embedding_text(query) == embedded


@pytest.mark.parametrize(
    ("rel", "words"),
    [
        ("src/RetryMiddleware.php", {"retry", "middleware"}),
        ("lang3/BooleanUtils.java", {"boolean"}),  # a generic part names no topic
        ("src/router/index.ts", {"router"}),  # a generic stem: its folder names the file
        ("tokio/src/sync/mod.rs", {"sync"}),
        (
            "Formatters/IMessagePackFormatter`1.cs",
            {"i", "message", "pack", "formatter"},
        ),
        ("index.js", set()),
    ],
)
def test_file_name_words(rel: str, words: set[str]) -> None:
    assert file_name_words(rel) == {ranking.stem_words([w])[0] for w in words}


def test_file_name_words_follow_the_name_not_an_earlier_path_of_it() -> None:
    # The words are kept per name: one name in many folders is stemmed once, and a generic stem
    # is the folder's name, so `index.ts` of two folders is two names.
    assert file_name_words("c00/app/router/index.ts") == set(stem_words(["router"]))
    assert file_name_words("c01/app/session/index.ts") == set(stem_words(["session"]))
    assert file_name_words("c00/lib/Session.py") == file_name_words("c09/x/y/Session.py")
    assert ranking.file_name("c00/lib/Session.py") == "Session"
    assert ranking.file_name("a/session/index.ts") == "session"
    assert ranking.file_name("index.ts") == ""


@pytest.mark.parametrize(
    ("query", "rel", "named"),
    [
        ("retry middleware and backoff logic", "src/RetryMiddleware.php", True),
        ("retry logic", "src/RetryMiddleware.php", False),  # every word of the name is needed
        ("streaming response implementation", "starlette/responses.py", True),
        ("Headers and individual Header types", "org/http4s/Headers.scala", True),
        ("bean deserialization from JSON properties", "deser/BeanDeserializer.java", True),
        ("boolean conversion and parsing helpers", "lang3/BooleanUtils.java", True),
        ("how the router is built", "src/router/index.ts", True),
        ("how the router is built", "src/index.ts", False),
        ("SqlMapper", "Dapper/SqlMapper.cs", True),
        ("parsing a JSON object field", "Aeson/Types/ToJSON.hs", False),  # "to" is in the name
        ("SqlMapper", "Dapper/SqlMapper.Async.cs", False),  # a part of the class, not its home
    ],
)
def test_names_file(query: str, rel: str, named: bool) -> None:
    assert names_file(rel, query_info(query)) is named


def test_file_name_prior_is_named_and_graded_by_name_length() -> None:
    info = query_info("retry middleware and the session")
    two_words = dict(chunk_priors("src/RetryMiddleware.php", "x = 1\n", info))
    one_word = dict(chunk_priors("src/session.py", "x = 1\n", info))
    assert two_words[STEM_NOTE] == pytest.approx(ranking.STEM_BOOST)
    assert 1.0 < one_word[STEM_NOTE] <= two_words[STEM_NOTE]
    assert STEM_NOTE not in dict(chunk_priors("src/cache.py", "x = 1\n", info))


@pytest.mark.parametrize(
    ("rel", "words"),
    [
        ("tokio/src/runtime/builder.rs", {"tokio", "runtime"}),  # src is generic
        ("a/b/c/d/handlers/errors.py", {"handlers"}),  # the last three; one letter is no word
        ("lib/middleware/errors.py", {"middleware"}),
        ("Sources/Vapor/Utilities/Storage.swift", {"vapor", "utilities"}),
        ("src/main/java/Foo.java", set()),
        ("setup.py", set()),
    ],
)
def test_folder_words(rel: str, words: set[str]) -> None:
    assert ranking.folder_words(rel) == {ranking.stem_words([w])[0] for w in words}


def test_folder_prior_is_named_and_needs_a_folder_word_in_the_query() -> None:
    info = query_info("how the runtime builder configures thread pools")
    priors = dict(chunk_priors("tokio/src/runtime/pool.rs", "x = 1\n", info))
    assert priors[ranking.FOLDER_NOTE] == pytest.approx(ranking.FOLDER_BOOST) and priors
    assert ranking.FOLDER_NOTE not in dict(chunk_priors("tokio/src/net/tcp.rs", "x = 1\n", info))
    assert ranking.FOLDER_NOTE not in dict(
        chunk_priors("src/lib/x.rs", "x = 1\n", query_info("src lib"))
    )
    assert best_prior({ranking.FOLDER_NOTE: ranking.FOLDER_BOOST}) == ranking.FOLDER_BOOST


@pytest.mark.parametrize(
    ("rel", "query", "lowered"),
    [
        ("packages/vitest/src/node/types/config.ts", "how tests are run", True),
        ("src/typings/index.d.ts", "how tests are run", True),
        ("lib/api.d.ts", "how tests are run", True),
        ("packages/vitest/src/node/types/config.ts", "config types", False),  # asked for
        ("src/node/interface/config.ts", "how tests are run", False),
        ("src/prototypes/config.ts", "how tests are run", False),  # a folder named otherwise
    ],
)
def test_type_declarations_prior(rel: str, query: str, lowered: bool) -> None:
    priors = dict(chunk_priors(rel, "x = 1\n", query_info(query)))
    assert ("type declarations file" in priors) is lowered
    if lowered:
        assert priors["type declarations file"] == 0.8


@pytest.mark.parametrize(
    ("rel", "label"),
    [
        ("_examples/rest/main.go", "example file"),  # Go skips `_` folders: chi's examples
        ("examples/client.py", "example file"),
        ("pkg/_internal/_core.py", "private file"),
        ("pkg/_utils.py", "private file"),
        ("tests/test_client.py", "test file"),
        ("src/client.py", None),
    ],
)
def test_path_kind_labels(rel: str, label: str | None) -> None:
    priors = [name for name, _ in chunk_priors(rel, "x = 1\n", query_info("how requests are sent"))]
    assert priors == ([label] if label else [])


def test_file_lift_prefers_a_file_whose_best_chunks_all_match() -> None:
    # file 1: one spike among weak chunks; file 2: three good chunks; file 3: one chunk alone
    nearest = [(10, 0.80), (20, 0.78), (21, 0.77), (22, 0.76), (30, 0.70), (11, 0.40), (12, 0.40)]
    file_of = {10: 1, 11: 1, 12: 1, 20: 2, 21: 2, 22: 2, 30: 3}
    lifted = ranking.file_lifted(nearest, file_of)
    weight = ranking.FILE_VECTOR_WEIGHT
    assert 0.80 + weight * 1.6 / 3 < 0.70 + weight * 0.70 < 0.76 + weight * 0.77  # as ranked:
    assert lifted == [20, 21, 22, 30, 10, 11, 12]
    # a chunk alone in its file keeps (1 + weight) x its cosine: no penalty for a short file
    assert ranking.file_lifted([(30, 0.7), (10, 0.69)], {30: 3, 10: 1}) == [30, 10]
    assert ranking.file_lifted([(5, 0.5), (6, 0.5)], {}) == [5, 6]  # ties keep the arm's order


def test_the_path_term_lifts_the_file_whose_path_matches() -> None:
    # two one-chunk files: 20's chunk is a little weaker, its path matches the query better
    nearest = [(10, 0.60), (20, 0.58)]
    file_of = {10: 1, 20: 2}
    assert ranking.file_lifted(nearest, file_of) == [10, 20]
    path_weight = ranking.PATH_WEIGHT
    assert path_weight * (0.45 - 0.30) > (1 + ranking.FILE_VECTOR_WEIGHT) * 0.02  # so:
    assert ranking.file_lifted(nearest, file_of, path_cosine={1: 0.30, 2: 0.45}) == [20, 10]
    # a file without a path vector (a document, or not embedded yet) adds nothing
    assert ranking.file_lifted(nearest, file_of, path_cosine={2: 0.01}) == [10, 20]
    assert ranking.file_lifted(nearest, file_of, path_cosine={2: 0.1}) == [20, 10]


def test_whole_files_count_their_missing_candidates_as_zero() -> None:
    # file 1 has three candidates, file 2 one slightly better chunk
    nearest = [(20, 0.72), (10, 0.70), (11, 0.66), (12, 0.64)]
    file_of = {10: 1, 11: 1, 12: 1, 20: 2}
    assert ranking.file_lifted(nearest, file_of)[0] == 20  # mean of what each file has
    assert ranking.file_lifted(nearest, file_of, whole={1, 2})[:3] == [10, 11, 12]
    assert ranking.file_lifted(nearest, file_of, whole={1})[0] == 20  # 2 is a document


def test_file_coherence_goes_to_each_files_best_chunk_by_its_files_sum() -> None:
    scores = {1: 0.5, 2: 0.4, 5: 0.3, 3: 0.9, 4: 0.2}
    file_of = {1: 10, 2: 10, 5: 10, 3: 20}  # chunk 4 has no vector in memory: a file of its own
    shares = file_coherence(scores, file_of)
    largest = ranking.FILE_COHERENCE
    assert shares == pytest.approx({1: largest, 3: largest * 0.9 / 1.2, 4: largest * 0.2 / 1.2})
    assert file_coherence({}, {}) == {}
    halved = file_coherence(scores, file_of, weight=largest / 2)
    assert halved == pytest.approx({chunk: share / 2 for chunk, share in shares.items()})


def test_coherence_weighs_more_for_a_question() -> None:
    assert coherence_weight(query_info("how are retries scheduled")) == ranking.QUESTION_COHERENCE
    assert coherence_weight(query_info("retries scheduled")) == ranking.FILE_COHERENCE
    assert coherence_weight(query_info("RetryScheduler")) == ranking.FILE_COHERENCE


def test_a_document_counts_its_best_chunk_and_a_code_file_its_sum() -> None:
    scores = {1: 0.5, 2: 0.4, 3: 0.3, 4: 0.5, 5: 0.4, 6: 0.3, 7: 0.6}
    file_of = {1: 10, 2: 10, 3: 10, 4: 20, 5: 20, 6: 20, 7: 30}  # 20 is a document
    shares = file_coherence(scores, file_of, documents={20})
    largest = ranking.FILE_COHERENCE
    assert shares == pytest.approx({1: largest, 4: largest * 0.5 / 1.2, 7: largest * 0.6 / 1.2})
    same = file_coherence(scores, file_of)  # as code, the two files of three chunks tie
    assert same[1] == same[4] == pytest.approx(largest)


def test_best_prior_is_the_product_of_the_largest_raising_factors() -> None:
    assert best_prior({}) == 1.0
    assert best_prior({ranking.DEFINES_NOTE: 1.5}) == 1.5
    assert best_prior({ranking.DEFINES_NOTE: 1.5, STEM_NOTE: 1.25}) == pytest.approx(1.875)
    assert best_prior({"test file": 0.6}) == 1.0  # a lowering prior never raises the ceiling


def test_a_file_the_query_names_beats_one_with_the_same_text(
    tmp_path: Path, hash_index: Index
) -> None:
    text = "the client keeps connections open between requests\n"
    root = write_tree(tmp_path / "lib", {"http/pool.py": text, "http/session.py": text})
    hash_index.update([root])
    query = "client session connections between requests"
    hits = hash_index.search(query, k=2, all_copies=True)  # each copy its own hit
    assert [h.rel for h in hits] == ["http/session.py", "http/pool.py"]
    assert any(p.startswith(STEM_NOTE) for p in hits[0].priors)
    assert 0.0 < hits[1].score < hits[0].score <= 1.0
    (hit,) = hash_index.search(query, k=2)  # one text: the named file stands for it
    assert (hit.rel, [c.rel for c in hit.copies]) == ("http/session.py", ["http/pool.py"])


@pytest.mark.parametrize(
    ("text", "reexport"),
    [
        ("from ._api import get, post\nfrom ._client import Client\nimport typing\n", True),
        ('__all__ = [\n    "Client",\n    "get",\n    "post",\n]\n', True),
        (
            "export * from './adapters';\nexport { default } from './axios';\n"
            "export type { A } from './a';\n",
            True,
        ),
        (
            "pub use crate::sync::Semaphore;\npub use crate::task::spawn;\n"
            "mod inner;\nuse std::fmt;\n",
            True,
        ),
        ('#include "curl_setup.h"\n#include <stdio.h>\n#include "urldata.h"\n', True),
        (
            "import os\n\ndef load(path):\n    with open(path) as f:\n        return f.read()\n",
            False,
        ),
        ("from a import b\nfrom c import d\n", False),  # two lines: too short to tell
        (
            "use std::fmt;\nfn close(self) {\n    drop(self)\n}\n}\n}\n",
            False,
        ),  # braces are not imports
        ("from ._models import (\n    Request,\n    Response,\n)\nfrom ._api import get\n", True),
    ],
)
def test_reexport_chunks(text: str, reexport: bool) -> None:
    assert ranking.is_reexport(text) is reexport


def test_the_definition_beats_the_module_that_reexports_it(
    tmp_path: Path, hash_index: Index
) -> None:
    root = write_tree(
        tmp_path / "pkg",
        {
            "pkg/__init__.py": (
                "from pkg.pool import ConnectionPool\nfrom pkg.pool import PoolTimeout\n"
                "from pkg.retry import Retry\n__all__ = ['ConnectionPool', 'PoolTimeout']\n"
            ),
            "pkg/connections.py": (
                "class ConnectionPool:\n    # keeps connections open, pool timeout\n    pass\n"
            ),
        },
    )
    hash_index.update([root])
    hits = hash_index.search("connection pool timeout", k=2)
    assert [h.rel for h in hits] == ["pkg/connections.py", "pkg/__init__.py"]
    assert "imports and re-exports x0.7" in hits[1].priors


@pytest.mark.parametrize(
    ("rel", "rels", "is_lowered"),
    [
        ("httpx/_client.py", ["httpx/__init__.py", "httpx/_client.py", "httpx/_api.py"], False),
        ("pkg/_utils.py", ["pkg/_utils.py", "pkg/api.py"], True),
        ("pkg/_internal/core.py", ["pkg/_internal/core.py", "pkg/fields.py"], True),
        ("pkg/_internal/core.py", ["pkg/_internal/core.py", "pkg/__init__.py"], False),
        ("pkg/_internal/core.py", ["pkg/_internal/core.py", "pkg/models/base.py"], True),
        ("_tools/build.py", ["_tools/build.py", "setup.py"], True),
    ],
)
def test_the_private_prior_needs_a_public_module_beside(
    rel: str, rels: list[str], is_lowered: bool
) -> None:
    info = replace(ranking.query_info("parse"), public_folders=ranking.public_python_folders(rels))
    priors = [name for name, _ in ranking.path_priors(rel, info)]
    assert ("private file" in priors) is is_lowered


def _uses(line: str, count: int = 60) -> str:
    """A large file of uses: ``line`` with ``{n}`` filled in, ``count`` times."""
    return "".join(line.format(n=n) + "\n" for n in range(count))


# (query, files, the file that defines the name): per language, the definition in a small file,
# beside a large file of uses and a file that re-exports or declares it again.
NAME_CASES = [
    (
        "JoinSet",
        {
            "src/task/join_set.rs": (
                "/// A collection of tasks spawned on a Tokio runtime.\n"
                "pub struct JoinSet<T> {\n    inner: IdleNotifiedSet<JoinHandle<T>>,\n}\n"
            ),
            "src/task/mod.rs": "pub use join_set::JoinSet;\npub use local::LocalSet;\nmod x;\n",
            "src/runtime/join.rs": _uses(
                "    let mut set{n} = JoinSet::new(); set{n}.spawn(work);"
            ),
            "src/task/impls.rs": "impl<T> Default for JoinSet<T> {\n    fn default() -> Self {\n"
            "        Self::new()\n    }\n}\nimpl<T> Drop for JoinSet<T> {\n}\n",
        },
        "src/task/join_set.rs",
    ),
    (
        "ready",
        {
            "src/macros/ready.rs": "/// Extracts the successful type of a `Poll<T>`.\n"
            "macro_rules! ready {\n    ($e:expr $(,)?) => { match $e { x => x } };\n}\n",
            "src/future/ready.rs": _uses("    let n{n} = ready!(self.poll_read(cx, buf))?;"),
        },
        "src/macros/ready.rs",
    ),
    (
        "UserSchema",
        {
            "src/schema/user.ts": "/** A user as the API returns it. */\n"
            "export const UserSchema = z.object({\n  id: z.string(),\n  name: z.string(),\n})\n",
            "src/index.ts": "export { UserSchema } from './schema/user'\n"
            "export type { User } from './schema/user'\nexport * from './client'\n",
            "src/user.ts": _uses("  const user{n} = UserSchema.parse(await fetchUser({n}))"),
        },
        "src/schema/user.ts",
    ),
    (
        "ReporterOptions",
        {
            "src/node/reporters/options.ts": "/** What a reporter is told. */\n"
            "export interface ReporterOptions {\n  verbose: boolean\n  silent: boolean\n}\n",
            "src/node/reporters/index.ts": "export type { ReporterOptions } from './options'\n"
            "export { DefaultReporter } from './default'\nexport * from './json'\n",
            "src/node/reporters/reporter.ts": _uses("  report{n}(options: ReporterOptions) {{}}"),
        },
        "src/node/reporters/options.ts",
    ),
    (
        "TaskState",
        {
            "src/types/tasks.ts": "/** Where a task is in its run. */\n"
            "export type TaskState = 'run' | 'skip' | 'only' | 'todo' | 'queued'\n",
            "src/task.ts": _uses("  if (task{n}.mode as TaskState === 'run') count++"),
        },
        "src/types/tasks.ts",
    ),
    (
        "VERSION",
        {
            "types/globals.d.ts": "/** The version of the runtime. */\n"
            "declare const VERSION: string\n",
            "src/version.ts": _uses("  log{n}(`running ${{VERSION}}`)"),
        },
        "types/globals.d.ts",
    ),
    (
        "curl_easy_perform",
        {
            "lib/easy.c": "/*\n * curl_easy_perform() is the external interface that performs a\n"
            " * blocking transfer.\n */\nCURLcode curl_easy_perform(struct Curl_easy *data)\n"
            "{\n  return easy_perform(data, FALSE);\n}\n",
            "include/curl/easy.h": "CURL_EXTERN CURL *curl_easy_init(void);\n"
            "CURL_EXTERN CURLcode curl_easy_setopt(CURL *curl, CURLoption option, ...);\n"
            "CURL_EXTERN CURLcode curl_easy_perform(CURL *curl);\n"
            "CURL_EXTERN void curl_easy_cleanup(CURL *curl);\n",
            "lib/easy_perform.c": _uses("  result = curl_easy_perform(per{n}->curl);"),
        },
        "lib/easy.c",
    ),
    (
        "Curl_easy",
        {
            "lib/urldata.h": "/* The state of one transfer. */\nstruct Curl_easy {\n"
            "  struct Curl_easy *next;\n  struct connectdata *conn;\n};\n",
            "lib/transfer.h": "struct Curl_easy;\nCURLcode Curl_xfer(struct Curl_easy *data);\n",
            "lib/easy.c": _uses("  struct Curl_easy *data{n} = conn->data; Curl_xfer(data{n});"),
        },
        "lib/urldata.h",
    ),
    (
        "CURL_MAX_WRITE_SIZE",
        {
            "include/curl/curl.h": "/* The largest chunk a write callback gets. */\n"
            "#define CURL_MAX_WRITE_SIZE 16384\n",
            "lib/write.c": _uses(
                "  if(len{n} > CURL_MAX_WRITE_SIZE) len{n} = CURL_MAX_WRITE_SIZE;"
            ),
        },
        "include/curl/curl.h",
    ),
    (
        "CURL_HTTP_V2x",  # a macro whose value is in parentheses, prototypes after it
        {
            "lib/http.h": "#define CURL_HTTP_V1x   (1 << 0)\n#define CURL_HTTP_V2x   (1 << 1)\n"
            "CURLcode Curl_http_neg_init(struct Curl_easy *data);\n"
            "bool Curl_http_may_switch(struct Curl_easy *data);\n",
            "lib/http2.c": _uses("  if(data->state.http_neg.wanted & CURL_HTTP_V2x) go({n});"),
        },
        "lib/http.h",
    ),
    (
        "Curl_bufref_clear",  # a function-like macro, prototypes after it
        {
            "lib/bufref.h": "#define Curl_bufref_clear(br) Curl_bufref_set(br, NULL, 0, NULL)\n"
            "void Curl_bufref_free(struct bufref *br);\n",
            "lib/url.c": _uses("  Curl_bufref_clear(&data->state.buffer{n});"),
        },
        "lib/bufref.h",
    ),
    (
        "Rails::Engine",
        {
            "railties/lib/rails/engine.rb": "module Rails\n  # An engine is a small application.\n"
            "  class Engine < Railtie\n    autoload :Configuration\n  end\nend\n",
            "railties/lib/rails/application.rb": _uses("    Rails::Engine.subclasses[{n}].setup"),
        },
        "railties/lib/rails/engine.rb",
    ),
    (
        "Monolog\\Logger",
        {
            "src/Monolog/Logger.php": "<?php\nnamespace Monolog;\n\n/** Monolog log channel. */\n"
            "class Logger implements LoggerInterface\n{\n    protected string $name;\n}\n",
            "src/Monolog/Registry.php": _uses("        $logger{n} = new Logger('app{n}');"),
        },
        "src/Monolog/Logger.php",
    ),
    (
        "client.ClientSession",
        {
            "pkg/client.py": '"""The client."""\n\n\nclass ClientSession:\n'
            '    """First-class interface for making HTTP requests."""\n',
            "pkg/__init__.py": "from .client import ClientSession\nfrom .client import request\n"
            "__all__ = ['ClientSession', 'request']\n",
            "pkg/session.py": _uses("    session{n} = ClientSession(); await session{n}.get(url)"),
        },
        "pkg/client.py",
    ),
    (
        "NewRouter",
        {
            "mux.go": "package chi\n\n// NewRouter returns a new Mux object.\n"
            "func NewRouter() *Mux {\n\treturn NewMux()\n}\n",
            "router.go": _uses('\tr{n} := NewRouter(); r{n}.Get("/", h)'),
            "examples/main.go": _uses("\tr{n} := chi.NewRouter()"),
        },
        "mux.go",
    ),
    (
        "ObjectMapper",
        {
            "src/main/java/databind/ObjectMapper.java": "package databind;\n\n/** Reads and "
            "writes JSON. */\npublic class ObjectMapper implements Versioned {\n}\n",
            "src/main/java/databind/ObjectReader.java": _uses("    ObjectMapper m{n} = mapper();"),
        },
        "src/main/java/databind/ObjectMapper.java",
    ),
    (
        "HttpClient",
        {
            "src/io/ktor/client/Client.kt": "/** A multiplatform asynchronous HTTP client. */\n"
            "public class HttpClient(public val engine: HttpClientEngine) : CoroutineScope\n",
            "src/io/ktor/client/HttpClientConfig.kt": _uses(
                "    val c{n}: HttpClient = HttpClient()"
            ),
        },
        "src/io/ktor/client/Client.kt",
    ),
    (
        "Monad",
        {
            "core/src/main/scala/cats/Monad.scala": "package cats\n\n/** Monad. */\n"
            "trait Monad[F[_]] extends FlatMap[F] with Applicative[F] {\n}\n",
            "core/src/main/scala/cats/syntax/all.scala": _uses("  implicit val m{n}: Monad[F] = M"),
        },
        "core/src/main/scala/cats/Monad.scala",
    ),
    (
        "Session",
        {
            "Source/Core/Session.swift": "/// Creates and manages Alamofire's `Request` types.\n"
            "open class Session: @unchecked Sendable {\n}\n",
            "Source/Core/SessionDelegate.swift": _uses("    let session{n}: Session = .default"),
        },
        "Source/Core/Session.swift",
    ),
    (
        "Plug.Conn",
        {
            "lib/plug/conn.ex": 'defmodule Plug.Conn do\n  @moduledoc """\n  The Plug '
            'connection.\n  """\n  defstruct adapter: nil\nend\n',
            "lib/plug/conn/utils.ex": _uses(
                "    conn{n} = %Plug.Conn{{}} |> Plug.Conn.put_status(200)"
            ),
        },
        "lib/plug/conn.ex",
    ),
    (
        "JsonConvert",
        {
            "Src/Newtonsoft.Json/JsonConvert.cs": "namespace Newtonsoft.Json\n{\n    /// <summary>"
            "Converts.</summary>\n    public static class JsonConvert\n    {\n    }\n}\n",
            "Src/Newtonsoft.Json/JsonSerializer.cs": _uses(
                "            JsonConvert.ToString(v{n});"
            ),
        },
        "Src/Newtonsoft.Json/JsonConvert.cs",
    ),
    (
        "std.mem.eql",
        {
            "lib/std/mem.zig": "/// Compares slices and returns whether they are equal.\n"
            "pub fn eql(comptime T: type, a: []const T, b: []const T) bool {\n    return a;\n}\n",
            "lib/std/mem/eql.zig": _uses("    if (std.mem.eql(u8, a{n}, b)) return;"),
        },
        "lib/std/mem.zig",
    ),
]


@pytest.mark.parametrize(
    ("query", "files", "defining"), NAME_CASES, ids=[case[0] for case in NAME_CASES]
)
def test_a_query_of_one_name_ranks_its_definition_first(
    tmp_path: Path, hash_index: Index, query: str, files: dict[str, str], defining: str
) -> None:
    hash_index.update([write_tree(tmp_path / "repo", files)])
    hits = hash_index.search(query, k=5)
    assert hits[0].rel == defining, [(h.rel, h.priors) for h in hits]
    assert f"{ranking.DEFINES_NOTE} x{ranking.NAME_DEFINITION_BOOST:g}" in hits[0].priors


def test_a_qualifier_may_be_the_indexed_folder(tmp_path: Path, hash_index: Index) -> None:
    """``Rails::Engine`` in a folder indexed on its own (``railties/lib/rails``): the qualifier
    is in the folder's path, not in the file's; the definition still comes first, before the
    comment that spells the qualified name."""
    root = write_tree(
        tmp_path / "railties" / "lib" / "rails",
        {
            "engine.rb": "module Rails\n"
            + "".join(f"  # Rails::Engine {n}: class MyEngine < Rails::Engine\n" for n in range(40))
            + "\n".join("  # A paragraph of prose about loading." for _ in range(60))
            + "\n\n  class Engine < Railtie\n    autoload :Configuration\n  end\nend\n",
            "application.rb": _uses("    Rails::Engine.subclasses[{n}].setup"),
        },
    )
    hash_index.update([root])
    hits = hash_index.search("Rails::Engine", k=5)
    assert "class Engine < Railtie" in hits[0].text, [(h.rel, h.start_line) for h in hits]
    assert f"{ranking.DEFINES_NOTE} x{ranking.NAME_DEFINITION_BOOST:g}" in hits[0].priors
    elsewhere = ranking.query_info("Rails::Engine")
    text = "module Rails\n  class Engine < Railtie\n  end\nend\n"
    assert ranking.defines_queried("engine.rb", text, elsewhere, f"{root}/engine.rb")
    assert not ranking.defines_queried("engine.rb", text, elsewhere, f"{tmp_path}/x/engine.rb")


def test_a_class_name_finds_its_class_line_before_its_constructors(
    tmp_path: Path, hash_index: Index
) -> None:
    body = "".join(f"    private int field{n} = {n};\n" for n in range(80))
    files = {
        "ObjectMapper.java": "/** The mapper. */\npublic class ObjectMapper\n"
        + "    extends ObjectCodec\n{\n"
        + body
        + "\n    public ObjectMapper() {\n        this(new ObjectMapper(null));\n    }\n"
        + "\n    public ObjectMapper(TokenStreamFactory f) {\n        this(f, null);\n    }\n}\n",
        "ObjectReader.java": _uses("        ObjectMapper mapper{n} = new ObjectMapper();"),
    }
    hash_index.update([write_tree(tmp_path / "repo", files)])
    hits = hash_index.search("ObjectMapper", k=5)
    assert "public class ObjectMapper" in hits[0].text, [(h.rel, h.start_line) for h in hits]


def test_a_namespace_named_in_a_question_defines_nothing(tmp_path: Path, hash_index: Index) -> None:
    """Every file of a C# project opens ``namespace Dapper``: "how Dapper caches …" names the
    project, and no file's first lines define it."""
    files = {
        f"Dapper/{name}.cs": f"namespace Dapper\n{{\n    class {name}\n    {{\n    }}\n}}\n"
        for name in ("SqlMapper", "CacheInfo", "WrappedReader")
    }
    hash_index.update([write_tree(tmp_path / "repo", files)])
    hits = hash_index.search("how Dapper caches parameters", k=5)
    assert len(hits) == 3
    assert all(ranking.DEFINES_NOTE not in " ".join(h.priors) for h in hits), [
        (h.rel, h.priors) for h in hits
    ]


# (query, files, the file that defines the name), searched with the real model: the declaration
# shapes of issue 39 beside a hub that re-exports the name, a header that declares it, a large
# file of uses and a test that exercises it.
REAL_NAME_CASES = [
    (
        "UserSchema",  # TypeScript: a value that is a type (zod)
        {
            "src/schema/user.ts": "import { z } from 'zod'\n\n"
            "/** A user as the API returns it. */\n"
            "export const UserSchema = z.object({\n  id: z.string(),\n  name: z.string(),\n})\n",
            "src/index.ts": "export { UserSchema } from './schema/user'\n"
            "export type { User } from './schema/user'\nexport * from './client'\n",
            "src/client.ts": _uses("  const user{n} = UserSchema.parse(await fetchUser({n}))", 30),
            "test/user.test.ts": _uses("  expect(UserSchema.parse(raw{n})).toBeTruthy()", 10),
        },
        "src/schema/user.ts",
    ),
    (
        "walkTree",  # TypeScript: a generator function
        {
            "src/walk.ts": "/** Every node of the tree, depth first. */\n"
            "export function* walkTree(node: Node): Generator<Node> {\n  yield node\n"
            "  for (const child of node.children) yield* walkTree(child)\n}\n",
            "src/index.ts": "export { walkTree } from './walk'\nexport * from './node'\n",
            "src/render.ts": _uses("  for (const n{n} of walkTree(root)) render(n{n})", 30),
        },
        "src/walk.ts",
    ),
    (
        "toJSON",  # JavaScript: an untyped method in a class body
        {
            "lib/core/AxiosHeaders.js": "class AxiosHeaders {\n  constructor(headers) {\n"
            "    headers && this.set(headers);\n  }\n\n  /** The headers as a plain object. */\n"
            "  toJSON(asStrings) {\n    const obj = Object.create(null);\n    return obj;\n  }\n"
            "}\n\nexport default AxiosHeaders;\n",
            "lib/axios.js": "export { default as AxiosHeaders } from './core/AxiosHeaders.js'\n"
            "export { default as AxiosError } from './core/AxiosError.js'\n"
            "export * from './helpers/index.js'\n",
            "lib/core/dispatchRequest.js": _uses(
                "  const headers{n} = config.headers.toJSON(); send(headers{n});", 30
            ),
            "test/unit/headers.test.js": _uses(
                "  expect(new AxiosHeaders(h{n}).toJSON()).toEqual(h{n});", 10
            ),
        },
        "lib/core/AxiosHeaders.js",
    ),
    (
        "curl_easy_init",  # C: an export macro before the return type; the header's prototype
        {
            "lib/easy.c": "/*\n * curl_easy_init() is the external interface to alloc, setup\n"
            " * and init an easy handle.\n */\nCURL_EXTERN CURL *curl_easy_init(void)\n{\n"
            "  struct Curl_easy *data;\n  Curl_open(&data);\n  return data;\n}\n",
            "include/curl/easy.h": "CURL_EXTERN CURL *curl_easy_init(void);\n"
            "CURL_EXTERN CURLcode curl_easy_perform(CURL *curl);\n"
            "CURL_EXTERN void curl_easy_cleanup(CURL *curl);\n",
            "src/tool_operate.c": _uses("  curl{n} = curl_easy_init(); if(!curl{n}) return 1;", 30),
        },
        "lib/easy.c",
    ),
    (
        "Curl_open",  # C: a function that returns a struct
        {
            "lib/url.c": "/* Allocate and initialise a new easy handle. */\n"
            "struct Curl_easy *Curl_open(void)\n{\n  struct Curl_easy *data = calloc(1, 8);\n"
            "  return data;\n}\n",
            "lib/url.h": "struct Curl_easy *Curl_open(void);\n"
            "void Curl_close(struct Curl_easy *d);\n",
            "lib/easy.c": _uses("  struct Curl_easy *data{n} = Curl_open();", 30),
        },
        "lib/url.c",
    ),
    (
        "CURLcode",  # C: the name a typedef'd enum closes with
        {
            "include/curl/curl.h": "/* What every libcurl function returns. */\ntypedef enum {\n"
            "  CURLE_OK = 0,\n  CURLE_UNSUPPORTED_PROTOCOL,\n  CURLE_FAILED_INIT,\n} CURLcode;\n",
            "lib/transfer.c": _uses("CURLcode Curl_step{n}(struct Curl_easy *data);", 30),
        },
        "include/curl/curl.h",
    ),
    (
        "JoinSet",  # Rust: the struct, not `impl Trait for Type`, not the mod.rs hub
        {
            "src/task/join_set.rs": "/// A collection of tasks spawned on a Tokio runtime.\n"
            "pub struct JoinSet<T> {\n    inner: IdleNotifiedSet<JoinHandle<T>>,\n}\n",
            "src/task/mod.rs": "//! Asynchronous green-threads.\npub use join_set::JoinSet;\n"
            "pub use local::LocalSet;\nmod join_set;\nmod local;\n",
            "src/task/impls.rs": "impl<T> Default for JoinSet<T> {\n    fn default() -> Self {\n"
            "        Self::new()\n    }\n}\n"
            "impl<T> Drop for JoinSet<T> {\n    fn drop(&mut self) {}\n}\n",
            "src/runtime/join.rs": _uses(
                "    let mut set{n} = JoinSet::new(); set{n}.spawn(work);", 30
            ),
        },
        "src/task/join_set.rs",
    ),
    (
        "select",  # Rust: a macro
        {
            "src/macros/select.rs": "/// Waits on multiple concurrent branches.\n#[macro_export]\n"
            "macro_rules! select {\n    ($($t:tt)*) => { $crate::select_internal!($($t)*) };\n}\n",
            "src/lib.rs": "#[macro_use]\nmod macros;\npub use macros::select;\n",
            "src/net/listener.rs": _uses(
                "        select! {{ a{n} = rx.recv() => handle(a{n}) }}", 30
            ),
        },
        "src/macros/select.rs",
    ),
    (
        "GLOBAL_QUEUE",  # Rust: a static
        {
            "src/runtime/inject.rs": "/// Tasks any worker may take.\n"
            "pub(crate) static GLOBAL_QUEUE: Inject = Inject::new();\n",
            "src/runtime/worker.rs": _uses("        GLOBAL_QUEUE.push(task{n});", 30),
        },
        "src/runtime/inject.rs",
    ),
    (
        "ObjectCursor",  # Scala: qualified access
        {
            "modules/core/src/main/scala/io/circe/cursor/ObjectCursor.scala": "package "
            "io.circe.cursor\n\n"
            "private[circe] final class ObjectCursor(obj: JsonObject, key: String)\n"
            "    extends HCursor {\n  def value: Json = obj(key).get\n}\n",
            "modules/core/src/main/scala/io/circe/ACursor.scala": _uses(
                "    case c{n}: ObjectCursor => c{n}.value", 30
            ),
        },
        "modules/core/src/main/scala/io/circe/cursor/ObjectCursor.scala",
    ),
    (
        "FlowCollector",  # Kotlin: a functional interface
        {
            "src/flow/FlowCollector.kt": "package kotlinx.coroutines.flow\n\n"
            "/** Consumes the values of a flow. */\npublic fun interface FlowCollector<in T> {\n"
            "    public suspend fun emit(value: T)\n}\n",
            "src/flow/Flow.kt": _uses(
                "    suspend fun collect{n}(c: FlowCollector<T>) = c.emit(v)", 30
            ),
        },
        "src/flow/FlowCollector.kt",
    ),
    (
        "Semver",  # Lua: a module table
        {
            "lua/lazy/manage/semver.lua": "---@class Semver\nlocal Semver = {}\n"
            "Semver.__index = Semver\n\nfunction Semver.parse(v)\n  return v\nend\n\n"
            "return Semver\n",
            "lua/lazy/manage/git.lua": _uses("  local v{n} = Semver.parse(tag{n})", 30),
        },
        "lua/lazy/manage/semver.lua",
    ),
    (
        "JsonProperty",  # Java: an annotation type
        {
            "src/main/java/annotation/JsonProperty.java": "package annotation;\n\n"
            "/** Marks a property. */\npublic @interface JsonProperty {\n    String value();\n}\n",
            "src/main/java/databind/BeanProps.java": _uses(
                '    @JsonProperty("p{n}") String p{n};', 30
            ),
        },
        "src/main/java/annotation/JsonProperty.java",
    ),
    (
        "MonadIO",  # Haskell: a class with a context
        {
            "src/Control/Monad/IO/Class.hs": "module Control.Monad.IO.Class where\n\n"
            "-- | Monads in which IO computations may be embedded.\n"
            "class (Monad m) => MonadIO m where\n  liftIO :: IO a -> m a\n",
            "src/Control/Monad/Run.hs": _uses("run{n} :: MonadIO m => m ()", 30),
        },
        "src/Control/Monad/IO/Class.hs",
    ),
]


DEFINES_NAME = f"{ranking.DEFINES_NOTE} x{ranking.NAME_DEFINITION_BOOST:g}"


# Names also asked in lower case: a name typed so matches its definition in any case.
LOWER_CASE_NAMES = ("JoinSet", "UserSchema", "FlowCollector")


@pytest.mark.parametrize(
    ("query", "files", "defining"), REAL_NAME_CASES, ids=[case[0] for case in REAL_NAME_CASES]
)
def test_the_model_ranks_a_names_definition_first(
    tmp_path: Path, settings: Settings, query: str, files: dict[str, str], defining: str
) -> None:
    index = Index(settings)  # the real model
    try:
        index.update([write_tree(tmp_path / "repo", files)])
        lower = [query.lower()] if query in LOWER_CASE_NAMES else []  # `joinset`: `JoinSet`
        for typed in (query, f"`{query}`", *lower):
            hits = index.search(typed, k=5)
            assert hits[0].rel == defining, [(h.rel, h.priors) for h in hits]
            assert DEFINES_NAME in hits[0].priors
    finally:
        index.close()


@pytest.mark.parametrize(
    ("query", "is_name"),
    [
        ("JoinSet", True),
        ("parse_header", True),
        ("Rails::Engine", True),
        ("\\Monolog\\Logger", True),
        ("std.mem.eql", True),
        ("  mergeConfig ", True),
        ("`JoinSet`", True),  # typed as code
        ("parse_header()", True),
        ("ActiveRecord::Base#save", True),  # Ruby's instance method
        ("JoinSet spawn", False),
        ("how does JoinSet work", False),
        ("the", False),
    ],
)
def test_a_query_of_one_identifier_is_a_name(query: str, is_name: bool) -> None:
    assert query_info(query).is_name is is_name


@pytest.mark.parametrize(
    ("rel", "text", "name", "defines"),
    [
        ("lib/easy.c", "CURLcode curl_easy_perform(CURL *data)\n{\n}\n", "curl_easy_perform", True),
        ("include/easy.h", "CURLcode curl_easy_perform(CURL *curl);\n", "curl_easy_perform", False),
        ("lib/multi.c", "static int run(struct x *m,\n               int *n);\n", "run", False),
        ("lib/multi.c", "static int run(struct x *m,\n               int *n)\n{\n", "run", True),
        ("lib/a.h", "struct Curl_easy;\n", "Curl_easy", False),
        ("lib/a.h", "struct Curl_easy {\n  int a;\n};\n", "Curl_easy", True),
        ("src/a.rs", "impl<T> Future for JoinHandle<T> {\n", "Future", False),
        ("src/a.rs", "pub trait Future {\n", "Future", True),
        ("src/a.rs", "struct Unit;\n", "Unit", True),  # a unit struct: Rust, not a C forward
        ("src/a.ts", "export declare function fetchUser(id: string): User;\n", "fetchUser", True),
        # a name typed in lower case matches a definition in any case; typed otherwise, exactly
        ("src/join_set.rs", "pub struct JoinSet<T> {\n", "joinset", True),
        ("src/join_set.rs", "pub struct JoinSet<T> {\n", "joinSet", False),
        ("src/join_set.rs", "pub struct JoinSet<T> {\n", "`joinset`", True),
        ("src/join_set.rs", "pub struct JoinSet<T> {\n", "joinset spawn", False),
        ("src/a.rs", "impl<T> Drop for JoinSet<T> {\n", "joinset", False),
        # Java and C#: a constructor is a member of the class its `class` line defines
        (
            "ObjectMapper.java",
            "public class ObjectMapper\n    extends ObjectCodec\n{\n",
            "ObjectMapper",
            True,
        ),
        (
            "ObjectMapper.java",
            "    public ObjectMapper(TokenStreamFactory f) {\n",
            "ObjectMapper",
            False,
        ),
        (
            "Cache.cs",
            "        internal protected CacheInfo(int hash)\n        {\n",
            "CacheInfo",
            False,
        ),
        (
            "Cache.cs",
            "        public CacheInfo GetCacheInfo(int hash)\n        {\n",
            "GetCacheInfo",
            True,
        ),
        # ... but a TypeScript method with an access modifier is a definition
        ("src/a.ts", "  private resolveProject(name: string) {\n", "resolveProject", True),
    ],
)
def test_what_only_declares_a_name_does_not_define_it(
    rel: str, text: str, name: str, defines: bool
) -> None:
    assert ranking.defines_queried(rel, text, query_info(name)) is defines


# A package as a user has it: the code, its changelog, its manual page and its tests all talk
# about how a redirect is followed.
REDIRECT_PACKAGE = {
    "src/pkg/sessions.py": (
        "class SessionRedirectMixin:\n"
        "    def resolve_redirects(self, resp, req):\n"
        '        """Follow each redirect response until a final response."""\n'
        "        while resp.is_redirect:\n"
        "            url = resp.headers['location']\n"
        "            resp = self.send(self.rebuild_method(req, resp), allow_redirects=False)\n"
    ),
    "man/man1/pkg.1": (
        ".TH PKG 1\n.SH REDIRECTS\nEach redirect response is followed\n"
        "until the final response; the redirect responses are kept.\n"
    ),
    "HISTORY.md": (
        "2.1.0\n\n- Redirects are followed for every redirect response until the final "
        "response.\n- Fixed how a redirect response is followed after a 303.\n"
    ),
    "tests/test_redirects.py": (
        "def test_redirects_are_followed(session):\n"
        "    resp = session.get('/redirect/3')  # each redirect response is followed\n"
        "    assert resp.history and resp.status_code == 200  # until the final response\n"
    ),
}


def test_a_question_ranks_the_code_above_the_docs_and_tests_about_it(
    tmp_path: Path, hash_index: Index
) -> None:
    hash_index.update([write_tree(tmp_path / "pkg", REDIRECT_PACKAGE)])
    hits = hash_index.search("how is each redirect response followed until the final response")
    assert hits[0].rel == "src/pkg/sessions.py", [(h.rel, h.priors) for h in hits]
    docs = {h.rel: h.priors for h in hits if h.rel in ("HISTORY.md", "man/man1/pkg.1")}
    assert docs and all(ranking.DOCUMENTATION_NOTE in " ".join(p) for p in docs.values())


@pytest.mark.parametrize(
    "query",
    [
        "redirect response followed until the final response",  # not a question
        "where does the changelog say redirects are followed",  # asks for the docs
    ],
)
def test_docs_keep_their_rank_unless_a_question_asks_for_code(
    tmp_path: Path, hash_index: Index, query: str
) -> None:
    hash_index.update([write_tree(tmp_path / "pkg", REDIRECT_PACKAGE)])
    assert not any(
        prior.startswith(ranking.DOCUMENTATION_NOTE)
        for hit in hash_index.search(query)
        for prior in hit.priors
    )


@pytest.mark.parametrize(
    ("rel", "is_documentation"),
    [
        ("README.md", False),  # a document on a topic can be the answer
        ("docs/guide/retries.rst", False),
        ("CHANGELOG", True),
        ("HISTORY.md", True),
        ("NEWS.txt", True),
        ("docs/release-notes.rst", True),
        ("changes/8812.feature", True),
        ("man/man1/pyenv.1", True),
        ("libexec/pyenv-rehash", False),  # a script without an extension
        ("src/pkg/history.py", False),
        ("lib/changes.js", False),
    ],
)
def test_what_counts_as_documentation(rel: str, is_documentation: bool) -> None:
    assert ranking._is_documentation(rel) is is_documentation
