"""The public API at the package root: every name resolves, and lazily."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

import semsearch
from tests.conftest import write_tree

HEAVY = ("numpy", "onnxruntime", "tokenizers", "mcp", "lancedb", "pypdf", "docx")


def test_every_public_name_resolves_to_its_definition() -> None:
    for name in semsearch.__all__:
        value = getattr(semsearch, name)
        assert value.__name__ == name
        assert value.__module__.startswith("semsearch.")
        assert inspect.getdoc(value), name
    assert set(semsearch.__all__) <= set(dir(semsearch))
    assert issubclass(semsearch.UsageError, semsearch.SemsearchError)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Indexx'"):
        semsearch.Indexx  # noqa: B018


def test_the_readme_example_runs_through_the_root(tmp_path: Path) -> None:
    notes = write_tree(tmp_path / "notes", {"budget.md": "The quarterly budget is final.\n"})
    index = semsearch.Index(semsearch.load_settings(os.environ), embedder=semsearch.HashEmbedder())
    report = index.update([notes])
    assert isinstance(report, semsearch.IndexReport)
    (hit,) = index.search("quarterly budget", k=5, glob="*.md")
    assert isinstance(hit, semsearch.Hit) and hit.path == str(notes / "budget.md")
    (folder,) = index.folders()
    assert folder == semsearch.FolderInfo("notes", notes, False, 1, 1, folder.last_indexed)
    with pytest.raises(semsearch.UsageError, match="No folder named 'elsewhere'"):
        index.search("budget", folder="elsewhere")
    index.close()


LIGHT = f"""
import sys
import {{module}}
{{code}}
print(sorted(name for name in {HEAVY!r} if name in sys.modules))
"""


@pytest.mark.parametrize(
    ("module", "code"),
    [
        ("semsearch", "dir(semsearch); semsearch.SemsearchError; semsearch.load_settings"),
        ("semsearch.process", "import semsearch; semsearch.configure_process()"),
        (
            "semsearch.cli.commands",
            "semsearch.cli.commands.main(['--help']); semsearch.cli.commands.main(['list'])",
        ),
    ],
)
def test_importing_the_package_and_the_cli_loads_nothing_heavy(module: str, code: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", LIGHT.format(module=module, code=code)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=True,
    )
    assert result.stdout.strip().splitlines()[-1] == "[]"
