"""Fuzzing (Hypothesis): whatever a user types or a file holds gets a result or a clear error.

Search queries with FTS5's operators and quotes and with bytes that are not UTF-8, globs, config
values of every JSON type, MCP tool arguments and malformed PDF / DOCX / UTF-16 / binary files:
never a traceback, a hang or a crash. The CLI runs in-process (``main``), with the hashed
embedder's index where the model is not the point; the MCP server through a real client over
stdio. How many examples each test runs comes from the Hypothesis profile (tests/conftest.py).
"""

from __future__ import annotations

import functools
import io
import itertools
import json
import os
import re
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from semsearch.cli.commands import main
from semsearch.config import load_settings, roots_holding
from semsearch.errors import ExtractError, NoMatchingFilesError, UsageError
from semsearch.files.extract import Extracted, extract
from semsearch.index import Index
from semsearch.model.embedder import HashEmbedder
from tests.conftest import write_tree
from tests.docgen import write_docx, write_pdf
from tests.test_mcp_server import Client, server_env, text

# The examples of one test share its function-scoped fixtures: an index built once, a folder.
shared_fixtures = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
# A search through the model costs more (a model session): a quarter of the profile's examples.
costly = settings(shared_fixtures, max_examples=max(10, settings.default.max_examples // 4))

CORPUS: dict[str, str | bytes] = {
    "retry.py": "def retry_with_backoff(call):\n    '''Retry a failing call: NEAR AND OR.'''\n",
    "notes/café.md": '# Café\n\nThe naïve barista said "hello" to text: terms.\n',
    "src/parse.ts": "export function parseHeaderLine(line: string) { return line.split(':') }\n",
}

# Every piece of FTS5's query syntax, with quotes and the characters a shell user may type.
FTS5_SYNTAX = [
    '"', '""', "*", "^", "NEAR(", "NEAR", ")", "(", ",", "AND", "OR", "NOT", ":", "-", "+",
    "text:", "terms:", "defines:", "{text terms}:", "{", "}", "'", "\\", "\x00", "\n", "\t",
    "rowid:", "chunks_fts", "?", ".", "..", "/", "_", "%", "$", "NEAR(a b, 2)", "a*", "^a",
]  # fmt: skip
WORDS = ["retry", "café", "parseHeaderLine", "os.path.join", "ERR_ZORBLATT_7741", "the", "Naïve"]
# Lone surrogates: what Python makes of argv bytes that are not UTF-8 (\xff becomes \udcff).
SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)


def joined(piece: st.SearchStrategy[str], max_size: int = 8) -> st.SearchStrategy[str]:
    """Up to ``max_size`` pieces, joined by spaces or by nothing."""
    parts = st.lists(piece, min_size=1, max_size=max_size)
    return st.tuples(parts, st.sampled_from([" ", ""])).map(lambda pair: pair[1].join(pair[0]))


QUERY = joined(
    st.one_of(st.sampled_from(FTS5_SYNTAX), st.sampled_from(WORDS), st.text(max_size=6), SURROGATES)
)
GLOB_SYNTAX = [
    "*", "**", "?", "[", "]", "[!", "[^", "[a-", "[]", "[[:alpha:]]", "[[:nope:]]", "!", "\\",
    "/", "{", "}", ",", " ", "#", "*.py", "notes/", "**/", "/**", "\\*", "\x00", "\n", ".",
]  # fmt: skip
GLOB = joined(
    st.one_of(st.sampled_from(GLOB_SYNTAX), st.sampled_from(WORDS), st.text(max_size=4), SURROGATES)
)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_clear(code: int, err: str, allowed: tuple[int, ...]) -> None:
    """The exit code is one of ``allowed``; a failure says why after `semsearch: `."""
    assert code in allowed, err
    assert "Traceback" not in err
    if code != 0:
        assert err.startswith(("semsearch: ", "usage: ")), err


def hash_index(index_file: str | None = None) -> Index:
    """An Index of the current environment's settings with the hashed embedder."""
    return Index(load_settings(os.environ, index_file), embedder=HashEmbedder())


@pytest.fixture
def indexed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The corpus, configured and indexed with the hashed embedder."""
    root = write_tree(tmp_path / "proj", CORPUS)
    assert run(capsys, "add", str(root))[0] == 0
    index = hash_index()
    try:
        index.update()
    finally:
        index.close()
    return root


# Search queries and globs


@shared_fixtures
@given(query=QUERY)
def test_any_query_through_the_cli_is_a_result_or_a_usage_error(
    query: str, indexed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "search", "--mode", "bm25", "--json", query)
    assert_clear(code, err, (0, 2))
    if code == 0:
        assert isinstance(json.loads(out)["results"], list)


@shared_fixtures
@given(query=QUERY)
def test_any_query_in_hybrid_mode_is_a_result_or_a_usage_error(query: str, indexed: Path) -> None:
    index = hash_index()
    try:
        index.search(query, mode="hybrid")
    except UsageError as exc:
        assert str(exc)
    finally:
        index.close()


@pytest.fixture
def model_indexed(indexed: Path) -> Path:
    """The corpus indexed with the real model too, into an index file of its own."""
    index_file = indexed.parent / "model.db"
    index = Index(load_settings(os.environ, str(index_file)))
    try:
        index.update()
    finally:
        index.close()
    return index_file


@costly
@given(query=QUERY)
def test_any_query_through_the_model_is_a_result_or_a_usage_error(
    query: str, model_indexed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The user's path: the CLI's default (hybrid) search, the model's tokenizer included."""
    code, out, err = run(capsys, "--index", str(model_indexed), "search", "--json", query)
    assert_clear(code, err, (0, 2))
    if code == 0:
        assert isinstance(json.loads(out)["results"], list)


@shared_fixtures
@given(glob=GLOB, mode=st.sampled_from(["bm25", "hybrid"]))
def test_any_glob_is_a_result_or_a_usage_error(
    glob: str, mode: str, indexed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if mode == "hybrid":  # the hashed embedder: the CLI would load the model
        index = hash_index()
        try:
            index.search("retry", glob=glob, mode="hybrid")
        except (UsageError, NoMatchingFilesError) as exc:
            assert str(exc)
        finally:
            index.close()
        return
    code, out, err = run(capsys, "search", "retry", "--mode", "bm25", "--json", "--glob", glob)
    assert_clear(code, err, (0, 1, 2))
    if code == 0:
        assert isinstance(json.loads(out)["results"], list)
    elif code == 1:  # a valid glob that matches no indexed path
        assert err.startswith("semsearch: No indexed path matches the glob")
    else:
        assert "glob" in err


# Config values

JSON_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),  # json.dumps writes NaN, which is not JSON
    st.text(max_size=8),
    st.sampled_from(["", ".", "..", "/", "~", "\x00", "a\x00b", "sqlite", "lancedb", "auto"]),
)
JSON_VALUE = st.recursive(
    JSON_SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)
