"""The packages depend one way: the app ``specsim`` on ``reports`` and ``calibration``, those on
``sim``, and never back.

Every module's imports are read with :mod:`ast` (top-level and function-level, ``import x`` and
``from x import y``, relative ones resolved), so an import hidden inside a function to dodge a
cycle counts like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: For each package, the packages of the project it must never import. ``tools`` (scripts that
#: rebuild shipped data) is not installed, so no package may need it.
FORBIDDEN = {
    "sim": {"specsim", "reports", "calibration", "tools"},
    "reports": {"specsim", "tools"},
    "calibration": {"specsim", "tools"},
    "specsim": {"tools"},
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, module: str) -> set[str]:
    """Every module named by an import statement in the file at ``path``, the module ``module``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module.split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                found.add(".".join([*base, node.module] if node.module else base))
            elif node.module is not None:
                found.add(node.module)
    return found


def _violations(package: str) -> list[str]:
    forbidden = FORBIDDEN[package]
    rows = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for module in sorted(imported_modules(path, _module_name(path))):
            if module.split(".")[0] in forbidden:
                rows.append(f"{path.relative_to(ROOT)} imports {module}")
    return rows


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_package_imports_a_layer_above_it(package: str) -> None:
    assert (ROOT / package / "__init__.py").is_file()
    assert _violations(package) == []


def test_acceptance_models_import_nothing_from_the_engine() -> None:
    # Inside ``sim`` the engine builds on the acceptance models (``sim.engine.drafter`` imports
    # ``sim.acceptance.plan``); the per-step policies that choose k are engine step decisions and
    # live in ``sim.engine.policies``. An import back from ``sim.acceptance`` would make the two
    # packages import each other again.
    package = ROOT / "sim" / "acceptance"
    assert (package / "__init__.py").is_file()
    rows = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in sorted(package.rglob("*.py"))
        for module in sorted(imported_modules(path, _module_name(path)))
        if module == "sim.engine" or module.startswith("sim.engine.")
    ]
    assert rows == []


def test_the_walk_sees_imports_inside_functions_and_relative_ones(tmp_path: Path) -> None:
    # The check above is only as good as this reader: it must find what a lazy import hides.
    source = tmp_path / "probe.py"
    source.write_text(
        "import os\n"
        "from .stability import Target\n"
        "def f():\n"
        "    from reports.sweep import run_sweep\n"
        "    import specsim.cli as cli\n"
        "    return cli, run_sweep\n"
    )
    assert imported_modules(source, "reports.probe") == {
        "os",
        "reports.stability",
        "reports.sweep",
        "specsim.cli",
    }


def test_the_app_is_what_runs_the_command_line() -> None:
    # `python -m specsim` and the `specsim` script are the app's; sim has no __main__ of its own.
    assert (ROOT / "specsim" / "__main__.py").is_file()
    assert not (ROOT / "sim" / "__main__.py").exists()
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'specsim = "specsim.cli:main"' in pyproject
