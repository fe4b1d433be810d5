"""The README's two fresh-machine commands: the test command is the one CI runs, verbatim."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _fresh_machine_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section)


def test_the_readme_has_two_commands_and_ci_runs_the_test_one() -> None:
    commands = _fresh_machine_commands()
    assert len(commands) == 2, commands
    main_job, test_command = commands
    assert main_job.endswith("specsim run")
    assert "-rs" in test_command  # the skip reasons are shown
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_command in ci
