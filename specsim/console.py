"""The command line's two consoles and the one place a user's mistake becomes exit code 2.

Every command module imports these from here, so the modules that register commands never import
the application that registers them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import typer
from rich.console import Console

from sim.errors import SpecsimError

console = Console()
err_console = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])


def user_errors(func: F) -> F:
    """Turn specsim's own errors into a message on stderr and exit code 2."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except SpecsimError as exc:
            err_console.print(
                f"[bold red]error:[/] {exc}", highlight=False, markup=True, soft_wrap=True
            )
            raise typer.Exit(code=2) from None

    return wrapper  # type: ignore[return-value]
