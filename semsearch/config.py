"""Settings: defaults < config file < environment < command-line flags, built once, frozen.

The config file is JSON (``~/.config/semsearch/config.json`` by default). Every key is optional;
unknown keys are kept when ``add``/``remove`` rewrite the file and otherwise ignored, each with a
warning in :attr:`Settings.warnings` naming the nearest known key. A malformed file or a value of
the wrong type raises :class:`ConfigError` naming the path and the key (and line/column for JSON
syntax errors).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

from semsearch.errors import ConfigError, UsageError

CONFIG_NAME = "config.json"
INDEX_NAME = "index.db"
APP_DIR = "semsearch"
SERVE_TOKEN_NAME = "serve-token"  # `semsearch serve`'s token file, in the state folder
LANCEDB_DIR = "lancedb"  # the LanceDB backend's folder, beside the SQLite file
BACKENDS = ("sqlite", "lancedb")
MODEL_VARIANTS = (
    "auto",
    "fp32",
    "int8",
)  # builds of the default model (see semsearch.model.embedder)
LANCEDB_MISSING = (
    "The LanceDB store backend (SS_STORE_BACKEND or storeBackend) needs the lancedb extra, "
    'which is not installed. Install it with: pip install "semsearch[lancedb]"'
)
REMOTE_SCHEMES = ("s3", "gs", "az")  # object stores LanceDB opens: S3 (and compatibles), GCS, Azure
# The standard AWS variables as LanceDB's storage options, in the order of precedence (the first
# set wins); GCS and Azure clients read their own variables.
AWS_ENVIRONMENT = (
    ("AWS_ENDPOINT_URL", "aws_endpoint"),
    ("AWS_ACCESS_KEY_ID", "aws_access_key_id"),
    ("AWS_SECRET_ACCESS_KEY", "aws_secret_access_key"),
    ("AWS_SESSION_TOKEN", "aws_session_token"),
    ("AWS_REGION", "aws_region"),
    ("AWS_DEFAULT_REGION", "aws_region"),
    ("AWS_ALLOW_HTTP", "allow_http"),
)
Mode = Literal["hybrid", "vector", "bm25"]
MODES: tuple[Mode, ...] = ("hybrid", "vector", "bm25")  # search modes (ranking arms)
DEFAULT_TOP_K = 5  # results per search
DEFAULT_SERVE_PORT = 8700  # `semsearch serve`'s TCP port on 127.0.0.1
RRF_K = 20  # Reciprocal Rank Fusion's constant: 20 beat the paper's 60 on SciFact and on code
MODEL_WINDOW = 256  # tokens per input of the built-in model (all-MiniLM-L6-v2's positions)
HARD_TOKEN_LIMIT = MODEL_WINDOW - 2  # a chunk's most tokens: [CLS] and [SEP] wrap each input
# Chunk sizes in model tokens. Code: 240 (200 cost the code sets 0.002 for 18 % more chunks) and
# an overlap of 35. Documents (filetype.is_prose): 200, the size SciFact was tuned at, and an
# overlap of 20 (SciFact +0.004 for 3.7 % fewer tokens, where code lost 0.002).
TARGET_TOKENS = 240
OVERLAP_TOKENS = 35
DOCUMENT_TARGET_TOKENS = 200
DOCUMENT_OVERLAP_TOKENS = 20
DEFAULT_MAX_FILE_SIZE = 500_000  # bytes: larger text files are skipped, extracted text is capped
DEFAULT_IGNORE_FILE = ".indexignore"
SKIPPED_KINDS = ("lockfile", "minified", "sourcemap", "data", "venv")
"""Kinds of text file left out of the index unless named in ``indexKinds``
(:func:`semsearch.files.filetype.skipped_kind`; "venv": the folders below the root that hold a
``pyvenv.cfg``, :mod:`semsearch.files.listing`)."""


class RemoteLocation(NamedTuple):
    """A LanceDB index on object storage: its URI (``s3://bucket/prefix``, ``gs://``, ``az://``)
    and the storage options LanceDB gets (endpoint, region, credentials).

    Printed, it is its URI; its ``repr`` leaves the options out, so that no secret reaches a
    message or a log. ``cache`` is where readers keep copies of what they read whole
    (:mod:`semsearch.store.lance.cache`), None for none (``SS_REMOTE_CACHE``): not part of the
    URI a server or a copy is known by (``str``, ``lance.cache.uri_key``).
    """

    uri: str
    options: tuple[tuple[str, str], ...] = ()
    cache: Path | None = None

    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:
        return f"RemoteLocation(uri={self.uri!r})"

    @property
    def scheme(self) -> str:
        """``s3``, ``gs`` or ``az``."""
        return self.uri.split("://", 1)[0]

    @property
    def bucket(self) -> str:
        """The bucket (or container)."""
        return self.uri.split("://", 1)[1].split("/", 1)[0]

    @property
    def prefix(self) -> str:
        """The key prefix of the index's objects inside the bucket, without a slash at the end
        ("" at the bucket's root)."""
        rest = self.uri.split("://", 1)[1]
        return rest.split("/", 1)[1] if "/" in rest else ""

    @property
    def storage_options(self) -> dict[str, str]:
        """The options as LanceDB's ``storage_options``."""
        return dict(self.options)

    @property
    def endpoint(self) -> str | None:
        """The S3 endpoint when one is set (a server other than AWS), else None."""
        return self.storage_options.get("aws_endpoint")


Location = Path | RemoteLocation  # where an index lives: a local path, or an object-store URI


def is_remote_uri(text: str) -> bool:
    """Whether ``text`` is meant to name an object store (``s3://``, ``gs://``, ``az://``), not
    a path: a mistyped ``s3:/bucket`` too, which :func:`remote_location` then refuses, where
    a local folder ``./s3:/bucket`` would have been indexed without a word."""
    scheme, found, _ = text.partition(":")
    return bool(found) and scheme.lower() in REMOTE_SCHEMES


class Settings(NamedTuple):
    """Everything a command needs, resolved once.

    The records the CLI reads on its way to a running server (this, :class:`RemoteLocation`,
    :class:`RootChange`, the server's record and its answers) are named tuples, not dataclasses:
    importing :mod:`dataclasses` (and :mod:`inspect` with it) and building the classes took
    ~10 ms of a ~70 ms search through a server (bench/RESULTS.md, issue 37).
    """

    config_path: Path
    config_exists: bool
    index_path: Location  # the index file, or the URI of a LanceDB index on object storage
    roots: tuple[Path, ...] = ()
    target_tokens: int = TARGET_TOKENS
    overlap_tokens: int = OVERLAP_TOKENS
    document_target_tokens: int = DOCUMENT_TARGET_TOKENS
    document_overlap_tokens: int = DOCUMENT_OVERLAP_TOKENS
    hard_token_limit: int = HARD_TOKEN_LIMIT
    top_k: int = DEFAULT_TOP_K
    hybrid: bool = True
    rrf_k: int = RRF_K
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    binary_extensions: frozenset[str] | None = None
    ignore_patterns: tuple[str, ...] | None = None
    ignore_file: str = DEFAULT_IGNORE_FILE
    model_dir: Path | None = None
    model: str | None = None  # a model's name (semsearch.model.catalog); None: the index's own
    model_variant: str = "auto"
    store_backend: str = "sqlite"
    allow_secret_patterns: tuple[str, ...] = ()
    index_kinds: frozenset[str] = frozenset()
    auto_index: bool = True  # the MCP server updates the index before search and gather
    warnings: tuple[str, ...] = ()  # about the config file (unknown keys), for the user to see
    serve_token: str | None = None  # SS_SERVE_TOKEN: `serve`'s token (left out of the repr)
    state_dir: Path | None = None  # $XDG_STATE_HOME/semsearch: `serve`'s token file
    runtime_dir: Path | None = None  # $XDG_RUNTIME_DIR/semsearch: a running server's record

    def __repr__(self) -> str:  # without the token: a repr may reach a message or a log
        shown = ", ".join(
            f"{name}={value!r}" for name, value in self._asdict().items() if name != "serve_token"
        )
        return f"Settings({shown})"

    @property
    def default_mode(self) -> Mode:
        """The search mode when none is asked for: ``hybridSearch`` picks hybrid or vector."""
        return "hybrid" if self.hybrid else "vector"

    @property
    def store_path(self) -> Location:
        """Where the index lives: the SQLite file, the LanceDB folder beside it, or the object
        store's URI (the LanceDB tables sit right under it)."""
        if isinstance(self.index_path, RemoteLocation):
            return self.index_path
        if self.store_backend == "lancedb":
            return self.index_path.parent / LANCEDB_DIR
        return self.index_path

    @property
    def serve_token_file(self) -> Path:
        """Where ``semsearch serve`` keeps the token it made (mode 0600), when
        ``SS_SERVE_TOKEN`` is not set."""
        return (self.state_dir or self.config_path.parent) / SERVE_TOKEN_NAME

    @property
    def server_dir(self) -> Path:
        """Where a running ``semsearch serve`` leaves its record: the runtime folder (emptied at
        logout), else the state folder."""
        return self.runtime_dir or self.state_dir or self.config_path.parent

    @property
    def is_remote(self) -> bool:
        """Whether the index is on object storage (a :class:`RemoteLocation`)."""
        return isinstance(self.index_path, RemoteLocation)

    @property
    def global_ignore_file(self) -> Path:
        """The ``.indexignore`` next to the config file, applied to every folder."""
        return self.config_path.parent / self.ignore_file


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or os.path.expanduser("~"))


def _xdg(env: Mapping[str, str], var: str, fallback: str) -> Path:
    value = env.get(var)
    return Path(value) if value else _home(env) / fallback


def default_config_path(env: Mapping[str, str]) -> Path:
    """``$SS_CONFIG_PATH``, else ``$XDG_CONFIG_HOME/semsearch/config.json``."""
    if env.get("SS_CONFIG_PATH"):
        return Path(os.path.expanduser(env["SS_CONFIG_PATH"]))
    return _xdg(env, "XDG_CONFIG_HOME", ".config") / APP_DIR / CONFIG_NAME


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse the config file; a missing file is an empty config."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"Cannot read config file {path}: {exc}") from exc
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}:{exc.lineno}:{exc.colno}: invalid JSON ({exc.msg}). "
            "Fix the file or delete it to start from defaults."
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the config must be a JSON object, not {type(data).__name__}.")
    return data


