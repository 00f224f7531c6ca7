"""Settings precedence, validation messages, and add/remove of folders."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from semsearch.config import RootChange, add_roots, load_settings, remove_roots, roots_holding
from semsearch.errors import ConfigError


def write_config(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")
    return path


def test_defaults_use_xdg_locations(isolated_env: Path) -> None:
    settings = load_settings(os.environ)
    assert settings.config_path == isolated_env / ".config" / "semsearch" / "config.json"
    assert settings.index_path == isolated_env / ".local" / "share" / "semsearch" / "index.db"
    assert (settings.roots, settings.top_k, settings.hybrid, settings.rrf_k) == ((), 5, True, 20)
    assert (settings.target_tokens, settings.overlap_tokens, settings.hard_token_limit) == (
        240,
        35,
        254,
    )
    assert (settings.document_target_tokens, settings.document_overlap_tokens) == (200, 20)
    assert not settings.config_exists


def test_home_fallback_without_xdg(isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.delenv("XDG_DATA_HOME")
    settings = load_settings(os.environ)
    assert settings.config_path == isolated_env / ".config" / "semsearch" / "config.json"
    assert settings.index_path == isolated_env / ".local/share/semsearch/index.db"


@pytest.mark.parametrize(
    ("env", "flag", "expected"),
    [
        ({"SS_INDEX_DIR": "/srv/idx"}, None, "/srv/idx/index.db"),
        ({"SS_INDEX_PATH": "/srv/a.db", "SS_INDEX_DIR": "/srv/idx"}, None, "/srv/a.db"),
        ({"SS_INDEX_PATH": "/srv/a.db"}, "/tmp/flag.db", "/tmp/flag.db"),
        ({"XDG_DATA_HOME": "/data"}, None, "/data/semsearch/index.db"),
    ],
)
def test_index_path_precedence(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], flag: str | None, expected: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert load_settings(os.environ, flag).index_path == Path(expected)


def test_config_file_values_and_env_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(
        tmp_path / "c" / "config.json",
        {
            "defaultRoots": ["./docs", "../sibling"],
            "defaultTopK": 9,
            "hybridSearch": False,
            "chunk": {"targetTokens": 150},
            "indexDir": "idx",
            "unknownKey": [1, 2],
        },
    )
    monkeypatch.setenv("SS_CONFIG_PATH", str(config))
    settings = load_settings(os.environ)
    assert settings.roots == (tmp_path / "c" / "docs", tmp_path / "sibling")
    assert (settings.top_k, settings.hybrid, settings.target_tokens) == (9, False, 150)
    assert settings.overlap_tokens == 35
    assert settings.index_path == tmp_path / "c" / "idx" / "index.db"
    assert settings.global_ignore_file == tmp_path / "c" / ".indexignore"
    monkeypatch.setenv("SS_MODEL_DIR", str(tmp_path / "model"))
    assert load_settings(os.environ).model_dir == tmp_path / "model"


def test_a_model_by_name_from_config_or_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment beats the config file, whichever of the two keys each one sets."""
    config = write_config(tmp_path / "config.json", {"model": " bge-small-en-v1.5 "})
    monkeypatch.setenv("SS_CONFIG_PATH", str(config))
    assert (load_settings(os.environ).model, load_settings(os.environ).model_dir) == (
        "bge-small-en-v1.5",
        None,
    )
    monkeypatch.setenv("SS_MODEL_DIR", str(tmp_path / "m"))
    chosen = load_settings(os.environ)
    assert (chosen.model, chosen.model_dir) == (None, tmp_path / "m")
    monkeypatch.setenv("SS_MODEL", "  ")  # blank: not set, as elsewhere
    assert load_settings(os.environ).model_dir == tmp_path / "m"
    monkeypatch.setenv("SS_MODEL", "e5-small")
    with pytest.raises(ConfigError, match="Set SS_MODEL or SS_MODEL_DIR, not both"):
        load_settings(os.environ)
    monkeypatch.delenv("SS_MODEL_DIR")
    write_config(config, {"modelDir": "m"})
    chosen = load_settings(os.environ)
    assert (chosen.model, chosen.model_dir) == ("e5-small", None)
    monkeypatch.delenv("SS_MODEL")
    write_config(config, {})
    assert load_settings(os.environ).model is None  # the index's own model, else the built-in


