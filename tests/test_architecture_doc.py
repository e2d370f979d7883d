"""docs/ARCHITECTURE.md names the file of every module of the three packages."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _named(doc: str, path: Path) -> bool:
    rel = path.relative_to(ROOT)
    inside = Path(*rel.parts[1:])  # the path inside its package: envs/actions.py
    if any(f"`{p}" in doc or f"{p}`" in doc for p in (rel.as_posix(), inside.as_posix())):
        return True
    # Or by its own name in a row that names its folder: `crop_gym/workloads/` (`loader.py`, ...).
    folder = f"{rel.parent.name}/"
    return any(f"`{path.name}`" in line and folder in line for line in doc.splitlines())


def test_every_module_is_named_in_the_architecture_doc() -> None:
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    missing = [
        path.relative_to(ROOT).as_posix()
        for package in ("crop_gym", "agents", "baselines")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "__init__.py" and not _named(doc, path)
    ]
    assert not missing, f"docs/ARCHITECTURE.md does not name: {missing}"