def write_config_file(path: Path, data: Mapping[str, Any]) -> None:
    """Write the config atomically (temp file + rename), creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _expect(path: Path, key: str, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if isinstance(value, bool) and kind is int:
        raise ConfigError(f"{path}: `{key}` must be {what}, got {json.dumps(value)}.")
    if not isinstance(value, kind):
        raise ConfigError(f"{path}: `{key}` must be {what}, got {json.dumps(value)}.")
    return value


def _path_text(path: Path, key: str, value: Any, what: str) -> str:
    """A path from the config: text, and without a NUL (no file name holds one; the OS calls
    would raise ValueError)."""
    text: str = _expect(path, key, value, str, what)
    if "\x00" in text:
        raise ConfigError(
            f"{path}: `{key}` must be {what} without a NUL character, got {json.dumps(text)}."
        )
    return text


def _positive_int(path: Path, key: str, value: Any, low: int = 1, high: int | None = None) -> int:
    number: int = _expect(path, key, value, int, "an integer")
    if number < low or (high is not None and number > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ConfigError(f"{path}: `{key}` must be {bound}, got {number}.")
    return number


def _string_list(path: Path, key: str, value: Any) -> tuple[str, ...]:
    items = _expect(path, key, value, list, "a list of strings")
    if not all(isinstance(item, str) for item in items):
        raise ConfigError(f"{path}: `{key}` must be a list of strings.")
    return tuple(items)


def _patterns(path: Path, key: str, data: Mapping[str, Any]) -> tuple[str, ...]:
    patterns = _string_list(path, key, data[key])
    if not all(pattern.strip() for pattern in patterns):
        raise ConfigError(f"{path}: `{key}` must not hold empty patterns.")
    return patterns


def _kinds(path: Path, value: Any) -> frozenset[str]:
    kinds = _string_list(path, "indexKinds", value)
    unknown = [kind for kind in kinds if kind not in SKIPPED_KINDS]
    if unknown:
        raise ConfigError(
            f"{path}: unknown kind {unknown[0]!r} in `indexKinds`. "
            f"Use any of: {', '.join(SKIPPED_KINDS)}."
        )
    return frozenset(kinds)


def config_roots(path: Path, data: Mapping[str, Any]) -> list[Path]:
    """The configured folders; relative entries resolve against the config file's folder."""
    roots = list(_string_list(path, "defaultRoots", data.get("defaultRoots", [])))
    for entry in roots:
        _path_text(path, "defaultRoots", entry, "a list of folder paths")
    legacy = data.get("defaultRoot")
    if legacy is not None:
        roots.insert(0, _path_text(path, "defaultRoot", legacy, "a string"))
    resolved: list[Path] = []
    for entry in roots:
        root = Path(os.path.realpath(path.parent / os.path.expanduser(entry)))
        if root not in resolved:
            resolved.append(root)
    return resolved


