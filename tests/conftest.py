"""Shared fixtures: every test runs with its own HOME, XDG dirs and no SS_* variables."""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from semsearch.config import Settings, load_settings
from semsearch.index import Index
from semsearch.model.embedder import HashEmbedder
from semsearch.store import Store, open_store

if TYPE_CHECKING:
    from tokenizers import Tokenizer


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One optimised-model cache for the whole run (each copy of the fp32 model is 90 MB)."""
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_cache: Path) -> Path:
    """Point HOME and the XDG folders into tmp_path; drop any SS_* setting but the shared
    optimised-model cache (``SS_MODEL_CACHE``)."""
    for name in list(os.environ):
        if name.startswith("SS_") or name.startswith("XDG_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("SS_MODEL_CACHE", str(model_cache))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    return home


# Fuzzing (tests/test_fuzz.py): CI runs a fixed, reproducible set of examples (no time limit
# per example, nor a health check on generation speed: CI machines are shared); a deeper run is
# HYPOTHESIS_PROFILE=long (random examples, a failing one remembered in .hypothesis/).
hypothesis_settings.register_profile(
    "ci",
    max_examples=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
hypothesis_settings.register_profile("long", max_examples=2000, deadline=None)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

BACKENDS = ("sqlite", "lancedb")
HAS_LANCEDB = importlib.util.find_spec("lancedb") is not None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "lancedb: needs the lancedb extra (skipped without it)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Without the lancedb extra, skip the tests marked ``lancedb`` or run on that backend."""
    if HAS_LANCEDB:
        return
    skip = pytest.mark.skip(reason='needs the lancedb extra: pip install "semsearch[lancedb]"')
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = list(callspec.params.values()) if callspec is not None else []
        if item.get_closest_marker("lancedb") or "lancedb" in map(str, params):
            item.add_marker(skip)


@pytest.fixture
def store_backend() -> str:
    """The store backend of the ``settings`` fixture; suites that run on both override it."""
    return "sqlite"


@pytest.fixture
def settings(isolated_env: Path, store_backend: str, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings loaded from the isolated environment, with ``SS_STORE_BACKEND`` set."""
    monkeypatch.setenv("SS_STORE_BACKEND", store_backend)
    return load_settings(os.environ)


@pytest.fixture
def hash_index(settings: Settings) -> Iterator[Index]:
    """An Index with the fast hashed bag-of-words embedder."""
    index = Index(settings, embedder=HashEmbedder())
    yield index
    index.close()


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    """Create files (text or bytes) under root; returns root."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def location(tmp_path: Path, backend: str) -> Path:
    """Where a store of ``backend`` lives under ``tmp_path``."""
    return tmp_path / ("index.db" if backend == "sqlite" else "lancedb")


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A new store of each backend, its model set (the store and store-pending tests)."""
    backend = str(request.param)
    opened = open_store(backend, location(tmp_path, backend), create=True)
    opened.set_model("model-a", 4)
    return opened


def library_tokenizer(path: Path) -> Tokenizer:
    """The ``tokenizers`` library's reading of a tokenizer.json, truncation and padding off as
    semsearch uses it."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


# Permission errors as a user meets them, even when the tests run as root (CI does): root reads a
# mode-000 folder, but uid 1000 of a new user namespace has no capability over the machine's
# files, so their modes bind it. The files keep their owner (root outside is uid 1000 inside).
AS_USER = ("unshare", "--user", "--map-user=1000", "--map-group=1000", "--")


@functools.cache
def _user_namespace_problem() -> str | None:
    """Why ``AS_USER`` cannot run a command for which a mode-000 folder is unreadable, or None."""
    if shutil.which(AS_USER[0]) is None:
        return "`unshare` is not installed (Debian: util-linux)"
    with tempfile.TemporaryDirectory() as base:
        locked = Path(base, "locked")
        locked.mkdir(mode=0)
        probe = [*AS_USER, sys.executable, "-c", "import os, sys; os.listdir(sys.argv[1])"]
        result = subprocess.run([*probe, str(locked)], capture_output=True, text=True, check=False)
        locked.chmod(0o700)
    if "PermissionError" in result.stderr:
        return None
    if result.returncode == 0:
        return "a mode-000 folder is still readable in the user namespace"
    return f"cannot make a user namespace: {result.stderr.strip()}"


def as_user(argv: Sequence[str]) -> list[str]:
    """``argv`` to run as an ordinary user (uid 1000 in a new user namespace): file modes bind
    it as they bind a user, even when the tests run as root. Fails the test, never skips it,
    when this machine cannot do that (CI must run every permission test)."""
    problem = _user_namespace_problem()
    if problem is not None:
        pytest.fail(f"permission tests run as an ordinary user with {' '.join(AS_USER)}: {problem}")
    return [*AS_USER, *argv]


def run_as_user(
    argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as an ordinary user (see :func:`as_user`) with this test's environment
    (HOME, XDG dirs, SS_MODEL_CACHE) unless ``env`` is given, and this checkout importable."""
    chosen = dict(os.environ if env is None else env)
    chosen["PYTHONPATH"] = os.pathsep.join(sys.path)
    return subprocess.run(
        as_user(argv), capture_output=True, text=True, env=chosen, timeout=timeout, check=False
    )


def semsearch_as_user(
    *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m semsearch ARGS`` as an ordinary user (see :func:`run_as_user`)."""
    return run_as_user([sys.executable, "-m", "semsearch", *args], env)


@pytest.fixture
def set_mode() -> Iterator[Callable[[Path, int], Path]]:
    """``set_mode(path, 0)``: give a file or folder a mode for this test; the old mode comes back
    after it, so the test's folders can be removed."""
    changed: list[tuple[Path, int]] = []

    def chmod(path: Path, mode: int) -> Path:
        changed.append((path, stat.S_IMODE(path.stat().st_mode)))
        path.chmod(mode)
        return path

    yield chmod
    for path, mode in reversed(changed):
        path.chmod(mode)


def make_immutable(path: Path) -> None:
    """``chattr +i path``: unwritable even for root (undo with ``chattr -i``). Needs root: an
    ordinary user's run skips; a root run (CI) that cannot do it fails, never skips."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a file immutable (chattr +i)")
    result = subprocess.run(
        ["chattr", "+i", str(path)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        pytest.fail(f"chattr +i {path} failed: {result.stderr.strip()}")


@pytest.fixture
def mount_points() -> Iterator[list[Path]]:
    """Mount points to unmount (lazily) after the test, last first."""
    points: list[Path] = []
    yield points
    for point in reversed(points):
        subprocess.run(["umount", "-l", str(point)], check=False, capture_output=True)