def test_a_tilde_of_an_unknown_user_stays_as_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a shell leaves `~nosuchuser/x`; found by fuzzing: `"modelDir": "~0"` was a
    RuntimeError traceback (pathlib's expanduser cannot find that user's home)."""
    user = "~semsearch-no-such-user"
    config = write_config(
        tmp_path / "c" / "config.json",
        {"modelDir": "~0", "defaultRoots": [f"{user}/docs"], "indexDir": user},
    )
    monkeypatch.setenv("SS_CONFIG_PATH", str(config))
    settings = load_settings(os.environ)
    assert settings.model_dir == tmp_path / "c" / "~0"
    assert settings.roots == (tmp_path / "c" / user / "docs",)
    assert settings.index_path == tmp_path / "c" / user / "index.db"
    assert load_settings(os.environ, f"{user}/i.db").index_path == Path.cwd() / user / "i.db"


def test_chunk_sizes_per_kind_and_defaults_that_fit_a_lower_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunk = {"targetTokens": 120, "overlapTokens": 10, "documentTargetTokens": 90}
    monkeypatch.setenv("SS_CONFIG_PATH", str(write_config(tmp_path / "a.json", {"chunk": chunk})))
    settings = load_settings(os.environ)
    assert (settings.target_tokens, settings.overlap_tokens) == (120, 10)
    assert (settings.document_target_tokens, settings.document_overlap_tokens) == (90, 20)
    # only the limit set: the defaults shrink under it instead of failing
    limited = write_config(tmp_path / "b.json", {"chunk": {"hardTokenLimit": 30}})
    monkeypatch.setenv("SS_CONFIG_PATH", str(limited))
    settings = load_settings(os.environ)
    assert (settings.target_tokens, settings.overlap_tokens) == (30, 29)
    assert (settings.document_target_tokens, settings.document_overlap_tokens) == (30, 20)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"defaultTopK": 5,\n  "hybridSearch": tru}', ":2:19: invalid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ({"defaultTopK": "five"}, "`defaultTopK` must be an integer"),
        ({"defaultTopK": 0}, "`defaultTopK` must be between 1 and 1000"),
        ({"defaultTopK": True}, "`defaultTopK` must be an integer"),
        ({"hybridSearch": "yes"}, "`hybridSearch` must be true/false"),
        ({"mcpAutoIndex": 1}, "`mcpAutoIndex` must be true/false"),
        ({"defaultRoots": "/srv"}, "`defaultRoots` must be a list of strings"),
        ({"defaultRoots": [1]}, "`defaultRoots` must be a list of strings"),
        ({"chunk": {"hardTokenLimit": 300}}, "`chunk.hardTokenLimit` must be between 16 and 254"),
        ({"chunk": {"overlapTokens": 240}}, "`chunk.overlapTokens` must be between 0 and 239"),
        (
            {"chunk": {"documentOverlapTokens": -1}},
            "`chunk.documentOverlapTokens` must be between 0 and 199",
        ),
        (
            {"chunk": {"documentTargetTokens": 255}},
            "`chunk.documentTargetTokens` must be between 8 and 254",
        ),
        (
            {"chunk": {"documentTargetTokens": 100, "documentOverlapTokens": 100}},
            "`chunk.documentOverlapTokens` must be between 0 and 99",
        ),
        (
            {"chunk": {"hardTokenLimit": 100, "targetTokens": 150}},
            "`chunk.targetTokens` must be between 8 and 100",
        ),
        ({"maxFileSizeBytes": -1}, "`maxFileSizeBytes` must be >= 1"),
        ({"storeBackend": 5}, "`storeBackend` must be text, got 5."),
        ({"indexKinds": "venv"}, '`indexKinds` must be a list of strings, got "venv".'),
        ({"chunk": [200]}, "`chunk` must be an object, got [200]."),
        ({"ignoreFile": None}, "`ignoreFile` must be a file name, got null."),
        ({"modelDir": ["a"]}, '`modelDir` must be a folder path, got ["a"].'),
        ({"storeBackend": "postgres"}, "Unknown store backend 'postgres'"),
        # found by fuzzing: a NUL in a path was a ValueError traceback from the first OS call
        (
            {"ignoreFile": "a\x00b"},
            '`ignoreFile` must be a file name without a NUL character, got "a\\u0000b".',
        ),
        (
            {"defaultRoots": ["/srv", "\x00"]},
            '`defaultRoots` must be a list of folder paths without a NUL character, got "\\u0000".',
        ),
        ({"defaultRoot": "/a\x00"}, "`defaultRoot` must be a string without a NUL character"),
        ({"indexDir": "\x00idx"}, "`indexDir` must be a folder path without a NUL character"),
        ({"modelDir": "m\x00"}, "`modelDir` must be a folder path without a NUL character"),
        ({"model": 3}, "`model` must be text, got 3."),
        ({"model": "  "}, "`model` is empty; give a model's name or leave it out."),
        ({"model": "bge", "modelDir": "m"}, "set `model` or `modelDir`, not both."),
    ],
)
def test_bad_config_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: object, message: str
) -> None:
    config = write_config(tmp_path / "config.json", content)
    monkeypatch.setenv("SS_CONFIG_PATH", str(config))
    with pytest.raises(ConfigError) as caught:
        load_settings(os.environ)
    assert message in str(caught.value)
    assert str(config) in str(caught.value)


def test_unknown_keys_are_warnings_naming_the_nearest_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(
        tmp_path / "config.json",
        {
            "defaultTopk": 3,
            "defaultTopK": 4,
            "HybridSearch": False,
            "chunk": {"targetToken": 100, "overlapTokens": 20},
            "colour": "blue",
        },
    )
    monkeypatch.setenv("SS_CONFIG_PATH", str(config))
    settings = load_settings(os.environ)
    assert settings.warnings == (
        f"{config}: unknown key `defaultTopk` is ignored; did you mean `defaultTopK`?",
        f"{config}: unknown key `HybridSearch` is ignored; did you mean `hybridSearch`?",
        f"{config}: unknown key `colour` is ignored; see the README's config table",
        f"{config}: unknown key `chunk.targetToken` is ignored; did you mean `chunk.targetTokens`?",
    )
    assert (settings.top_k, settings.hybrid, settings.target_tokens) == (4, True, 240)
    write_config(config, {"defaultTopK": 4, "chunk": {"overlapTokens": 20}})
    assert load_settings(os.environ).warnings == ()


def test_add_stores_real_paths_once_and_keeps_other_keys(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.json", {"defaultTopK": 9, "defaultRoot": "/legacy"})
    (tmp_path / "a").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a")
    (tmp_path / "file.txt").write_text("x")
    change = add_roots(config, ["a", "link", "a", "file.txt", "missing"], tmp_path)
    assert change.changed == (tmp_path / "a",)
    assert change.unchanged == (tmp_path / "a", tmp_path / "a")
    assert change.rejected == (
        ("file.txt", "is a file, not a folder: add the folder that holds it"),
        ("missing", "does not exist"),
    )
    assert change.links == (("link", tmp_path / "a"),)
    data = json.loads(config.read_text())
    assert data == {"defaultTopK": 9, "defaultRoots": ["/legacy", str(tmp_path / "a")]}


def test_remove_takes_resolved_folders_and_compares_real_paths(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    for folder in ("x/src", "y/src", "docs"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "docs")
    add_roots(config, ["x/src", "y/src", "docs"], tmp_path)
    change = remove_roots(config, [tmp_path / "link", tmp_path / "nope"])
    src = (tmp_path / "x" / "src", tmp_path / "y" / "src")
    assert change == RootChange((tmp_path / "docs",), (tmp_path / "nope",), (), src)
    assert json.loads(config.read_text())["defaultRoots"] == [str(path) for path in src]
    change = remove_roots(config, [tmp_path / "y/src"])
    assert change.changed == (tmp_path / "y" / "src",)
    assert json.loads(config.read_text())["defaultRoots"] == [str(tmp_path / "x" / "src")]
    before = config.read_text()
    assert remove_roots(config, [tmp_path / "y/src"]).changed == ()
    assert config.read_text() == before


def test_roots_holding_compares_real_paths_innermost_first(tmp_path: Path) -> None:
    data, private, inner = tmp_path / "data", tmp_path / "data-private", tmp_path / "data" / "sub"
    for folder in (data, private, inner):
        folder.mkdir(parents=True, exist_ok=True)
    (data / "escape").symlink_to(private)
    roots = [data, inner]
    assert roots_holding(roots, inner / "x.txt") == [inner, data]
    assert roots_holding(roots, data) == [data]
    assert roots_holding(roots, private / "secret.txt") == []
    assert roots_holding(roots, data / "escape" / "secret.txt") == []
    assert roots_holding(roots, f"{data}/sub/../../data-private/secret.txt") == []


@pytest.mark.parametrize(
    ("config", "env", "expected"),
    [
        ({}, None, True),
        ({"mcpAutoIndex": False}, None, False),
        ({"mcpAutoIndex": False}, "1", True),
        ({}, "0", False),
        ({}, "false", False),
        ({}, "no", False),
    ],
)
def test_mcp_auto_index_from_config_and_env(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    config: dict[str, Any],
    env: str | None,
    expected: bool,
) -> None:
    monkeypatch.setenv("SS_CONFIG_PATH", str(write_config(tmp_path / "config.json", config)))
    if env is not None:
        monkeypatch.setenv("SS_MCP_AUTO_INDEX", env)
    assert load_settings(os.environ).auto_index is expected