PATTERN = joined(st.one_of(st.sampled_from(GLOB_SYNTAX), st.text(max_size=4)), max_size=4)
# Each key's values of its type, mostly in range; configs() puts any JSON value in one key.
CONFIG_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "chunk": st.fixed_dictionaries(
        {},
        optional={
            "hardTokenLimit": st.integers(min_value=15, max_value=255),
            "targetTokens": st.integers(min_value=7, max_value=255),
            "overlapTokens": st.integers(min_value=-1, max_value=60),
            "documentTargetTokens": st.integers(min_value=7, max_value=255),
            "documentOverlapTokens": st.integers(min_value=-1, max_value=60),
        },
    ),
    "defaultTopK": st.integers(min_value=0, max_value=1001),
    "hybridSearch": st.booleans(),
    "rrfK": st.integers(min_value=0, max_value=10_001),
    "maxFileSizeBytes": st.integers(min_value=0, max_value=10**9),
    "binaryExtensions": st.lists(st.sampled_from([".py", ".md", "", ".", "PY", "*"]), max_size=3),
    "defaultIgnorePatterns": st.lists(PATTERN, max_size=3),
    "ignoreFile": st.sampled_from([".indexignore", "", ".", "..", "/", "x/y", "ø"]),
    "allowSecretPatterns": st.lists(PATTERN, max_size=3),
    "indexKinds": st.lists(st.sampled_from(["lockfile", "minified", "sourcemap", "data", "venv"])),
    "modelDir": st.text(max_size=6),
    "storeBackend": st.sampled_from(["sqlite", "lancedb"]),
    "mcpAutoIndex": st.booleans(),
    "modelVariant": st.sampled_from(["auto", "fp32", "int8"]),
    "indexDir": st.text(max_size=6),
    "defaultRoots": st.lists(st.text(max_size=6), max_size=2),
    "defaultRoot": st.text(max_size=6),
    "unknownKey": JSON_VALUE,
}


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    """Some keys with values of their type (in range or not), and maybe one of any JSON type."""
    config = draw(st.fixed_dictionaries({}, optional=CONFIG_VALUES))
    if draw(st.booleans()):
        config[draw(st.sampled_from(sorted(CONFIG_VALUES)))] = draw(JSON_VALUE)
    return config


