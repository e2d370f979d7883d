"""The teaching notebooks run in a real Jupyter kernel, within budget, and their stored outputs are fresh.

Each notebook in ``notebooks/`` is executed top to bottom by ``nbclient`` in a new ``ipykernel``
(``notebooks/execute.py``: the repository on ``PYTHONPATH``, one thread per numeric library). Then:

* **budget**: the kernel's CPU time (user + system) is at most ``BUDGET_CPU_S`` (3 minutes);
* **staleness**: every code cell's fresh outputs match the stored ones — same output types and MIME
  types, same text once numbers are taken out, and every number equal to within ``REL_TOL``
  (10^-4: a fitted parameter moves in its fifth or sixth digit between builds of scipy and BLAS)
  (a cell tagged ``loose`` keeps only the text and types: timings, wall-clock figures). Images are
  compared by presence only (PNG bytes are not reproducible across matplotlib builds);
* **solutions**: the ``python`` block of every ``<details><summary>Solution</summary>`` cell runs
  right after that cell, in the notebook's namespace, without error, and prints what the ``text``
  block after it says (same rule as above).

A stale notebook fails with the cell and the first differing line; ``python notebooks/execute.py``
refreshes the outputs (notebooks/README.md).
"""

from __future__ import annotations

import importlib.util
import re
import resource
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
REL_TOL = 1e-4
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
_SOLUTION = re.compile(r"<details>\s*<summary>Solution</summary>(.*?)</details>", re.S)
_BLOCK = re.compile(r"```(python|text)\n(.*?)```", re.S)


def _runner() -> Any:
    spec = importlib.util.spec_from_file_location("nb_execute", ROOT / "notebooks" / "execute.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _text(outputs: list[Any]) -> list[tuple[str, tuple[str, ...], str]]:
    """(output type, MIME types, text) of each output; streams of one name joined."""
    out: list[tuple[str, tuple[str, ...], str]] = []
    for o in outputs:
        kind = o["output_type"]
        if kind == "stream":
            if out and out[-1][0] == f"stream:{o['name']}":
                out[-1] = (out[-1][0], (), out[-1][2] + o["text"])
            else:
                out.append((f"stream:{o['name']}", (), o["text"]))
        elif kind == "error":
            out.append(("error", (), f"{o['ename']}: {o['evalue']}"))
        else:
            data = o.get("data", {})
            out.append((kind, tuple(sorted(data)), data.get("text/plain", "")))
    return out


def _same_text(old: str, new: str, loose: bool) -> str | None:
    """None when the texts agree (see the module docstring), else the first differing line."""
    for a, b in zip(old.splitlines(), new.splitlines()):
        if "<Figure size" in a and "<Figure size" in b:
            continue
        if _NUMBER.sub("#", a) != _NUMBER.sub("#", b):
            return f"stored {a!r}, fresh {b!r}"
        if loose:
            continue
        for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b)):
            fx, fy = float(x), float(y)
            if abs(fx - fy) > REL_TOL * max(abs(fx), abs(fy)) + 1e-12:
                return f"stored {a!r}, fresh {b!r}"
    if len(old.splitlines()) != len(new.splitlines()):
        return f"stored {len(old.splitlines())} lines, fresh {len(new.splitlines())}"
    return None


def _with_solutions(nb: Any) -> tuple[Any, list[tuple[int, str]]]:
    """A copy of ``nb`` without outputs, each solution's code inserted after its cell; the
    indices of the inserted cells in the copy, with their expected text (may be empty)."""
    fresh = nbformat.reads(nbformat.writes(nb), as_version=4)
    cells: list[Any] = []
    solutions: list[tuple[int, str]] = []
    for cell in fresh.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cells.append(cell)
        if cell.cell_type != "markdown":
            continue
        for body in _SOLUTION.findall(cell.source):
            blocks = _BLOCK.findall(body)
            for i, (lang, code) in enumerate(blocks):
                if lang != "python":
                    continue
                expect = (
                    blocks[i + 1][1] if i + 1 < len(blocks) and blocks[i + 1][0] == "text" else ""
                )
                solutions.append((len(cells), expect))
                cells.append(nbformat.v4.new_code_cell(code))
    fresh.cells = cells
    return fresh, solutions


def test_there_are_six_lectures() -> None:
    assert len(NOTEBOOKS) >= 6, [p.name for p in NOTEBOOKS]


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_fresh(path: Path) -> None:
    stored = nbformat.read(path, as_version=4)
    code = [c for c in stored.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), f"{path.name}: not run top to bottom ({counts})"
    fresh, solutions = _with_solutions(stored)
    runner = _runner()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    runner.execute(fresh)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu <= runner.BUDGET_CPU_S, f"{path.name}: {cpu:.0f} CPU-s > {runner.BUDGET_CPU_S}"

    inserted = {i for i, _ in solutions}
    fresh_code = [
        c for i, c in enumerate(fresh.cells) if c.cell_type == "code" and i not in inserted
    ]
    assert len(fresh_code) == len(code)
    for n, (old, new) in enumerate(zip(code, fresh_code), start=1):
        loose = "loose" in old.metadata.get("tags", [])
        a, b = _text(old.outputs), _text(new.outputs)
        where = f"{path.name} code cell {n} (stale; run python notebooks/execute.py)"
        assert [x[:2] for x in a] == [x[:2] for x in b], f"{where}: outputs {a} vs {b}"
        for (_, _, ta), (_, _, tb) in zip(a, b):
            diff = _same_text(ta, tb, loose)
            assert diff is None, f"{where}: {diff}"
    for i, expect in solutions:
        outs = _text(fresh.cells[i].outputs)
        assert all(kind != "error" for kind, _, _ in outs), f"{path.name}: solution {i} {outs}"
        if expect:
            printed = "".join(t for kind, _, t in outs if kind.startswith("stream"))
            diff = _same_text(expect, printed, loose=False)
            assert diff is None, f"{path.name}: solution before cell {i}: {diff}"
