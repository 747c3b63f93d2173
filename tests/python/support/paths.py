"""Where things are, whichever folder a test module sits in."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]  # tests/python: the working directory of --app
REPOSITORY = TESTS.parents[1]
FIXTURES = TESTS / "fixtures"
