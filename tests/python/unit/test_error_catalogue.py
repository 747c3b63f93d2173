"""One error catalogue: python/durajobs/error_codes.toml gives every code its SQLSTATE and fixes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import durajobs
from durajobs._db.migrations import package_sql_dir
from durajobs.errors import (
    CATALOGUE,
    DurajobsError,
    ErrorCodeDuplicate,
    error_codes_markdown,
    error_codes_sql,
    registered_errors,
)

ROOT = Path(__file__).resolve().parents[3]


def test_the_sql_registry_is_written_from_the_catalogue():
    """scripts/sync-error-codes writes the insert; a hand edit of either copy fails here."""
    source = (package_sql_dir() / "functions" / "010_util.sql").read_text()
    assert error_codes_sql() in source


def test_docs_errors_is_written_from_the_catalogue():
    """scripts/sync-error-codes writes docs/errors.md too; a hand edit fails here."""
    assert (ROOT / "docs" / "errors.md").read_text() == error_codes_markdown()


def test_every_code_has_its_anchor_in_docs_errors():
    headings = re.findall(r"^### (X_[A-Z_]+)$", (ROOT / "docs" / "errors.md").read_text(), re.M)
    assert sorted(headings) == sorted(CATALOGUE)
    for code in CATALOGUE:
        cls = registered_errors()[code]
        assert cls.docs == f"docs/errors.md#{code.lower()}"
        assert cls.when, f"{code} says when it is raised"


def test_every_catalogued_code_has_its_class_exported_from_durajobs():
    for code, entry in CATALOGUE.items():
        cls = getattr(durajobs, entry["class"])
        assert cls.code == code
        assert cls.fix == entry["fix"]
        assert cls.sqlstate == entry.get("sqlstate")
        assert registered_errors()[code] is cls


def test_every_durajobs_error_class_is_catalogued():
    own = {
        code: cls
        for code, cls in registered_errors().items()
        if cls.__module__.startswith("durajobs") and cls is not DurajobsError
    }
    assert set(own) - {"X_DEMO_CARD_DECLINED"} <= set(CATALOGUE)


def test_a_catalogued_class_may_not_carry_its_own_fix():
    with pytest.raises(TypeError, match=r"error_codes\.toml"):

        class JobNotFound(DurajobsError):
            code = "X_JOB_NOT_FOUND"
            fix = "a second copy of the fix"


def test_the_operator_refusals_carry_a_shell_fix():
    """`durajobs jobs ...` answers these with a command instead of the SQL call."""
    fixed = {code for code, entry in CATALOGUE.items() if "shell_fix" in entry}
    assert fixed == {
        "X_JOB_NOT_FOUND",
        "X_JOB_NOT_CANCELLABLE",
        "X_JOB_NOT_REQUEUEABLE",
        "X_JOB_DUPLICATE",
        "X_JOB_NOT_REMOVABLE",
        "X_JOB_NOT_PROMOTABLE",
        "X_JOB_PAGE_INVALID",
        "X_JOB_FAILED",
        "X_JOB_RESULT_TIMEOUT",
    }
    assert durajobs.JobNotRemovable.shell_fix == CATALOGUE["X_JOB_NOT_REMOVABLE"]["shell_fix"]
    assert durajobs.ArgumentInvalid.shell_fix is None


def test_a_second_class_claiming_a_code_is_refused():
    with pytest.raises(ErrorCodeDuplicate):

        class Impostor(DurajobsError):
            code = "X_JOB_DUPLICATE"
