"""The README's example output is what the commands print today (issue 34, item 16)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "readme_examples.py"


def test_the_readme_examples_are_what_the_commands_print() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("4 README examples match")


def test_the_check_fails_on_a_changed_example(tmp_path: Path) -> None:
    readme = SCRIPT.parents[1] / "README.md"
    text = readme.read_text(encoding="utf-8")
    changed = text.replace("0 errors  0 deleted", "0 errors  9 deleted", 1)
    assert changed != text
    copy = tmp_path / "scripts"
    copy.mkdir()
    (tmp_path / "README.md").write_text(changed, encoding="utf-8")
    (copy / SCRIPT.name).write_text(SCRIPT.read_text(encoding="utf-8"), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(copy / SCRIPT.name)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=SCRIPT.parents[1],
    )
    assert done.returncode == 1
    assert "+      5 files (5 indexed, 0 unchanged)  1 skipped  0 errors  0 deleted" in done.stdout
