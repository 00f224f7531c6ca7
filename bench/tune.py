"""Run a bench script with ranking knobs changed in-process, for tuning loops.

    python bench/tune.py STEM_BOOST=1.2 FILE_DECAY=0.6 -- EVAL/codesearch EVAL/codebench-wide \
        --repos WORK/repos7 --repos WORK/repos39 --no-update --quiet
    python bench/tune.py FILE_COHERENCE=0 -- bench/quality.py EVAL/scifact --reuse-index

After ``--`` come bench/codesearch.py's arguments, or another script's path and its arguments.

Each ``NAME=VALUE`` (a Python literal) is set on every loaded ``semsearch`` module that has the
name, so a knob imported by name into another module changes there too. The tuning log in
bench/RESULTS.md records what each setting measured; the kept values live in semsearch/ranking.py.
A knob that is the default of a dataclass field (``RRF_K`` is ``Settings.rrf_k``, config key
``rrfK``) took its value when the class was made, so it is refused rather than set in vain.
"""

from __future__ import annotations

import ast
import dataclasses
import runpy
import sys
import types

import codesearch

import semsearch.search.fusion


def main(argv: list[str]) -> int:
    """Apply the settings before ``--``, then run codesearch.main with the rest."""
    split = argv.index("--") if "--" in argv else len(argv)
    settings, rest = argv[:split], argv[split + 1 :]
    modules = [m for name, m in sys.modules.items() if name.startswith("semsearch") and m]
    assert semsearch.search.fusion  # imported so that the ranking modules are loaded
    for setting in settings:
        name, _, value = setting.partition("=")
        owners = [m for m in modules if hasattr(m, name)]
        if not owners:
            raise SystemExit(f"no semsearch module has {name}")
        frozen = _dataclass_defaults(modules, name.lower())
        if frozen:  # a field default took the value when its class was made: setting it is moot
            raise SystemExit(f"{name} is the default of {', '.join(frozen)}: set it there")
        for module in owners:
            setattr(module, name, ast.literal_eval(value))
        print(f"{name} = {value} in {', '.join(m.__name__ for m in owners)}", file=sys.stderr)
    if rest and rest[0].endswith(".py"):
        sys.argv = rest
        runpy.run_path(rest[0], run_name="__main__")
        return 0
    return codesearch.main(rest)


def _dataclass_defaults(modules: list[types.ModuleType], field: str) -> list[str]:
    """The dataclasses of ``modules`` with a field named ``field`` that has a default."""
    found = []
    for module in modules:
        for value in vars(module).values():
            if dataclasses.is_dataclass(value) and isinstance(value, type):
                fields = {f.name: f for f in dataclasses.fields(value)}
                if field in fields and fields[field].default is not dataclasses.MISSING:
                    found.append(f"{value.__module__}.{value.__name__}.{field}")
    return sorted(set(found))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
