"""What a built wheel holds: every directory of Python modules in the product's packages is a
package that pyproject.toml's package discovery finds (a directory without ``__init__.py`` imports
from a checkout as a namespace package, yet a wheel built by ``packages.find`` leaves it out)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).parents[1]


def test_every_module_directory_is_a_package_the_wheel_ships() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    found = set(find_packages(where=str(ROOT), include=include))
    roots = sorted({pattern.rstrip("*") for pattern in include})
    expected = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for root in roots
        for path in (ROOT / root).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert expected - found == set()
