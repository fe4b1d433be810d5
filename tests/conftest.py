"""Test-suite settings shared by every folder.

Under continuous integration (``CI`` set) hypothesis runs derandomized: the same examples every
run, so a submission is judged on the code, not on which random examples a run happened to draw.
Locally each run explores new examples (and a failure prints the example that reproduces it).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
