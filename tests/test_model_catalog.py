"""Model packages: a wheel built by scripts/model_wheel.py, installed by pip, listed by
``semsearch config``, chosen with ``index --model`` (the index embedded again), followed by
search, refused when damaged or when another model is asked for."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from semsearch.config import load_settings
from semsearch.errors import ModelError
from semsearch.index import Index
from semsearch.indexing.pipeline import Indexer
from semsearch.model.builds import VARIANTS, default_model_file, packaged_tokenizer
from semsearch.model.catalog import (
    chosen_model_hint,
    find_model,
    installed_models,
    mismatch_hints,
    missing_model_hint,
)
from semsearch.model.embedder import OnnxEmbedder
from semsearch.model.run import pool_and_normalise
from semsearch.store.sqlite.store import SqliteStore
from semsearch.store.sqlite.switch import next_path
from tests.conftest import make_immutable, write_tree
from tests.test_cli import run
from tests.test_robustness import (
    LOREM,
    capped_folder,
    error_lines,
    fill_disk,
    integrity,
)

ROOT = Path(__file__).resolve().parent.parent
NAME = "minilm-cls"  # all-MiniLM-L6-v2's fp32 file, pooled on [CLS], queries prefixed
PREFIX = "query: "


@pytest.fixture(scope="session")
def model_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the test model's wheel as pip installed it (``pip install --target``)."""
    work = tmp_path_factory.mktemp("model-package")
    wheel, site = _installed_wheel(
        work, default_model_file().read_bytes(), NAME, "--pooling", "cls", "--query-prefix",
        PREFIX, "--description", "MiniLM pooled on CLS",
    )  # fmt: skip
    assert wheel.name == "semsearch_model_minilm_cls-1.0.0-py3-none-any.whl"
    return site


def _installed_wheel(work: Path, model: bytes, name: str, *options: str) -> tuple[Path, Path]:
    """A model package of ``model`` (with the built-in tokenizer) built by the wheel script and
    installed by pip into a folder of its own: (the wheel, that folder)."""
    source = work / "source"
    source.mkdir(parents=True)
    (source / "model.onnx").write_bytes(model)
    shutil.copyfile(packaged_tokenizer(), source / "tokenizer.json")
    built = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "model_wheel.py"), str(source), "--name", name,
         *options, "--out", str(work / "dist")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    wheel = Path(built.stdout.strip())
    site = work / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--target", str(site), str(wheel)],
        check=True,
    )  # fmt: skip
    return wheel, site


@pytest.mark.parametrize(
    ("files", "name", "message"),
    [
        (["tokenizer.json"], "m", "needs model.onnx (or onnx/model.onnx) and tokenizer.json"),
        (["model.onnx"], "m", "needs model.onnx (or onnx/model.onnx) and tokenizer.json"),
        (["model.onnx", "tokenizer.json"], "bad name!", "use letters, digits, '.', '_' and '-'"),
    ],
)
def test_the_wheel_script_refuses_what_it_cannot_package(
    tmp_path: Path, files: list[str], name: str, message: str
) -> None:
    for file in files:
        (tmp_path / file).write_text("{}")
    ran = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "model_wheel.py"), str(tmp_path), "--name", name,
         "--pooling", "mean", "--out", str(tmp_path / "dist")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ran.returncode == 2 and message in ran.stderr
    assert not (tmp_path / "dist").exists()


@pytest.mark.parametrize("present", [[], ["config.json"], ["tokenizer.json"]])
def test_the_export_script_refuses_a_folder_that_is_not_a_model(
    tmp_path: Path, present: list[str]
) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for file in present:
        (source / file).write_text("{}")
    ran = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "export_model.py"), str(source),
         str(tmp_path / "out")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ran.returncode == 2
    assert "needs config.json and tokenizer.json (a model folder)" in ran.stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture
