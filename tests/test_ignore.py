"""Tests for files/ignore.py: layered patterns, name checks and size caps, without the disk."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Literal

import pytest

from semsearch.cli.commands import main
from semsearch.config import load_settings
from semsearch.errors import ConfigError
from semsearch.files.gitignore import PatternList
from semsearch.files.ignore import (
    DEFAULT_SETTINGS,
    SECRET_PATTERNS,
    SECRET_TEMPLATES,
    IgnoreRules,
    IgnoreSettings,
    secret_pattern,
    secret_reason,
    size_cap,
    too_large_reason,
)
from semsearch.index import ignore_settings

GLOBAL_FILE = Path("/config/semsearch/ignore")  # only named in reasons, never read here
SETTINGS = IgnoreSettings(global_ignore_file=GLOBAL_FILE)
GLOBAL_LINES = ["*.secret"]
ROOT_LINES = ["!keep.secret", "!build/", "drafts/"]


@pytest.mark.parametrize(
    ("mode", "rel", "expected"),
    [
        ("walk", "node_modules/", "ignored by default pattern"),
        ("git", "node_modules/", None),  # git decides; the walk defaults are not applied
        ("walk", "src/app.py", None),
        ("walk", "a.secret", f"ignored by {GLOBAL_FILE}"),
        ("git", "a.secret", f"ignored by {GLOBAL_FILE}"),
        ("walk", "keep.secret", None),  # the root's file re-includes what the global one left out
        ("walk", "build/", None),  # ... and what a default pattern left out
        ("walk", "drafts/", "ignored by .indexignore"),
        ("git", "drafts/x.md", "ignored by .indexignore"),
        ("walk", "drafts/x.md", None),  # the walk prunes drafts/ itself, never its files
        ("walk", "logo.PNG", "binary extension"),
        ("walk", "icons.png/", None),  # extensions are checked on files only
        ("walk", "bad\udcff.md", None),  # a name that is not UTF-8 is a name like any other
    ],
)
def test_rules_layer_defaults_global_and_root_patterns(
    mode: Literal["git", "walk"], rel: str, expected: str | None
) -> None:
    rules = IgnoreRules.build(SETTINGS, mode, GLOBAL_LINES, ROOT_LINES)
    assert rules.reason(rel) == expected


def test_rules_without_a_global_file() -> None:
    rules = IgnoreRules.build(DEFAULT_SETTINGS, "git", None, ["*.log"])
    assert (rules.reason("a.secret"), rules.reason("x.log")) == (None, "ignored by .indexignore")


def test_git_mode_cannot_reinclude_a_file_of_an_excluded_folder() -> None:
    """git lists files only; a folder the ignore file excludes still keeps all of them out."""
    rules = IgnoreRules.build(DEFAULT_SETTINGS, "git", None, ["build/", "!build/keep.txt"])
    assert rules.reason("build/keep.txt") == "ignored by .indexignore"
    assert rules.reason("src/build") is None  # a file named build


def test_size_cap_is_larger_for_documents() -> None:
    settings = IgnoreSettings(max_file_size=10, max_document_size=100)
    assert [size_cap(rel, settings) for rel in ("a.txt", "b.PDF", "c.docx")] == [10, 100, 100]
    assert (size_cap("a.txt"), size_cap("b.pdf")) == (500_000, 50_000_000)
    # the listing's one look at the name gives the same caps
    rules = IgnoreRules.build(settings, "walk", None, [])
    assert rules.size_and_kind("b.PDF", 50) == (None, False)
    assert rules.size_and_kind("c.docx", 101) == ("too large (101 bytes > 100)", False)
    assert rules.size_and_kind("a.txt", 50) == ("too large (50 bytes > 10)", False)


def test_too_large_reason_uses_thousands_separators() -> None:
    assert too_large_reason(612_000, 500_000) == "too large (612,000 bytes > 500,000)"


@pytest.mark.parametrize(
    ("rel", "expected"),
    [
        (".env", ".env"),
        ("app/.env.local", ".env.*"),
        ("app/.ENV", ".env"),
        (".env.example", None),  # committed templates are not secret (README: What gets indexed)
        ("web/.env.sample", None),
        (".env/bin/activate", None),  # a virtualenv named .env: only the name .env is secret
        ("env.md", None),
        ("certs/server.PEM", "*.pem"),
        ("tls/site.key", "*.key"),
        ("ssh/id_rsa", "id_rsa*"),
        ("ssh/id_ecdsa.pub", "id_ecdsa*"),
        ("store.p12", "*.p12"),
        (".netrc", ".netrc"),
        ("home/.pypirc", ".pypirc"),
        ("home/.aws/credentials", ".aws/credentials"),
        ("credentials", None),
        ("aws/credentials", None),
        (".docker/config.json", ".docker/config.json"),
        ("config.json", None),
        ("home/.kube/config", ".kube/config"),
        ("src/config", None),
        (
            ".config/gcloud/application_default_credentials.json",
            "application_default_credentials.json",
        ),
        (".config/gcloud/credentials.db", "gcloud/credentials.db"),
        (".git-credentials", ".git-credentials"),
        ("infra/terraform.tfstate", "*.tfstate"),
    ],
)
def test_secret_pattern(rel: str, expected: str | None) -> None:
    assert secret_pattern(rel) == expected


_ALL_SECRETS = PatternList.parse(
    [pattern if "/" not in pattern else "**/" + pattern for pattern in SECRET_PATTERNS],
    ignore_case=True,
)
_SECRET_PIECES = sorted(
    {re.sub(r"[*?]", "x", part) for pattern in SECRET_PATTERNS for part in pattern.split("/")}
    | {"src", "K", "\u212a", "İ", "\udcff"}  # the Kelvin sign, a dotted I, a raw byte
)


@pytest.mark.parametrize("end", sorted({*SECRET_PATTERNS, *SECRET_TEMPLATES, *_SECRET_PIECES}))
def test_secret_pattern_matches_the_whole_list_on_any_path(end: str) -> None:
    """secret_pattern matches the whole path only when the file's name ends a pattern with a
    "/": the answer is the one of matching every pattern against the path, always."""
    folders = ([], ["src"], ["gh"], [".aws", "x"], ["home", ".kube"], ["\udcff", "gcloud"])
    for before, suffix, upper in itertools.product(folders, ("", "x", ".bak"), (False, True)):
        rel = "/".join([*before, re.sub(r"[*?]", "x", end) + suffix])
        rel = rel.upper() if upper else rel
        assert secret_pattern(rel) == _secret_by_the_whole_list(rel), rel


def _secret_by_the_whole_list(rel: str) -> str | None:
    found = _ALL_SECRETS.last_match(rel)
    name = rel.rsplit("/", 1)[-1].lower()
    return None if found is None or name in SECRET_TEMPLATES else SECRET_PATTERNS[found.line]


def test_secret_reason_and_its_opt_in() -> None:
    settings = IgnoreSettings(allow_secret_patterns=(".env.test", "/fixtures/*.pem"))
    assert secret_reason(".env") == "secret file (matches .env)"
    assert secret_reason(".env.test", settings) is None
    assert secret_reason("fixtures/a.pem", settings) is None
    assert secret_reason("src/fixtures/a.pem", settings) == "secret file (matches *.pem)"
    assert secret_reason("README.md", settings) is None


@pytest.mark.parametrize("mode", ["git", "walk"])
def test_secrets_beat_negations_and_binary_extensions(mode: Literal["git", "walk"]) -> None:
    rules = IgnoreRules.build(DEFAULT_SETTINGS, mode, ["!.env"], ["!*.pem"])
    assert rules.reason(".env") == "secret file (matches .env)"
    assert rules.reason("a/b.pem") == "secret file (matches *.pem)"
    assert rules.reason("store.p12") == "secret file (matches *.p12)"
    assert rules.reason(".env/") is None  # directories are never secret by name


def test_size_and_kind_and_index_kinds() -> None:
    rules = IgnoreRules.build(DEFAULT_SETTINGS, "git", None, [])
    opted = IgnoreRules.build(
        IgnoreSettings(index_kinds=frozenset({"data", "minified"})), "git", None, []
    )
    assert rules.size_and_kind("rows.csv", 10) == ("data file (*.csv)", False)
    assert opted.size_and_kind("rows.csv", 10) == (None, False)
    assert opted.size_and_kind("yarn.lock", 10) == ("lockfile", False)
    assert rules.size_and_kind("a.min.js", 10) == ("minified (*.min.js)", False)
    assert (rules.size_and_kind("a.JS", 10), rules.size_and_kind("a.py", 10)) == (
        (None, True),
        (None, False),
    )
    assert opted.size_and_kind("a.js", 10) == (None, False)  # minified code opted in: no sniff
    assert rules.size_and_kind("big.py", 500_001) == ("too large (500,001 bytes > 500,000)", False)
    assert rules.size_and_kind("big.PDF", 500_001) == (None, False)  # documents: the larger cap
    assert rules.size_and_kind("big.pdf", 50_000_001)[0] == (
        "too large (50,000,001 bytes > 50,000,000)"
    )


def test_config_keys_reach_the_ignore_settings(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({"allowSecretPatterns": [".env.test"], "indexKinds": ["lockfile", "data"]})
    )
    ignore = ignore_settings(load_settings({"SS_CONFIG_PATH": str(config), "HOME": str(tmp_path)}))
    assert ignore.allow_secret_patterns == (".env.test",)
    assert ignore.index_kinds == frozenset({"lockfile", "data"})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"allowSecretPatterns": ".env"}, "`allowSecretPatterns` must be a list of strings"),
        ({"allowSecretPatterns": [1]}, "`allowSecretPatterns` must be a list of strings"),
        ({"allowSecretPatterns": [" "]}, "`allowSecretPatterns` must not hold empty patterns"),
        ({"indexKinds": "lockfile"}, "`indexKinds` must be a list of strings"),
        ({"indexKinds": ["lockfiles"]}, "unknown kind 'lockfiles' in `indexKinds`. Use any of: "),
    ],
)
def test_config_keys_are_validated(tmp_path: Path, data: dict[str, object], message: str) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings({"SS_CONFIG_PATH": str(config), "HOME": str(tmp_path)})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"allow_secret_patterns": ("!",)}, "Invalid pattern in `allowSecretPatterns`: "),
        ({"index_kinds": frozenset({"fonts"})}, "Unknown kind 'fonts' in `indexKinds`."),
    ],
)
def test_ignore_settings_reject_bad_opt_ins(values: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        IgnoreSettings(**values)  # type: ignore[arg-type]


def test_a_bad_allow_pattern_is_one_cli_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"allowSecretPatterns": ["\\"]}))
    monkeypatch.setenv("SS_CONFIG_PATH", str(config))
    assert main(["index", "--dry-run", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "Invalid pattern in `allowSecretPatterns`" in err
    assert "Traceback" not in err
