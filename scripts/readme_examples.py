"""Run the commands of the README's examples and check (or write) the output shown there.

Each example in README.md sits between ``<!-- example: NAME -->`` and ``<!-- /example -->``: an
indented block of ``$ semsearch ...`` lines, each followed by what it printed. This script
builds the example folder (:data:`FILES`) at a fixed place, runs every command there with the
real model in a fresh config and index, and compares. Scores, sizes, durations and dates vary
with the CPU and the clock, so the check compares them as shapes (``0.###``); the words, paths,
counts and line numbers must be the same.

    python scripts/readme_examples.py            # check: exit 1 and a diff when they differ
    python scripts/readme_examples.py --write    # write the output of this run into README.md
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
WORK = Path("/tmp/semsearch-example")  # fixed: the paths printed are part of the output
PROJECT = WORK / "shop"

FILES = {
    "payments/retry.py": (
        "import time\n\n\n"
        "def retry_with_backoff(charge, attempts=5, base_delay=0.5):\n"
        '    """Call charge() until it succeeds, doubling the delay after each failure."""\n'
        "    for attempt in range(attempts):\n"
        "        try:\n"
        "            return charge()\n"
        "        except ConnectionError:\n"
        "            time.sleep(base_delay * 2**attempt)\n"
        '    raise RuntimeError("payment failed after retries")\n'
    ),
    "payments/card.py": (
        "class CardDeclined(Exception):\n"
        '    """The bank refused the card: never retried."""\n\n\n'
        "def charge_card(card, amount):\n"
        '    """Ask the bank to move ``amount`` from the card; raises CardDeclined."""\n'
        "    if amount <= 0:\n"
        '        raise ValueError("amount must be positive")\n'
        "    return card.bank.transfer(card.number, amount)\n"
    ),
    "docs/payments.md": (
        "# Payments\n\n"
        "A failed card payment is retried with exponential backoff, up to five times.\n"
        "A declined card is not retried: the customer is asked for another card.\n"
    ),
    "notes/2026-11-standup.md": (
        "Standup notes\n\n"
        "- Move the nightly export to 02:00.\n"
        "- The warehouse budget review is next Tuesday.\n"
    ),
    "tests/test_retry.py": (
        "from payments.retry import retry_with_backoff\n\n\n"
        "def test_gives_up_after_five_attempts():\n"
        "    calls = []\n"
        "    def charge():\n"
        "        calls.append(1)\n"
        '        raise ConnectionError("down")\n'
        "    try:\n"
        "        retry_with_backoff(charge, base_delay=0)\n"
        "    except RuntimeError:\n"
        "        pass\n"
        "    assert len(calls) == 5\n"
    ),
    "logo.png": "\x89PNG fake image bytes\n",
}

BLOCK = re.compile(r"(<!-- example: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /example -->)", re.S)
# What varies with the CPU and the clock, compared as shapes.
VARYING = [
    (re.compile(r"\b\d\.\d{3}\b"), "0.###"),  # scores
    (re.compile(r"\b\d+\.\ds\b"), "#.#s"),  # durations
    (re.compile(r"\(\d+(\.\d+)? [kKMG]?B\)"), "(# B)"),  # sizes
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d"), "YYYY-MM-DD hh:mm"),  # dates
]


def build() -> dict[str, str]:
    """The example folder, fresh, and the environment the commands run in."""
    shutil.rmtree(WORK, ignore_errors=True)
    for rel, text in FILES.items():
        path = PROJECT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if not key.startswith("SS_")}
    env.update(
        {
            "HOME": str(WORK / "home"),
            "XDG_CONFIG_HOME": str(WORK / "home" / ".config"),
            "XDG_DATA_HOME": str(WORK / "home" / ".local" / "share"),
            "XDG_CACHE_HOME": str(WORK / "home" / ".cache"),
            "SS_INDEX_PATH": str(WORK / "index.db"),
            "COLUMNS": "100",
            "NO_COLOR": "1",
            "SS_MODEL_VARIANT": "int8",  # the model id printed is the same on every host
        }
    )
    return env


def run(command: str, env: dict[str, str]) -> str:
    """``$ command`` and what it printed (stdout and stderr, as a terminal shows them)."""
    argv = shlex.split(command)
    assert argv[0] == "semsearch", command
    done = subprocess.run(
        [sys.executable, "-m", "semsearch", *argv[1:]],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return f"$ {command}\n{done.stdout}{done.stderr}"


def commands_of(body: str) -> list[str]:
    """The ``$ semsearch ...`` lines of a README block, in order."""
    return [line.strip()[2:] for line in body.splitlines() if line.strip().startswith("$ ")]


def rendered(outputs: list[str]) -> str:
    """An indented Markdown code block of the commands and their output."""
    lines = "".join(outputs).rstrip("\n").split("\n")
    return "\n" + "\n".join(f"    {line}" if line else "" for line in lines) + "\n\n"


def shape(text: str) -> str:
    """``text`` with what varies between hosts and runs replaced by its shape."""
    for pattern, replacement in VARYING:
        text = pattern.sub(replacement, text)
    return text


def main(argv: list[str] | None = None) -> int:
    """Check (default) or write the README's example blocks."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write this run's output")
    args = parser.parse_args(argv)
    readme = README.read_text(encoding="utf-8")
    env = build()
    blocks = list(BLOCK.finditer(readme))
    if not blocks:
        print("README.md holds no example block", file=sys.stderr)
        return 1
    fresh = readme
    for block in blocks:  # in README order: later examples see what earlier ones did
        body = rendered([run(command, env) for command in commands_of(block["body"])])
        fresh = fresh.replace(block.group(0), block.group(1) + body + block.group(4), 1)
    if args.write:
        README.write_text(fresh, encoding="utf-8")
        return 0
    if shape(fresh) == shape(readme):
        print(f"{len(blocks)} README examples match what the commands print")
        return 0
    diff = difflib.unified_diff(
        shape(readme).splitlines(), shape(fresh).splitlines(), "README.md", "this run", lineterm=""
    )
    print("\n".join(diff))
    print("\nThe README's examples differ: run `python scripts/readme_examples.py --write`.")
    return 1


if __name__ == "__main__":
    sys.exit(main())