def installed(model_site: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test model package on sys.path for this test (as if pip had installed it here)."""
    monkeypatch.syspath_prepend(str(model_site))
    return model_site


def test_an_installed_model_package_is_listed(
    installed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "minilm-cls" not in run(capsys, "config")[1].split("models", 1)[0]
    code, out, err = run(capsys, "config")
    assert code == 0 and err == ""
    listing = out.split("models", 1)[1].splitlines()
    assert listing[0].split() == ["all-MiniLM-L6-v2", "built", "in;", *listing[0].split()[3:]]
    assert NAME in listing[1] and "from semsearch-model-minilm-cls 1.0.0" in listing[1]
    (package,) = installed_models()[0]
    assert package.pooling == "cls" and package.query_prefix == PREFIX
    assert package.onnx == installed / "semsearch_model_minilm_cls" / "model.onnx"


def test_a_model_package_pools_and_prefixes_as_it_declares(installed: Path) -> None:
    package = find_model(NAME)
    assert package is not None
    chosen = OnnxEmbedder(package=package)
    plain = OnnxEmbedder(variant="fp32")  # the same file, mean-pooled
    assert chosen.model_id == f"{NAME}@{package.sha256[:16]}" != plain.model_id
    text = "How are chunk vectors stored in the index?"
    ours, theirs = chosen.embed([text])[0], plain.embed([text])[0]
    assert abs(float(np.linalg.norm(ours)) - 1.0) < 1e-5
    assert float(ours @ theirs) < 0.99  # another pooling, another vector
    # the query prefix goes before queries only; chunks get none (no document prefix declared)
    np.testing.assert_allclose(
        chosen.embed_query(text), chosen.embed([PREFIX + text])[0], atol=1e-5
    )
    assert float(chosen.embed_query(text) @ ours) < 0.999
    # a document prefix goes before chunks only
    passages = OnnxEmbedder(package=replace(package, query_prefix="", document_prefix="passage: "))
    np.testing.assert_allclose(
        passages.embed([text])[0], passages.embed_query("passage: " + text), atol=1e-5
    )
    assert float(passages.embed([text])[0] @ ours) < 0.999


def test_a_mismatch_names_what_to_install(installed: Path) -> None:
    package = find_model(NAME)
    assert package is not None
    models, _ = installed_models()
    assert missing_model_hint(package.model_id, models) == ""  # installed: nothing to add
    for variant in VARIANTS.values():
        assert missing_model_hint(variant.model_id, models) == ""
    other_build = missing_model_hint(f"{NAME}@{'0' * 16}", models)
    assert "holds another version of it" in other_build and f"--model {NAME}" in other_build
    assert "If e5-small is a model package, install it" in missing_model_hint(
        "e5-small@0123456789abcdef", models
    )
    # chosen by name over an index whose model is at hand: unchoosing it is the way back
    int8, fp32 = VARIANTS["int8"].model_id, VARIANTS["fp32"].model_id
    assert chosen_model_hint(int8, fp32, models) == ""  # two builds of one model: no choice
    assert "unset SS_MODEL" in chosen_model_hint(package.model_id, int8, models)
    assert "To search it with all-MiniLM-L6-v2," in chosen_model_hint(
        fp32, package.model_id, models
    )
    assert chosen_model_hint("e5-small@0123456789abcdef", int8, models) == ""  # not installed
    assert mismatch_hints(f"{NAME}@{'0' * 16}", int8) == other_build  # both, the packages once


def test_cls_pooling_takes_the_first_token_state() -> None:
    hidden = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4) + 1
    mask = np.array([[1, 1, 0], [1, 1, 1]])
    first = hidden[:, 0, :] / np.linalg.norm(hidden[:, 0, :], axis=1, keepdims=True)
    np.testing.assert_allclose(pool_and_normalise(hidden, mask, "cls"), first, rtol=1e-6)
    assert not np.allclose(pool_and_normalise(hidden, mask, "mean"), first)


@pytest.mark.parametrize("backend", ["sqlite", "lancedb"])
def test_choosing_a_model_embeds_the_index_again_and_search_follows_it(
    installed: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
) -> None:
    monkeypatch.setenv("SS_STORE_BACKEND", backend)
    project = write_tree(
        tmp_path / "project",
        {
            "retry.py": "def retry_with_backoff(call, attempts=5):\n"
            "    '''Call again after a failure, waiting twice as long each time.'''\n",
            "colors.py": "def detect_truecolor(env):\n"
            "    return env.get('COLORTERM') == 'truecolor'\n",
            "notes.md": "# Holidays\n\nThe office closes in the last week of December.\n",
        },
    )
    assert run(capsys, "add", str(project))[0] == 0
    code, out, _ = run(capsys, "index", "--json")
    first = json.loads(out)
    built_in = {variant.model_id for variant in VARIANTS.values()}
    assert code == 0 and first["model"] in built_in and first["replacedModel"] is None

    code, out, _ = run(capsys, "index", "--model", NAME, "--json")
    switched = json.loads(out)
    assert code == 0
    assert switched["model"].startswith(f"{NAME}@") and switched["replacedModel"] == first["model"]
    assert switched["filesIndexed"] == 3 and switched["chunksEmbedded"] == first["chunksEmbedded"]

    code, out, _ = run(capsys, "index", "--json")  # the index keeps its model: nothing to redo
    again = json.loads(out)
    assert (again["model"], again["chunksEmbedded"], again["filesIndexed"]) == (
        switched["model"], 0, 0
    )  # fmt: skip
    code, out, _ = run(capsys, "status", "--json")
    assert json.loads(out)["model"] == {"id": switched["model"], "dim": 384}

    code, out, _ = run(capsys, "search", "wait longer after each failed call", "--json", "-k", "1")
    assert code == 0 and json.loads(out)["results"][0]["relPath"] == "retry.py"
    code, out, _ = run(capsys, "search", "terminal colour support", "--mode", "vector", "--json")
    assert code == 0 and json.loads(out)["results"][0]["relPath"] == "colors.py"

    code, out, _ = run(capsys, "index", "--model", "all-MiniLM-L6-v2")  # and back, with a line
    assert code == 0 and f"replaces {switched['model']}" in out


@pytest.mark.parametrize("backend", ["sqlite", "lancedb"])
@pytest.mark.parametrize("first", ["built-in", "none"])
def test_a_chosen_model_stopped_before_its_second_pass_is_the_one_a_resume_uses(
    installed: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    first: str,
) -> None:
    """``index --model`` stopped (Ctrl-C) after its chunks are written, before its second pass:
    a plain ``index`` (no model named, as the message says) finishes with the chosen model, not
    with the default, over an index built before or over none. Over one built before, SQLite
    builds the new model's index beside it: the index keeps its model and every vector until
    then; LanceDB records the chosen model at once."""
    monkeypatch.setenv("SS_STORE_BACKEND", backend)
    project = write_tree(
        tmp_path / "project",
        {
            "retry.py": "def retry_with_backoff(call, attempts=5):\n    pass\n",
            "colors.py": "def detect_truecolor(env):\n    return env.get('COLORTERM')\n",
        },
    )
    assert run(capsys, "add", str(project))[0] == 0
    if first == "built-in":
        assert run(capsys, "index")[0] == 0

    def stop(self: Indexer, folder_ids: object = None) -> int:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(Indexer, "embed_pending", stop)
        code, _, err = run(capsys, "index", "--model", NAME)
    assert code == 130 and "run again to resume" in err
    status = json.loads(run(capsys, "status", "--json")[1])
    if first == "built-in" and backend == "sqlite":
        assert next_path(load_settings(os.environ).store_path).exists()
        assert status["model"]["id"] in {v.model_id for v in VARIANTS.values()}
        assert status["chunksPending"] == 0
        code, out, _ = run(capsys, "search", "terminal colours", "--mode", "vector", "--json")
        assert code == 0 and json.loads(out)["results"][0]["relPath"] == "colors.py"
    else:
        assert status["model"]["id"].startswith(f"{NAME}@") and status["chunksPending"] == 1

    code, out, _ = run(capsys, "index", "--json")
    resumed = json.loads(out)
    assert code == 0 and resumed["model"].startswith(f"{NAME}@")
    assert resumed["chunksEmbedded"] == 1 and resumed["chunksPending"] == 0
    status = json.loads(run(capsys, "status", "--json")[1])
    assert status["model"]["id"] == resumed["model"] and status["chunksPending"] == 0
    assert not list(load_settings(os.environ).store_path.parent.glob("*.next*"))


def test_a_change_of_model_cut_short_keeps_the_index_until_a_run_finishes_it(
    installed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLite: ``index --model`` stopped by ``--max-files`` leaves the index its old model and
    vectors (the summary says so); a run where that model is not installed keeps it, and so
    does ``--force`` (the index embedded again with its own model); the next run that has it
    finishes the new model's index and copies it in; a change stopped and then given up
    (``--model`` of the index's own) leaves no file."""
    project = write_tree(
        tmp_path / "project",
        {
            "retry.py": "def retry_with_backoff(call, attempts=5):\n    pass\n",
            "colors.py": "def detect_truecolor(env):\n    return env.get('COLORTERM')\n",
            "notes.md": "# Holidays\n\nThe office closes in the last week of December.\n",
        },
    )
    assert run(capsys, "add", str(project))[0] == 0
    code, out, _ = run(capsys, "index", "--json")
    old = json.loads(out)["model"]
    beside = next_path(load_settings(os.environ).store_path)

    code, out, _ = run(capsys, "index", "--model", NAME, "--max-files", "2")
    assert code == 0 and f"model {NAME}@" in out and f"will replace {old}" in out
    assert beside.exists()
    status = json.loads(run(capsys, "status", "--json")[1])
    assert status["model"]["id"] == old and status["files"] == 3 and status["chunksPending"] == 0
    assert status["nextModel"].startswith(f"{NAME}@")
    shown = run(capsys, "status")[1]
    assert f"next model    {NAME}@" in shown
    assert f"beside this one ({beside.stat().st_size / 1e6:.1f} MB) is not whole" in shown

    # each file with its log (no -shm: 32 KiB while a connection is open), said apart
    def on_disk(name: str) -> int:
        files = [beside.with_name(name + end) for end in ("", "-wal", "-journal")]
        return sum(p.stat().st_size for p in files if p.exists())

    assert status["nextSizeBytes"] == on_disk(beside.name) > 0
    assert status["sizeBytes"] == on_disk("index.db") > 0
    code, out, _ = run(capsys, "search", "office holidays", "--mode", "vector", "--json")
    assert code == 0 and json.loads(out)["results"][0]["relPath"] == "notes.md"

    sys.path.remove(str(installed))  # without its package here the change waits, kept
    code, out, _ = run(capsys, "index", "--json")
    waiting = json.loads(out)
    assert code == 0 and waiting["model"] == old and waiting["nextModel"].startswith(f"{NAME}@")
    assert beside.exists() and "(`--model all-MiniLM-L6-v2` gives it up)" in run(capsys, "index")[1]
    sys.path.insert(0, str(installed))
    code, out, _ = run(capsys, "index", "--force", "--json")  # the index's model, again
    forced = json.loads(out)
    assert code == 0 and forced["model"] == old and forced["nextModel"] == waiting["nextModel"]
    assert forced["filesIndexed"] == 3 and beside.exists()

    code, out, _ = run(capsys, "index", "--json")  # no model named: the change goes on
    done = json.loads(out)
    assert code == 0 and done["model"].startswith(f"{NAME}@") and done["replacedModel"] == old
    assert done["filesIndexed"] == 1 and done["nextModel"] is None and not beside.exists()
    status = json.loads(run(capsys, "status", "--json")[1])
    assert status["model"]["id"] == done["model"] and status["files"] == 3
    assert status["nextModel"] is None and "next model" not in run(capsys, "status")[1]
    assert status["nextSizeBytes"] == 0

    code, out, _ = run(capsys, "index", "--model", "all-MiniLM-L6-v2", "--max-files", "1")
    assert code == 0 and beside.exists()
    code, out, _ = run(capsys, "index", "--model", NAME, "--json")  # given up
    assert code == 0 and json.loads(out)["filesIndexed"] == 0 and not beside.exists()


def test_a_reader_open_across_a_change_of_model_reads_the_new_index_whole(
    installed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A long-lived reader (the MCP server's index) that read the vectors before another
    process changed the model answers after it as a new reader does: none of the old vectors
    stays (the new index's chunk ids are above the old one's). The write-ahead log that held
    the copy is given back while the reader is open."""
    files = {
        f"m{i}.py": f"def handler_{i}(event):\n    return event.kind == {i}\n" for i in range(6)
    }
    files["colors.py"] = "def detect_truecolor(env):\n    return env.get('COLORTERM')\n"
    project = write_tree(tmp_path / "project", files)
    assert run(capsys, "add", str(project))[0] == 0
    assert run(capsys, "index")[0] == 0
    reader = Index(load_settings(os.environ))
    query = "terminal colour support"
    before = [(h.rel, h.score) for h in reader.search(query, mode="vector", k=10)]

    assert run(capsys, "index", "--model", NAME)[0] == 0
    db = load_settings(os.environ).store_path  # the copy's log given back, the reader open
    assert db.with_name(db.name + "-wal").stat().st_size < db.stat().st_size // 4
    after = [(h.rel, h.score) for h in reader.search(query, mode="vector", k=10)]
    fresh = [
        (h.rel, h.score)
        for h in Index(load_settings(os.environ)).search(query, mode="vector", k=10)
    ]
    assert after == fresh and after != before
    assert after[0][0] == "colors.py" and len(after) == len(files)


def test_searching_with_another_model_or_without_its_package_is_a_clear_error(
    model_site: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = write_tree(tmp_path / "project", {"a.py": "def parse_header(line):\n    pass\n"})
    run(capsys, "add", str(project))
    sys.path.insert(0, str(model_site))
    try:
        assert run(capsys, "index", "--model", NAME)[0] == 0
        monkeypatch.setenv("SS_MODEL", "all-MiniLM-L6-v2")
        code, _, err = run(capsys, "search", "header parsing")
        assert code == 1 and f"was built with model {NAME}@" in err and "Traceback" not in err
        assert f"To search it with {NAME}, the model it was built with, unset SS_MODEL" in err
        code, out, _ = run(capsys, "index")  # a model chosen by name: the index follows it
        assert code == 0 and f"replaces {NAME}@" in out
        monkeypatch.delenv("SS_MODEL")
        assert run(capsys, "index", "--model", NAME)[0] == 0
    finally:
        sys.path.remove(str(model_site))
    code, _, err = run(capsys, "search", "header parsing")
    assert code == 1
    assert (
        f"was built with model {NAME}@" in err
        and f"If {NAME} is a model package, install it" in err
    )
    code, _, err = run(capsys, "index", "--model", NAME)
    assert code == 1 and f"No embedding model {NAME!r} is installed" in err
    assert "installed: all-MiniLM-L6-v2 (built in))" in err


def test_a_model_change_for_one_folder_would_drop_the_others_and_is_refused(
    installed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = write_tree(tmp_path / "notes", {"plan.md": "The budget review is on Tuesday."})
    code = write_tree(tmp_path / "code", {"retry.py": "def retry(call):\n    return call()\n"})
    run(capsys, "add", str(notes), str(code))
    assert run(capsys, "index")[0] == 0
    before = json.loads(run(capsys, "status", "--json")[1])
    result, _, err = run(capsys, "index", "--model", NAME, str(code))
    assert result == 2
    assert f"those of {notes} too, which this run does not index" in err
    assert "Run it without a PATH" in err
    assert json.loads(run(capsys, "status", "--json")[1]) == before  # nothing dropped
    result, out, _ = run(capsys, "index", "--model", NAME, "--json")
    assert result == 0 and json.loads(out)["filesIndexed"] == 2


GOOD = "{'onnx': ONNX, 'tokenizer': TOKENIZER, 'sha256': 'ab' * 32, 'pooling': 'cls'}"


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        (
            "raise RuntimeError('no GPU here')",
            "its package (broken-model 1.0) failed to load: no GPU",
        ),
        ("return ['model.onnx']", "declares no model mapping"),
        (f"return {{**{GOOD}, 'sha256': 'abc'}}", "gives no sha256 of the model file"),
        (f"return {{**{GOOD}, 'pooling': 'max'}}", "unknown pooling 'max'"),
        (f"return {{**{GOOD}, 'queryPrefix': 3}}", "gives no text for 'queryPrefix'"),
        (f"return {{**{GOOD}, 'onnx': '/nowhere/model.onnx'}}", "/nowhere/model.onnx is missing"),
    ],
)
def test_a_model_package_that_declares_nothing_usable_is_named(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    declared: str,
    message: str,
) -> None:
    """A package's entry point is its own code: whatever it does wrong is one line naming it."""
    site = tmp_path / "site"
    (site / "broken_model-1.0.dist-info").mkdir(parents=True)
    (site / "broken_model-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: broken-model\nVersion: 1.0\n"
    )
    (site / "broken_model-1.0.dist-info" / "entry_points.txt").write_text(
        "[semsearch.models]\nbroken = broken_model:model\nall-MiniLM-L6-v2 = broken_model:model\n"
    )
    (site / "broken_model.py").write_text(
        f"ONNX = {str(default_model_file())!r}\nTOKENIZER = {str(packaged_tokenizer())!r}\n"
        f"def model():\n    {declared}\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "broken_model", raising=False)
    with pytest.raises(ModelError, match=re.escape(message)):
        find_model("broken")
    models, problems = installed_models()
    assert models == []
    assert [p.split(":")[0] for p in problems] == ["all-MiniLM-L6-v2", "broken"]
    assert "the name is the built-in model's" in problems[0]
    code, out, err = run(capsys, "config")
    assert code == 0 and "broken" not in out
    assert "warning: model package broken: " in err and message in err


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["index", "--model", ""], 2, "--model needs a model's name"),
        (["index", "--model", "bge-small-en-v1.5"], 1, "No embedding model 'bge-small-en-v1.5'"),
        (["index", "--model", "e5", "--dry-run"], 1, "No embedding model 'e5' is installed"),
    ],
)
def test_index_model_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], code: int, message: str
) -> None:
    run(capsys, "add", str(write_tree(tmp_path / "p", {"a.txt": "alpha"})))
    result, _, err = run(capsys, *argv)
    assert result == code and message in err