CHUNK_KEYS = (
    "targetTokens",
    "overlapTokens",
    "documentTargetTokens",
    "documentOverlapTokens",
    "hardTokenLimit",
)
CONFIG_KEYS = (
    "defaultRoots",
    "defaultRoot",
    "chunk",
    "defaultTopK",
    "hybridSearch",
    "rrfK",
    "maxFileSizeBytes",
    "binaryExtensions",
    "defaultIgnorePatterns",
    "ignoreFile",
    "allowSecretPatterns",
    "indexKinds",
    "indexDir",
    "model",
    "modelDir",
    "modelVariant",
    "storeBackend",
    "storageOptions",
    "mcpAutoIndex",
)
"""The keys of the config file (``chunk`` holds :data:`CHUNK_KEYS`); any other is ignored with a
warning."""


def unknown_keys(path: Path, data: Mapping[str, Any]) -> list[str]:
    """A warning for each key of the config file semsearch does not know, naming the nearest
    known key (a typo is the usual cause)."""
    found: list[tuple[str, str, Sequence[str]]] = [
        (key, key, CONFIG_KEYS) for key in data if key not in CONFIG_KEYS
    ]
    chunk = data.get("chunk")
    if isinstance(chunk, dict):
        found += [(f"chunk.{key}", key, CHUNK_KEYS) for key in chunk if key not in CHUNK_KEYS]
    warnings = []
    for shown, key, known in found:
        nearest = _nearest(key, known)
        prefix = "chunk." if shown != key else ""
        hint = f"did you mean `{prefix}{nearest}`?" if nearest else "see the README's config table"
        warnings.append(f"{path}: unknown key `{shown}` is ignored; {hint}")
    return warnings


