"""W223: every error code's fix is one line a caller can run, and this proves each one runs.

A fix is a SQL statement (planned by the server with EXPLAIN, so every function and argument
name it uses must resolve; a GRANT is executed and rolled back), a `durajobs` command (parsed by
the command's own parser), a shell line of a known program, or a Python line (parsed, and each
call it makes bound to the real signature of what it calls). `<placeholders>` are filled with
values of their kind first; `{fields}` of a shell fix with a job id.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import shlex
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from alembic.config import CommandLine

import durajobs
import durajobs.webhooks
from durajobs.cli.commands import _parser
from durajobs.declare.handle import JobHandle
from durajobs.declare.registry import Job, Registry
from durajobs.errors import CATALOGUE
from durajobs.runtime.attempt import JobContext
from durajobs.runtime.steps import AsyncSteps
from durajobs.services.relay import OutboxRelay

SAMPLE_ID = str(uuid.UUID(int=1))
LOGIN = "durajobs_fix_login"

# SQL placeholders whose value must be of a type; the rest become their words joined
SQL_VALUES = {
    "function": "purge",
    "input": "{}",
    "login": LOGIN,
}

# what each call a Python fix makes resolves to, by the dotted name it is written with
PYTHON_CALLS: dict[str, Callable[..., Any]] = {
    "registry.job": Registry(database_url="postgresql://unused").job,
    "registry.export": Registry(database_url="postgresql://unused").export,
    "registry.backfill": Registry(database_url="postgresql://unused").backfill,
    "durajobs.WebhookEndpoint": durajobs.WebhookEndpoint,
    "durajobs.Concurrency": durajobs.Concurrency,
    "durajobs.RetryPolicy.of": durajobs.RetryPolicy.of,
    "OutboxRelay": OutboxRelay,
    "job.enqueue": Job.enqueue,
    "handle.wait": JobHandle.wait,
    "ctx.step.run": AsyncSteps.run,
    "json.dumps": json.dumps,
    "durajobs.webhooks.signed_headers": durajobs.webhooks.signed_headers,
}
PYTHON_ATTRIBUTES = {"ctx.cancelled": JobContext}

SHELL_PROGRAMS = {"pip", "export", "alembic"}


def _words(placeholder: str) -> str:
    return re.sub(r"\W+", "_", placeholder).strip("_")


def _value(placeholder: str, values: dict[str, str]) -> str:
    if placeholder in values:
        return values[placeholder]
    # a job id, the last id of a page, the first characters of an id: a whole id serves
    return SAMPLE_ID if "id" in placeholder.split() else _words(placeholder)


def _fill(line: str, values: dict[str, str]) -> str:
    filled = re.sub(r"<([^<>]+)>", lambda m: _value(m[1], values), line)
    return re.sub(r"\{(\w+)\}", SAMPLE_ID, filled)


def _kind(line: str) -> str:
    head = line.split(maxsplit=1)[0].lower()
    if head in {"select", "grant"}:
        return "sql"
    if head == "durajobs":
        return "command"
    if head in SHELL_PROGRAMS:
        return "shell"
    return "python"


def _fixes() -> list[tuple[str, str, str]]:
    """(code, which fix, the line) for every fix of the catalogue."""
    found = []
    for code, entry in sorted(CATALOGUE.items()):
        found.append((code, "fix", entry["fix"]))
        if "shell_fix" in entry:
            found.append((code, "shell_fix", entry["shell_fix"]))
    return found


FIXES = _fixes()


@pytest.mark.parametrize(("code", "which", "line"), FIXES, ids=[f"{c}-{w}" for c, w, _ in FIXES])
def test_every_fix_is_one_line_without_prose_markup(code, which, line):
    assert "\n" not in line
    assert line == line.strip()
    assert "`" not in line, "a fix is the line itself, not prose quoting it"
    if which == "shell_fix":
        assert _kind(line) == "command", "a shell_fix is for a user of the durajobs command"


@pytest.mark.parametrize(
    ("code", "line"),
    [(c, line) for c, _, line in FIXES if _kind(line) == "sql"],
)
def test_a_sql_fix_is_planned_by_the_server(database_url, code, line):
    statement = _fill(line, SQL_VALUES)
    with psycopg.connect(database_url) as connection:
        # everything here is rolled back when the block leaves without a commit
        connection.execute("select jobs.grant_roles()")
        connection.execute(f"create role {LOGIN} nologin")
        if statement.lower().startswith("grant "):
            connection.execute(statement)
        else:
            connection.execute("explain " + statement)
        connection.rollback()


@pytest.mark.parametrize(
    ("code", "line"),
    [(c, line) for c, _, line in FIXES if _kind(line) == "command"],
)
def test_a_command_fix_is_parsed_by_the_durajobs_command(code, line):
    argv = shlex.split(_fill(line, {}))[1:]
    if "--help" in argv:
        with pytest.raises(SystemExit) as ended:
            _parser().parse_args(argv)
        assert ended.value.code == 0
    else:
        args = _parser().parse_args(argv)
        assert callable(args.run)


@pytest.mark.parametrize(
    ("code", "line"),
    [(c, line) for c, _, line in FIXES if _kind(line) == "shell"],
)
def test_a_shell_fix_is_a_line_of_a_known_program(code, line):
    words = shlex.split(_fill(line, {}))
    assert words[0] in SHELL_PROGRAMS
    if words[0] == "pip":
        assert words[1] == "install"
        assert words[-1].startswith("durajobs")
    elif words[0] == "alembic":
        # alembic's own parser: an unknown command or argument exits 2
        parsed = CommandLine().parser.parse_args(words[1:])
        assert parsed.cmd[0].__name__ == words[1]
    else:
        assert re.fullmatch(r"[A-Z_]+=\S+", words[1])


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    raise AssertionError(f"not a plain name: {ast.dump(node)}")


@pytest.mark.parametrize(
    ("code", "line"),
    [(c, line) for c, _, line in FIXES if _kind(line) == "python"],
)
def test_a_python_fix_parses_and_calls_what_exists_as_it_is_called(code, line):
    source = _fill(line, {})
    if source.startswith("@"):
        source += "\ndef handler(ctx): ..."  # a decorator line decorates the handler under it
    tree = compile(source, code, "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    checked = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            # a placeholder object (`<job>`) stands for the declared thing it names
            target = PYTHON_CALLS[name] if name in PYTHON_CALLS else PYTHON_CALLS[_generic(name)]
            signature = inspect.signature(target)
            positional = [object()] * len(node.args)
            if "self" in signature.parameters:
                positional.insert(0, object())
            # partial: a fix names what to change, not every argument a declaration needs
            signature.bind_partial(*positional, **{k.arg: object() for k in node.keywords if k.arg})
            checked += 1
        elif isinstance(node, ast.Attribute) and _dotted(node) in PYTHON_ATTRIBUTES:
            assert hasattr(PYTHON_ATTRIBUTES[_dotted(node)], node.attr)
            checked += 1
        elif isinstance(node, ast.ClassDef):
            base = _dotted(node.bases[0])
            assert base == "durajobs.DurajobsError"
            assert hasattr(durajobs, "DurajobsError")
            checked += 1
    assert checked, "a Python fix does something this test can check"


def _generic(name: str) -> str:
    """`job.enqueue` for `<job>.enqueue`: the placeholder's words are its kind."""
    head, _, rest = name.partition(".")
    return f"{head.split('_')[0]}.{rest}"


@pytest.mark.parametrize(
    "reused",
    [
        "select jobs.enqueue(name => 'other', input => '{}', idempotency_key => 'k-2', id => %s)",
        "select id from jobs.enqueue_many(jsonb_build_array(jsonb_build_object("
        "'name', 'other', 'input', '{}'::jsonb, 'idempotency_key', 'k-2', 'id', %s::text)))",
    ],
    ids=["enqueue", "enqueue_many"],
)
def test_the_hint_of_an_id_taken_is_a_call_the_server_plans(database_url, reused):
    """X_JOB_DUPLICATE for an id that names another job carries a hint of its own (a fresh
    id); that line runs too."""
    taken = str(uuid.uuid4())
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(
            "select jobs.enqueue(name => 'first', input => '{}', idempotency_key => 'k-1', "
            "id => %s)",
            [taken],
        )
        with pytest.raises(psycopg.Error) as refused:
            connection.execute(reused, [taken])
        assert refused.value.sqlstate == "JQ004"
        hint = refused.value.diag.message_hint
        assert hint is not None
        assert "\n" not in hint
        connection.execute("explain " + _fill(hint, SQL_VALUES))