@pytest.fixture
def folders(tmp_path: Path) -> Iterator[Path]:
    """A new empty folder for each example (examples share the test's tmp_path)."""
    return (tmp_path / f"example{n}" for n in itertools.count())


@shared_fixtures
@given(config=configs())
def test_any_config_is_loaded_or_one_clear_error(
    config: dict[str, Any],
    folders: Iterator[Path],
    isolated_env: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every key with values of every JSON type; a config that loads then lists, indexes and
    searches a folder (never the configured ones: they are fuzzed paths)."""
    folder = next(folders)
    root = write_tree(folder / "proj", {**CORPUS, "big.log": "x" * 2000, ".indexignore": "*.ts"})
    path = isolated_env / ".config" / "semsearch" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config), encoding="utf-8")
    code, _, err = run(capsys, "config")
    assert_clear(code, err, (0, 1))
    event("refused" if code else "loaded")
    if code != 0:
        assert str(path) in err
        return
    code, _, err = run(capsys, "list")
    assert_clear(code, err, (0,))
    if roots_holding(load_settings(os.environ).roots, root):
        return  # a configured root ("/", "..") holds it: indexing it would index all of that
    index_file = str(folder / "index.db")
    code, _, err = run(capsys, "--index", index_file, "index", "--dry-run", str(root))
    assert_clear(code, err, (0, 1))  # a pattern is checked when a folder is listed
    if code != 0:
        assert "Fix it in the config file." in err
        return
    index = hash_index(index_file)
    try:
        report = index.update([root])
        assert not report.failed, report.as_json()
        index.search("retry", mode="bm25")
    finally:
        index.close()


# Malformed files


@functools.cache
def sample(kind: str) -> bytes:
    """A small, valid PDF or DOCX, made once (the fuzzing damages copies of it)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"sample.{kind}"
        if kind == "pdf":
            write_pdf(path, ["Alpha first page (with parens)", "Bravo café"])
        else:
            write_docx(path, ["Intro", "Body"], [["a", "b"], ["c", "d"]])
        return path.read_bytes()


@st.composite
def damaged(draw: st.DrawFn, kind: str) -> bytes:
    """A sample cut short, with bytes overwritten or inserted, or random bytes instead."""
    good = sample(kind)
    how = draw(st.sampled_from(["truncate", "overwrite", "insert", "random"]))
    if how == "random":
        return draw(st.binary(max_size=512))
    at = draw(st.integers(min_value=0, max_value=len(good)))
    if how == "truncate":
        return good[:at]
    junk = draw(st.binary(min_size=1, max_size=16))
    end = at + len(junk) if how == "overwrite" else at
    return good[:at] + junk + good[end:]


@st.composite
def docx_with_bad_xml(draw: st.DrawFn) -> bytes:
    """The sample DOCX, its document.xml spliced with XML-ish junk (a valid zip around it)."""
    source = zipfile.ZipFile(io.BytesIO(sample("docx")))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "word/document.xml":
                at = draw(st.integers(min_value=0, max_value=len(data)))
                cut = draw(st.integers(min_value=0, max_value=40))
                junk = draw(joined(st.sampled_from(["<", ">", "</w:p>", "&", "<w:t>", "\x00"])))
                data = data[:at] + junk.encode() + data[at + cut :]
            target.writestr(item, data)
    return out.getvalue()


UTF16 = st.one_of(
    st.binary(max_size=64).map(lambda data: b"\xff\xfe" + data),
    st.binary(max_size=64).map(lambda data: b"\xfe\xff" + data),
    st.text(max_size=20).map(lambda text: text.encode("utf-16")),
    st.binary(max_size=5).map(lambda data: b"\xff\xfe\x00\xd8a\x00" + data),  # a lone surrogate
)
MALFORMED_FILE = st.one_of(
    st.tuples(st.sampled_from(["a.pdf", "B.PDF"]), damaged("pdf")),
    st.tuples(st.just("a.docx"), st.one_of(damaged("docx"), docx_with_bad_xml())),
    st.tuples(st.sampled_from(["u.txt", "u.md"]), UTF16),
    st.tuples(
        st.sampled_from(["data.txt", "notes.md", "code.py", "blob.bin", "README", "x.csv"]),
        st.binary(max_size=256),
    ),
)


@given(file=MALFORMED_FILE)
def test_any_file_is_extracted_or_one_extract_error(file: tuple[str, bytes]) -> None:
    name, content = file
    try:
        extracted = extract(name, content)
    except ExtractError as exc:
        assert str(exc).startswith(f"{name}: cannot read the ")
        return
    assert isinstance(extracted, Extracted)
    assert "\r" not in extracted.text


IGNORE_FILE = st.one_of(
    st.binary(max_size=64),
    st.lists(PATTERN, max_size=4).map(lambda lines: "\n".join(lines).encode("utf-8", "replace")),
)


@shared_fixtures
@given(
    drawn=st.lists(MALFORMED_FILE, min_size=1, max_size=4),
    ignores=st.fixed_dictionaries(
        {}, optional={".indexignore": IGNORE_FILE, ".gitignore": IGNORE_FILE}
    ),
)
def test_a_folder_of_malformed_files_is_indexed_with_a_reason_for_each_failure(
    drawn: list[tuple[str, bytes]],
    ignores: dict[str, bytes],
    folders: Iterator[Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Listing and an index run: the good file indexed (unless an ignore file leaves it out),
    each bad one a problem with a reason. The ignore files hold patterns or any bytes."""
    folder = next(folders)
    root = write_tree(folder / "proj", {"good.md": "harbour pilots at dawn\n", **ignores})
    for number, (name, content) in enumerate(drawn):
        write_tree(root, {f"{number}-{name}": content})
    index_file = str(folder / "index.db")
    code, out, err = run(capsys, "--index", index_file, "index", "--dry-run", "--json", str(root))
    (plan,) = json.loads(out)  # a file that cannot be read is an error of the plan: exit 1
    assert code == (1 if plan["errors"] else 0), err
    assert all(error["reason"] for error in plan["errors"])
    listed = {file["path"] for file in plan["files"]}
    index = hash_index(index_file)
    try:
        report = index.update([root])
        (result,) = report.as_json()["folders"]
        assert not result["failed"]
        assert all(problem["reason"] for problem in result["problems"])
        hits = [hit.rel for hit in index.search("harbour pilots", mode="bm25")]
        assert hits[:1] == (["good.md"] if "good.md" in listed else [])
    finally:
        index.close()


# MCP tool arguments, through a real client over stdio

PATH = st.sampled_from([
    "ROOT/retry.py", "ROOT/notes/café.md", "ROOT/src", "ROOT/../outside.txt", "ROOT/nope.md",
    "ROOT", "/etc/passwd", "retry.py", "", "ROOT/retry.py\x00",
])  # fmt: skip
FOLDER = st.sampled_from(["proj", "ROOT", "ROOT/src", "nope", "", "/"])
LINE = st.integers(min_value=-1, max_value=6)
# Per tool: its required arguments and its optional ones, with likely values ("ROOT" stands for
# the configured folder); tool_arguments() gives one any JSON value, or adds an unknown one.
TOOL_ARGUMENTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "search": (
        {"query": QUERY},
        {"k": st.integers(-1, 51), "folder": FOLDER, "pathGlob": GLOB},
    ),
    "gather": (
        {"query": QUERY},
        {"k": st.integers(-1, 51), "contextLines": st.integers(-1, 101), "pathGlob": GLOB},
    ),
    "cat_file": ({"filePath": PATH}, {"startLine": LINE, "endLine": LINE}),
    "grep": (
        {"pattern": st.one_of(QUERY, GLOB)},
        {
            "regex": st.booleans(),
            "caseSensitive": st.booleans(),
            "fileGlob": GLOB,
            "maxResults": st.integers(-1, 501),
            "folder": FOLDER,
        },
    ),
    "index": ({}, {"root": st.one_of(FOLDER, PATH), "force": st.booleans(), "maxFiles": LINE}),
    "list_folders": ({}, {}),
}


@st.composite
def tool_arguments(draw: st.DrawFn, tool: str) -> dict[str, Any]:
    """A tool's arguments: likely values, and maybe one argument (or an unknown one) of any
    JSON type."""
    required, optional = TOOL_ARGUMENTS[tool]
    args: dict[str, Any] = draw(st.fixed_dictionaries(required, optional=optional))
    if draw(st.booleans()):
        args[draw(st.sampled_from([*sorted(required), *sorted(optional), "extra"]))] = draw(
            JSON_VALUE
        )
    return args


def as_sent(value: Any, root: Path) -> Any:
    """``value`` with "ROOT" made the folder's path and each lone surrogate U+FFFD (JSON
    cannot carry one; the client refuses to send it)."""
    if isinstance(value, str):
        return re.sub(r"[\ud800-\udfff]", "\ufffd", value.replace("ROOT", str(root)))
    if isinstance(value, list):
        return [as_sent(item, root) for item in value]
    if isinstance(value, dict):
        return {as_sent(key, root): as_sent(item, root) for key, item in value.items()}
    return value


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Client, Path]]:
    """A server with the corpus configured and indexed (by the server's own index tool), and
    the corpus folder."""
    base = tmp_path_factory.mktemp("fuzz-mcp")
    root = write_tree(base / "proj", CORPUS)
    write_tree(base, {"outside.txt": "outside the folders\n"})
    home = base / "home"
    home.mkdir()
    env = {**server_env(home), "SS_MCP_AUTO_INDEX": "0"}
    config = home / ".config" / "semsearch" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"defaultRoots": [str(root)]}), encoding="utf-8")
    client = Client(env, base, base / "server.log")
    assert not client.call("index").is_error
    yield client, root
    client.close()


@pytest.mark.parametrize("tool", sorted(TOOL_ARGUMENTS))
@settings(shared_fixtures, max_examples=max(5, settings.default.max_examples // 10))
@given(data=st.data())
def test_any_mcp_tool_arguments_are_a_result_or_a_plain_error(
    tool: str, data: st.DataObject, mcp_server: tuple[Client, Path]
) -> None:
    client, root = mcp_server
    args = data.draw(tool_arguments(tool), label="arguments")
    result = client.call(tool, as_sent(args, root))
    event("error" if result.is_error else "ok")
    answer = text(result)
    assert "Internal error" not in answer and "Traceback" not in answer
    assert "validation error" not in answer  # pydantic's report, not a plain sentence
    if not result.is_error:
        assert result.structured_content is not None
    assert "outside the folders" not in answer


def test_the_mcp_server_still_answers_after_the_fuzzing(mcp_server: tuple[Client, Path]) -> None:
    client, _ = mcp_server
    found = json.loads(text(client.call("search", {"query": "retry backoff"})))
    assert [hit["relPath"] for hit in found["results"]][:1] == ["retry.py"]