def _nearest(key: str, known: Sequence[str]) -> str | None:
    """The known key closest to ``key`` (compared without case), if any is close."""
    folded = {name.lower(): name for name in known}
    import difflib  # here, not at the top: only a config file with an unknown key needs it

    close = difflib.get_close_matches(key.lower(), list(folded), n=1, cutoff=0.6)
    return folded[close[0]] if close else None


def _chunk_settings(path: Path, data: Mapping[str, Any]) -> dict[str, int]:
    """Code and document chunk sizes; a default never exceeds the limits set beside it."""
    chunk = _expect(path, "chunk", data.get("chunk", {}), dict, "an object")
    most = HARD_TOKEN_LIMIT
    hard = _positive_int(path, "chunk.hardTokenLimit", chunk.get("hardTokenLimit", most), 16, most)

    def sizes(keys: tuple[str, str], target: int, overlap: int) -> tuple[int, int]:
        """One kind's target and overlap: config keys ``keys``, their defaults after them."""
        target = _positive_int(
            path, f"chunk.{keys[0]}", chunk.get(keys[0], min(target, hard)), 8, hard
        )
        top = target - 1
        overlap = _positive_int(
            path, f"chunk.{keys[1]}", chunk.get(keys[1], min(overlap, top)), 0, top
        )
        return target, overlap

    target, overlap = sizes(
        ("targetTokens", "overlapTokens"),
        TARGET_TOKENS,
        OVERLAP_TOKENS,
    )
    document_target, document = sizes(
        ("documentTargetTokens", "documentOverlapTokens"),
        DOCUMENT_TARGET_TOKENS,
        DOCUMENT_OVERLAP_TOKENS,
    )
    return {
        "target_tokens": target,
        "overlap_tokens": overlap,
        "document_target_tokens": document_target,
        "document_overlap_tokens": document,
        "hard_token_limit": hard,
    }