def test_a_damaged_model_package_is_refused(
    model_site: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    site = tmp_path / "site"
    shutil.copytree(model_site, site)
    monkeypatch.syspath_prepend(str(site))
    # an earlier test imported the package from the intact copy: import this one
    monkeypatch.delitem(sys.modules, "semsearch_model_minilm_cls", raising=False)
    folder = site / "semsearch_model_minilm_cls"
    with (folder / "model.onnx").open("ab") as handle:
        handle.write(b"\0")  # a changed byte count: not the file the wheel pinned
    package = find_model(NAME)
    assert package is not None
    with pytest.raises(
        ModelError, match="pip install --force-reinstall semsearch-model-minilm-cls"
    ):
        OnnxEmbedder(package=package).embed(["anything"])
    os.remove(folder / "tokenizer.json")
    with pytest.raises(ModelError, match=r"tokenizer\.json is missing; reinstall its package"):
        find_model(NAME)
    code, out, err = run(capsys, "config")
    assert code == 0 and NAME not in out and "warning: model package minilm-cls:" in err


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if byte < 0x80:
            return value, at


def _put_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


def _fields(message: bytes) -> list[tuple[int, int, bytes]]:
    """A protobuf message's fields in order: (number, wire type, the value's bytes)."""
    fields, at = [], 0
    while at < len(message):
        key, at = _varint(message, at)
        number, wire = key >> 3, key & 7
        start = at
        if wire == 0:
            at = _varint(message, at)[1]
        elif wire == 2:
            size, start = _varint(message, at)
            at = start + size
        else:
            at += {1: 8, 5: 4}[wire]
        fields.append((number, wire, message[start:at]))
    return fields


def _message(fields: list[tuple[int, int, bytes]]) -> bytes:
    out = bytearray()
    for number, wire, value in fields:
        out += _put_varint(number << 3 | wire)
        out += _put_varint(len(value)) if wire == 2 else b""
        out += value
    return bytes(out)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _ids_first(model: bytes, only: bool = False) -> bytes:
    """The ONNX model with a first output that gives the input ids back (an Identity node), as
    some exports have: ModelProto.graph (7); GraphProto node (1), input (11), output (12);
    ValueInfoProto name (1); NodeProto input (1), output (2), name (3), op_type (4)."""
    top = _fields(model)
    at = next(i for i, (number, _, _) in enumerate(top) if number == 7)
    graph = _fields(top[at][2])
    ids = next(v for n, _, v in graph if n == 11 and _fields(v)[0][2] == b"input_ids")
    output = _message([(1, 2, b"token_ids"), *(f for f in _fields(ids) if f[0] != 1)])
    node = _message(
        [(1, 2, b"input_ids"), (2, 2, b"token_ids"), (3, 2, b"ids"), (4, 2, b"Identity")]
    )
    first = next(i for i, (number, _, _) in enumerate(graph) if number == 12)
    rest = [f for f in graph[first:] if f[0] != 12] if only else graph[first:]
    graph = [(1, 2, node), *graph[:first], (12, 2, output), *rest]
    top[at] = (7, 2, _message(graph))
    return _message(top)


def test_a_model_that_gives_its_ids_back_first_embeds_from_its_token_states(
    installed: Path, tmp_path: Path
) -> None:
    """paraphrase-MiniLM-L3-v2's file on PyPI lists the input ids as its first output: the
    vectors come from the first floating-point output, here the same as the plain file's."""
    package = find_model(NAME)
    assert package is not None
    original = default_model_file().read_bytes()
    model = _ids_first(original)
    (tmp_path / "model.onnx").write_bytes(model)
    ids_first = replace(
        package,
        onnx=tmp_path / "model.onnx",
        sha256=_sha256(model),
        pooling="mean",
        query_prefix="",
    )
    outputs = onnxruntime.InferenceSession(str(tmp_path / "model.onnx")).get_outputs()
    assert [o.type for o in outputs[:2]] == ["tensor(int64)", "tensor(float)"]
    texts = ["How are chunk vectors stored in the index?", "def parse_header(line): ..."]
    ours = OnnxEmbedder(package=ids_first).embed(texts)
    plain = OnnxEmbedder(variant="fp32").embed(texts)  # the same weights, mean-pooled
    np.testing.assert_allclose(ours, plain, atol=1e-5)
    # a file with no floating-point output at all is refused, not read as vectors
    (tmp_path / "ids.onnx").write_bytes(ids_only := _ids_first(original, only=True))
    nothing = replace(ids_first, onnx=tmp_path / "ids.onnx", sha256=_sha256(ids_only))
    with pytest.raises(ModelError, match=r"no floating-point output .*token_ids \(tensor"):
        OnnxEmbedder(package=nothing).embed(texts)


def test_a_model_that_cannot_run_leaves_the_index_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``index --model`` with a package whose file gives no vectors (only its ids) fails
    before the index's vectors are cleared: the index keeps its model and every vector."""
    ids_only = _ids_first(default_model_file().read_bytes(), only=True)
    _, site = _installed_wheel(tmp_path / "package", ids_only, "ids-only", "--pooling", "mean")
    project = write_tree(tmp_path / "project", {"a.py": "def parse_header(line):\n    pass\n"})
    run(capsys, "add", str(project))
    assert run(capsys, "index")[0] == 0
    before = json.loads(run(capsys, "status", "--json")[1])
    monkeypatch.syspath_prepend(str(site))
    code, _, err = run(capsys, "index", "--model", "ids-only")
    assert code == 1 and "no floating-point output" in err
    after = json.loads(run(capsys, "status", "--json")[1])
    assert after["model"] == before["model"] and after == before
    code, out, _ = run(capsys, "search", "header parsing", "--mode", "vector", "--json")
    assert code == 0 and json.loads(out)["results"][0]["relPath"] == "a.py"


def test_a_change_of_model_that_finds_no_room_to_copy_keeps_the_old_index_whole(
    installed: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    mount_points: list[Path],
) -> None:
    """SQLite: the disk fills up (a real tmpfs, filled just before the copy) when the new
    model's index is whole beside the index: the run says so in one line, the old index keeps
    its model, every vector and its integrity, and once there is room a plain run copies the
    new one in without embedding anything again."""
    cap = capped_folder(tmp_path / "cap", "8m", mount_points)
    db = cap / "index.db"
    monkeypatch.setenv("SS_INDEX_PATH", str(db))
    notes = {f"n{i:02d}.md": f"Note {i}: " + LOREM * 4 for i in range(60)}
    project = write_tree(tmp_path / "project", {**notes, "last.md": "The heron came back.\n"})
    assert run(capsys, "add", str(project))[0] == 0
    assert run(capsys, "index")[0] == 0
    old = json.loads(run(capsys, "status", "--json")[1])
    fillers: list[Path] = []

    copy = SqliteStore.replace_with

    def fill_then_copy(index: SqliteStore, built: SqliteStore) -> None:
        fillers.append(fill_disk(cap, leave=64 * 1024))  # a copy needs ~450 KB
        copy(index, built)

    with monkeypatch.context() as patched:
        patched.setattr(SqliteStore, "replace_with", fill_then_copy)
        code, _, err = run(capsys, "index", "--model", NAME)
    assert code == 1 and fillers
    (line,) = error_lines(err)
    assert f"index {db}: disk full" in line, line
    assert integrity(db) == "ok" and next_path(db).exists()
    status = json.loads(run(capsys, "status", "--json")[1])
    assert status["model"] == old["model"] and status["chunks"] == old["chunks"]
    assert status["chunksPending"] == 0 and status["nextModel"].startswith(f"{NAME}@")
    code, out, _ = run(capsys, "search", "heron", "--mode", "vector", "--json")
    assert code == 0 and json.loads(out)["results"][0]["relPath"] == "last.md"

    fillers[0].unlink()
    code, out, _ = run(capsys, "index", "--json")
    report = json.loads(out)
    assert code == 0 and report["model"].startswith(f"{NAME}@")
    assert report["filesIndexed"] == 0 and report["chunksEmbedded"] == 0
    assert integrity(db) == "ok" and not next_path(db).exists()
    assert json.loads(run(capsys, "status", "--json")[1])["chunks"] == old["chunks"]


def test_a_next_index_that_cannot_be_removed_is_named(
    installed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Giving a change up removes the next index; when the file cannot go (immutable, even to
    root), the run stops before writing anything and names it."""
    project = write_tree(
        tmp_path / "project",
        {"a.py": "def parse_header(line):\n    pass\n", "b.py": "def emit(x):\n    pass\n"},
    )
    assert run(capsys, "add", str(project))[0] == 0
    assert run(capsys, "index")[0] == 0
    assert run(capsys, "index", "--model", NAME, "--max-files", "1")[0] == 0
    beside = next_path(load_settings(os.environ).store_path)
    before = json.loads(run(capsys, "status", "--json")[1])
    make_immutable(beside)
    try:
        code, _, err = run(capsys, "index", "--model", "all-MiniLM-L6-v2")
    finally:
        subprocess.run(["chattr", "-i", str(beside)], check=True)
    assert code == 1 and f"Cannot remove {beside.name}, a change of model left beside" in err
    assert "Remove it by hand" in err and "Traceback" not in err
    assert json.loads(run(capsys, "status", "--json")[1]) == before
    assert run(capsys, "index", "--model", "all-MiniLM-L6-v2")[0] == 0 and not beside.exists()


def test_indexing_one_folder_during_a_change_of_model_keeps_the_change_waiting(
    installed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``index PATH`` while a change of model waits beside an index of two folders updates
    that folder with the index's model (the change would drop the other one's chunks) and
    keeps the change; a run over every folder finishes it."""
    notes = write_tree(tmp_path / "notes", {"plan.md": "The budget review is on Tuesday."})
    code = write_tree(
        tmp_path / "code",
        {"retry.py": "def retry(call):\n    return call()\n", "b.py": "def emit(x):\n    pass\n"},
    )
    assert run(capsys, "add", str(notes), str(code))[0] == 0
    old = json.loads(run(capsys, "index", "--json")[1])["model"]
    assert run(capsys, "index", "--model", NAME, "--max-files", "1")[0] == 0
    write_tree(code, {"new.py": "def added():\n    pass\n"})

    result, out, _ = run(capsys, "index", str(code), "--json")
    report = json.loads(out)
    assert result == 0 and report["model"] == old and report["filesIndexed"] == 1
    assert report["nextModel"].startswith(f"{NAME}@")
    assert next_path(load_settings(os.environ).store_path).exists()

    result, out, _ = run(capsys, "index", "--json")
    report = json.loads(out)
    assert result == 0 and report["model"].startswith(f"{NAME}@") and report["nextModel"] is None
    assert json.loads(run(capsys, "status", "--json")[1])["files"] == 4
    assert report["chunksEmbedded"] == 3  # the cut run's one chunk kept its vector


def test_a_damaged_next_index_is_made_anew(
    installed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A next index that is no SQLite file (bytes written over it) names no waiting change in
    ``status``, and ``index --model`` builds a new one in its place."""
    project = write_tree(tmp_path / "project", {"a.py": "def parse_header(line):\n    pass\n"})
    assert run(capsys, "add", str(project))[0] == 0
    assert run(capsys, "index")[0] == 0
    beside = next_path(load_settings(os.environ).store_path)
    beside.write_bytes(os.urandom(64 * 1024))
    status = json.loads(run(capsys, "status", "--json")[1])
    assert status["nextModel"] is None and status["files"] == 1
    code, out, _ = run(capsys, "index", "--model", NAME, "--json")
    report = json.loads(out)
    assert code == 0 and report["model"].startswith(f"{NAME}@") and report["filesIndexed"] == 1
    assert not beside.exists()
