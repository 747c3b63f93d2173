"""Every regression id a test names (an `R` and a number, as a whole word, anywhere under tests/)
has its entry in docs/regressions.md, and every entry's `Guarded by:` files exist and name it."""

from __future__ import annotations

import re
from pathlib import Path

# as in test_docs.py: support.paths is not importable when mypy is given this file alone
REPOSITORY = Path(__file__).resolve().parents[3]
TESTS_ROOT = REPOSITORY / "tests"
REGRESSIONS = REPOSITORY / "docs" / "regressions.md"
THIS_FILE = Path(__file__).resolve()

REGRESSION_ID = re.compile(r"\bR([0-9]+)\b")
HEADING = re.compile(r"^### R([0-9]+) ")
GUARDED_BY = "Guarded by:"


def _test_files() -> list[Path]:
    """Answer the text files under tests/, leaving out this module and bytecode caches."""
    files = []
    for path in sorted(TESTS_ROOT.rglob("*")):
        if not path.is_file() or path.resolve() == THIS_FILE or "__pycache__" in path.parts:
            continue
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        files.append(path)
    return files


def _ids_in(text: str) -> set[int]:
    return {int(number) for number in REGRESSION_ID.findall(text)}


def _ids_used_by_tests() -> dict[int, list[str]]:
    """Answer each id a test file names, with the files (relative to the repository) naming it."""
    used: dict[int, list[str]] = {}
    for path in _test_files():
        relative = path.relative_to(REPOSITORY).as_posix()
        for number in _ids_in(path.read_text(encoding="utf-8")):
            used.setdefault(number, []).append(relative)
    return used


def _entries() -> dict[int, list[str]]:
    """Answer each `### R<n> ` heading of docs/regressions.md with the lines of its entry."""
    entries: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in REGRESSIONS.read_text(encoding="utf-8").splitlines():
        heading = HEADING.match(line)
        if heading:
            number = int(heading.group(1))
            assert number not in entries, f"docs/regressions.md has two ### R{number} headings"
            current = entries[number] = []
        elif line.startswith("#"):
            current = None
        elif current is not None:
            current.append(line)
    return entries


def _guarded_by(lines: list[str]) -> list[str] | None:
    """Answer the paths of an entry's `Guarded by:` list (which may wrap onto following lines),
    or None when the entry has none."""
    for index, line in enumerate(lines):
        if line.startswith(GUARDED_BY):
            text = line[len(GUARDED_BY) :]
            for following in lines[index + 1 :]:
                if not following.strip():
                    break
                text += " " + following
            return [part.strip().strip("`") for part in text.split(",") if part.strip()]
    return None


def _names(numbers: list[int]) -> str:
    return ", ".join(f"R{number}" for number in sorted(numbers))


def test_every_regression_id_a_test_names_has_an_entry() -> None:
    used = _ids_used_by_tests()
    assert used, "no regression id was found under tests/"
    entries = _entries()

    missing = sorted(number for number in used if number not in entries)

    assert missing == [], "docs/regressions.md has no ### heading for " + "; ".join(
        f"R{number} (named in {', '.join(used[number])})" for number in missing
    )


def test_every_entry_is_guarded_by_files_that_exist_and_name_it() -> None:
    entries = _entries()
    assert entries, "docs/regressions.md has no ### R<n> heading"
    unguarded: list[int] = []
    problems: list[str] = []

    for number, lines in sorted(entries.items()):
        paths = _guarded_by(lines)
        if not paths:
            unguarded.append(number)
            continue
        for relative in paths:
            path = REPOSITORY / relative
            if not path.is_file():
                problems.append(f"R{number}: {relative} does not exist")
            elif number not in _ids_in(path.read_text(encoding="utf-8")):
                problems.append(f"R{number}: {relative} does not mention R{number}")

    assert unguarded == [], f"entries with no '{GUARDED_BY}' files: {_names(unguarded)}"
    assert problems == [], "docs/regressions.md:\n" + "\n".join(problems)