def _file_settings(path: Path, data: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if "defaultTopK" in data:
        values["top_k"] = _positive_int(path, "defaultTopK", data["defaultTopK"], 1, 1000)
    if "hybridSearch" in data:
        values["hybrid"] = _expect(path, "hybridSearch", data["hybridSearch"], bool, "true/false")
    if "rrfK" in data:
        values["rrf_k"] = _positive_int(path, "rrfK", data["rrfK"], 1, 10_000)
    if "maxFileSizeBytes" in data:
        values["max_file_size"] = _positive_int(path, "maxFileSizeBytes", data["maxFileSizeBytes"])
    if "binaryExtensions" in data:
        extensions = _string_list(path, "binaryExtensions", data["binaryExtensions"])
        values["binary_extensions"] = frozenset(ext.lower() for ext in extensions)
    if "defaultIgnorePatterns" in data:
        values["ignore_patterns"] = _string_list(
            path, "defaultIgnorePatterns", data["defaultIgnorePatterns"]
        )
    if "ignoreFile" in data:
        values["ignore_file"] = _path_text(path, "ignoreFile", data["ignoreFile"], "a file name")
    if "allowSecretPatterns" in data:
        values["allow_secret_patterns"] = _patterns(path, "allowSecretPatterns", data)
    if "indexKinds" in data:
        values["index_kinds"] = _kinds(path, data["indexKinds"])
    if "modelDir" in data:
        model_dir = _path_text(path, "modelDir", data["modelDir"], "a folder path")
        values["model_dir"] = path.parent / os.path.expanduser(model_dir)
    if "storeBackend" in data:
        values["store_backend"] = _expect(path, "storeBackend", data["storeBackend"], str, "text")
    if "mcpAutoIndex" in data:
        values["auto_index"] = _expect(
            path, "mcpAutoIndex", data["mcpAutoIndex"], bool, "true/false"
        )
    if "modelVariant" in data:
        values["model_variant"] = _expect(path, "modelVariant", data["modelVariant"], str, "text")
    if "model" in data:
        name = _expect(path, "model", data["model"], str, "text")
        if not name.strip():
            raise ConfigError(f"{path}: `model` is empty; give a model's name or leave it out.")
        if "modelDir" in data:
            raise ConfigError(f"{path}: set `model` or `modelDir`, not both.")
        values["model"] = name.strip()
    return values


def _index_path(
    env: Mapping[str, str],
    data: Mapping[str, Any],
    config_path: Path,
    flag: str | os.PathLike[str] | None,
) -> Path | str:
    """The index file, or an object-store URI as given (never made a path)."""
    if flag:  # os.path's expanduser leaves "~nosuchuser" as typed, as a shell does (Path's raises)
        given = os.fspath(flag)
        return given if is_remote_uri(given) else Path(os.path.expanduser(given))
    if env.get("SS_INDEX_PATH"):
        given = env["SS_INDEX_PATH"]
        return given if is_remote_uri(given) else Path(os.path.expanduser(given))
    if env.get("SS_INDEX_DIR"):
        given = env["SS_INDEX_DIR"]
        return given if is_remote_uri(given) else Path(os.path.expanduser(given)) / INDEX_NAME
    if "indexDir" in data:
        folder = _path_text(config_path, "indexDir", data["indexDir"], "a folder path")
        if is_remote_uri(folder):
            return folder
        return config_path.parent / os.path.expanduser(folder) / INDEX_NAME
    return _xdg(env, "XDG_DATA_HOME", ".local/share") / APP_DIR / INDEX_NAME


def _storage_options(path: Path, data: Mapping[str, Any]) -> dict[str, str]:
    options = _expect(path, "storageOptions", data.get("storageOptions", {}), dict, "an object")
    if not all(isinstance(value, str) for value in options.values()):
        raise ConfigError(f"{path}: `storageOptions` must map option names to text values.")
    return {str(key).lower(): value for key, value in options.items()}


def remote_location(
    uri: str, env: Mapping[str, str], data: Mapping[str, Any], config_path: Path
) -> RemoteLocation:
    """The object store at ``uri``: storage options from the config's ``storageOptions``, the
    standard AWS variables over them (for ``s3://``)."""
    scheme, _, rest = uri.partition(":")
    slashes, rest = rest[:2], rest[2:]
    bucket, _, prefix = rest.partition("/")
    parts = prefix.strip("/").split("/") if prefix.strip("/") else []
    if slashes != "//" or not bucket or any(part in ("", ".", "..") for part in parts):
        raise UsageError(
            f"{uri} is not an object-store URI: write it as {scheme}://BUCKET/PREFIX, "
            f"e.g. {scheme.lower()}://my-bucket/team-index (a local folder: ./{uri})."
        )
    options = _storage_options(config_path, data)
    if scheme.lower() == "s3":
        from_env: dict[str, str] = {}
        for variable, option in AWS_ENVIRONMENT:
            if env.get(variable) and option not in from_env:
                from_env[option] = env[variable]
        options.update(from_env)
    clean = "/".join([f"{scheme.lower()}://{bucket}", *parts])
    return RemoteLocation(clean, tuple(sorted(options.items())), remote_cache_dir(env))


def remote_cache_dir(env: Mapping[str, str]) -> Path | None:
    """Where readers of an index on object storage keep copies of what they read whole:
    ``$SS_REMOTE_CACHE``, else ``$XDG_CACHE_HOME/semsearch/remote`` (``~/.cache/...``); None
    when ``SS_REMOTE_CACHE`` is ``0`` or ``off``."""
    chosen = env.get("SS_REMOTE_CACHE", "")
    if chosen.lower() in ("0", "off"):
        return None
    if chosen:
        return Path(os.path.expanduser(chosen))
    cache = env.get("XDG_CACHE_HOME") or str(_home(env) / ".cache")
    return Path(cache) / "semsearch" / "remote"


def _check_remote(location: RemoteLocation, backend: str | None) -> None:
    """An index on object storage is LanceDB's: refuse the SQLite backend and a missing extra
    (usage errors: nothing is written)."""
    if backend not in (None, "lancedb"):
        raise UsageError(
            f"The index {location} is on object storage, which only the LanceDB backend can "
            "open: set SS_STORE_BACKEND=lancedb (or storeBackend in the config), or leave it "
            "unset."
        )
    if _missing("lancedb"):
        raise UsageError(
            f"The index {location} is on object storage, which needs the lancedb extra: "
            'pip install "semsearch[lancedb]"'
        )


def _missing(module: str) -> bool:
    """Whether ``module`` cannot be imported (looked up, not loaded)."""
    import importlib.util  # here, not at the top: only the LanceDB backend asks

    return importlib.util.find_spec(module) is None


def _check_backend(backend: str, config_path: Path) -> None:
    if backend not in BACKENDS:
        raise ConfigError(
            f"Unknown store backend {backend!r} (from SS_STORE_BACKEND or {config_path}). "
            f"Use one of: {', '.join(BACKENDS)}."
        )
    if backend == "lancedb" and _missing("lancedb"):
        raise ConfigError(LANCEDB_MISSING)


def load_settings(
    env: Mapping[str, str], index_flag: str | os.PathLike[str] | None = None
) -> Settings:
    """Build the settings from the environment (pass ``os.environ``) and the ``--index`` flag.

    A wrong type or value raises :class:`ConfigError` naming the key; an unknown key is only a
    warning, in :attr:`Settings.warnings`, for the caller to show.
    """
    config_path = default_config_path(env)
    data = read_config_file(config_path)
    values: dict[str, Any] = {
        **_chunk_settings(config_path, data),
        **_file_settings(config_path, data),
    }
    if env.get("SS_MODEL_DIR") and env.get("SS_MODEL", "").strip():
        raise ConfigError("Set SS_MODEL or SS_MODEL_DIR, not both.")
    if env.get("SS_MODEL_DIR"):
        values["model_dir"] = Path(os.path.expanduser(env["SS_MODEL_DIR"]))
        values.pop("model", None)  # the environment's choice beats the config file's
    if env.get("SS_MODEL", "").strip():
        values["model"] = env["SS_MODEL"].strip()
        values.pop("model_dir", None)
    if env.get("SS_STORE_BACKEND"):
        values["store_backend"] = env["SS_STORE_BACKEND"]
    if env.get("SS_MCP_AUTO_INDEX"):
        values["auto_index"] = env["SS_MCP_AUTO_INDEX"].strip().lower() not in ("0", "false", "no")
    if env.get("SS_MODEL_VARIANT"):
        values["model_variant"] = env["SS_MODEL_VARIANT"]
    given = _index_path(env, data, config_path, index_flag)
    index_path: Location
    if isinstance(given, str):
        index_path = remote_location(given, env, data, config_path)
        _check_remote(index_path, values.get("store_backend"))
        values["store_backend"] = "lancedb"
    else:
        index_path = Path(os.path.abspath(given))
    if env.get("SS_SERVE_TOKEN"):
        values["serve_token"] = env["SS_SERVE_TOKEN"]
    runtime = env.get("XDG_RUNTIME_DIR")
    _check_backend(values.get("store_backend", "sqlite"), config_path)
    if values.get("model_variant", "auto") not in MODEL_VARIANTS:
        raise ConfigError(
            f"Unknown model variant {values['model_variant']!r} (from SS_MODEL_VARIANT or "
            f"{config_path}). Use one of: {', '.join(MODEL_VARIANTS)}."
        )
    return Settings(
        config_path=config_path,
        config_exists=config_path.is_file(),
        index_path=index_path,
        roots=tuple(config_roots(config_path, data)),
        warnings=tuple(unknown_keys(config_path, data)),
        state_dir=_xdg(env, "XDG_STATE_HOME", ".local/state") / APP_DIR,
        runtime_dir=Path(runtime) / APP_DIR if runtime and os.path.isabs(runtime) else None,
        **values,
    )


class RootChange(NamedTuple):
    """Outcome of ``add`` or ``remove``: which paths changed, which were no-ops or rejected.

    ``rejected`` holds (path as given, why: "does not exist", "is a file", ...) for paths that
    are no folder; ``covered`` (path, folder already covering it) for paths refused because they
    lie inside a configured or indexed folder; ``taken_over`` (inner, outer) for configured
    folders that left the config because an added folder holds them; ``moved`` (path, missing
    folder) for paths refused because a folder missing on disk seems to have moved there;
    ``links`` (path as given, real path) for given paths that are or pass through a symlink, so
    that a message can name both.
    """

    changed: tuple[Path, ...] = ()
    unchanged: tuple[Path, ...] = ()
    rejected: tuple[tuple[str, str], ...] = ()
    roots: tuple[Path, ...] = ()
    covered: tuple[tuple[Path, Path], ...] = ()
    taken_over: tuple[tuple[Path, Path], ...] = ()
    moved: tuple[tuple[Path, Path], ...] = ()
    links: tuple[tuple[str, Path], ...] = ()


def _store_roots(path: Path, data: dict[str, Any], roots: list[Path]) -> None:
    data.pop("defaultRoot", None)
    data["defaultRoots"] = [str(root) for root in roots]
    write_config_file(path, data)


def is_inside(path: str | Path, folder: str | Path) -> bool:
    """True when ``path`` lies strictly below ``folder`` (both compared as real paths)."""
    real, real_folder = os.path.realpath(path), os.path.realpath(folder)
    return real != real_folder and real.startswith(real_folder.rstrip(os.sep) + os.sep)


def add_roots(
    config_path: Path, paths: list[str], cwd: Path, indexed: Sequence[Path] = ()
) -> RootChange:
    """Add folders (stored as real paths); missing paths and non-directories are rejected,
    saying why (:func:`not_a_folder`).

    No folder is ever configured twice, not even nested: a path inside a configured folder
    (or inside one of the ``indexed`` folders) is refused, naming the folder that covers it;
    a path holding configured folders takes their place (``taken_over``), also when it is
    already configured (a config written before this rule).
    """
    data = read_config_file(config_path)
    roots = config_roots(config_path, data)
    before = list(roots)
    added: list[Path] = []
    already: list[Path] = []
    rejected: list[tuple[str, str]] = []
    covered: list[tuple[Path, Path]] = []
    taken: list[tuple[Path, Path]] = []
    links: list[tuple[str, Path]] = []
    for raw in paths:
        given = cwd / os.path.expanduser(raw)
        target = Path(os.path.realpath(given))
        if target != Path(os.path.abspath(given)):
            links.append((raw, target))
        owner = next((f for f in [*roots, *indexed] if is_inside(target, f)), None)
        reason = not_a_folder(given)
        if reason is not None:
            rejected.append((raw, reason))
        elif owner is not None:
            covered.append((target, owner))
        else:
            inner = [root for root in roots if is_inside(root, target)]
            taken.extend((root, target) for root in inner)
            roots = [root for root in roots if root not in inner]
            if target in roots:
                already.append(target)
            else:
                roots.append(target)
                added.append(target)
    if roots != before:
        _store_roots(config_path, data, roots)
    return RootChange(
        tuple(added),
        tuple(already),
        tuple(rejected),
        tuple(roots),
        tuple(covered),
        tuple(taken),
        links=tuple(links),
    )


def not_a_folder(path: Path) -> str | None:
    """Why ``path`` cannot be added as a folder ("does not exist", "is a file", "is a symlink
    to X, which does not exist", ...), or None for a directory (or a symlink to one)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            return f"is a symlink to {os.readlink(path)}, which does not exist"
        return "does not exist"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symlink loop: following it never reaches a folder"
        if exc.errno == errno.ENOTDIR:
            return "does not exist (a part of it is a file)"
        return f"cannot be reached ({(exc.strerror or str(exc)).lower()})"
    if stat.S_ISDIR(info.st_mode):
        return None
    if stat.S_ISREG(info.st_mode):
        return "is a file, not a folder: add the folder that holds it"
    return "is not a folder (a device, socket or pipe)"


def move_root(config_path: Path, old: Path, new: Path) -> bool:
    """Put ``new`` in the config where ``old`` was (dropping ``old`` if ``new`` is there).

    Returns False, changing nothing, when ``old`` is not configured.
    """
    data = read_config_file(config_path)
    roots = config_roots(config_path, data)
    real_old = os.path.realpath(old)
    if not any(os.path.realpath(root) == real_old for root in roots):
        return False
    moved: list[Path] = []
    for root in roots:
        entry = new if os.path.realpath(root) == real_old else root
        if entry not in moved:
            moved.append(entry)
    _store_roots(config_path, data, moved)
    return True


def remove_roots(config_path: Path, folders: Sequence[Path]) -> RootChange:
    """Remove folders from the config, as resolved by :func:`~.folders.resolve_folder`.

    Folders are compared as real paths; one that is not configured comes back in ``unchanged``.
    """
    data = read_config_file(config_path)
    roots = config_roots(config_path, data)
    wanted = {os.path.realpath(folder) for folder in folders}
    removed = [root for root in roots if os.path.realpath(root) in wanted]
    gone = {os.path.realpath(root) for root in removed}
    kept = [root for root in roots if root not in removed]
    if removed:
        _store_roots(config_path, data, kept)
    unchanged = tuple(folder for folder in folders if os.path.realpath(folder) not in gone)
    return RootChange(tuple(removed), unchanged, (), tuple(kept))


def roots_holding(roots: Sequence[Path], path: str | Path) -> list[Path]:
    """The configured folders that hold ``path`` (it or anything below it), innermost first.

    Both sides are compared as real paths, so ``..``, a symlink pointing out of a folder and a
    sibling sharing a name prefix (``/srv/data`` vs ``/srv/data-private``) never match. This is
    the confinement check of every MCP tool that reads or indexes a path.
    """
    real = os.path.realpath(path)
    holding = []
    for root in roots:
        real_root = os.path.realpath(root)
        if real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep):
            holding.append((len(real_root), root))
    return [root for _, root in sorted(holding, key=lambda pair: -pair[0])]
