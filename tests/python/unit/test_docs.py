"""The documentation agrees with the source: every public SQL function has its section in
docs/sql.md, no section names a function that is gone, and the README's set-up commands exist."""

from __future__ import annotations

import os
import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[3]
SQL_FUNCTIONS = REPOSITORY / "sql" / "functions"
SQL_REFERENCE = REPOSITORY / "docs" / "sql.md"
README = REPOSITORY / "README.md"

CREATE_FUNCTION = re.compile(
    r"^\s*create\s+(?:or\s+replace\s+)?function\s+jobs\.(\w+)", re.IGNORECASE | re.MULTILINE
)
NAMED_IN_HEADING = re.compile(r"`jobs\.(\w+)`")


def _public_functions() -> set[str]:
    names = {
        match.group(1)
        for path in sorted(SQL_FUNCTIONS.glob("*.sql"))
        for match in CREATE_FUNCTION.finditer(path.read_text())
    }
    return {name for name in names if not name.startswith("_")}


def _outside_code(lines: list[str]) -> list[str]:
    """Answer the lines of a markdown file that are not inside a fenced code block."""
    kept, fenced = [], False
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(line)
    return kept


def _reference_lines() -> list[str]:
    return _outside_code(SQL_REFERENCE.read_text().splitlines())


def _function_headings(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("### ")]


def _section_four(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if line.startswith("## 4. "))
    end = next(i for i, line in enumerate(lines) if line.startswith("## 5. "))
    return lines[start:end]


def test_every_public_function_has_exactly_one_section_in_the_sql_reference():
    functions = _public_functions()
    assert "enqueue" in functions, "no function was read from sql/functions"
    headings = _function_headings(_reference_lines())
    named = [name for heading in headings for name in NAMED_IN_HEADING.findall(heading)]

    missing = sorted(name for name in functions if name not in named)
    repeated = sorted(name for name in functions if named.count(name) > 1)

    assert missing == [], f"docs/sql.md has no ### heading for jobs.{missing}"
    assert repeated == [], f"docs/sql.md has more than one ### heading for jobs.{repeated}"


def test_every_function_a_section_four_heading_names_exists():
    functions = _public_functions()
    headings = _function_headings(_section_four(_reference_lines()))
    named = {name for heading in headings for name in NAMED_IN_HEADING.findall(heading)}

    assert named, "section 4 of docs/sql.md names no function in a ### heading"
    assert sorted(named - functions) == []


def test_the_sql_reference_is_arranged_by_topic_not_by_revision():
    headings = [line for line in _reference_lines() if line.startswith("#")]

    assert [heading for heading in headings if "Revision 00" in heading] == []


def test_the_readme_set_up_block_names_scripts_that_exist_and_run():
    lines = README.read_text().splitlines()
    heading = next(i for i, line in enumerate(lines) if line.startswith("## Set up"))
    opening = next(i for i in range(heading, len(lines)) if lines[i].startswith("```"))
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i].startswith("```"))
    commands = [line.split()[0] for line in lines[opening + 1 : closing] if line.strip()]

    assert commands == ["./scripts/demo", "./scripts/test"]
    for command in commands:
        script = REPOSITORY / command
        assert script.is_file(), f"{command} does not exist"
        assert os.access(script, os.X_OK), f"{command} is not executable"
