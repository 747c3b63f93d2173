"""The command line without a database: what its parser refuses, and how the embedded
Postgres reports a tool missing from PATH."""

from __future__ import annotations

import warnings

import pytest

from durajobs.cli import main
from durajobs.cli.embedded import EmbeddedUnavailable, embedded_postgres


@pytest.mark.parametrize(
    "args",
    [
        ["jobs", "show", "nope"],
        ["jobs", "cancel", "42"],
        ["jobs", "requeue", "0190-not-a-uuid"],
        ["jobs", "remove", ""],
        ["jobs", "promote", "x"],
        ["jobs", "list", "--after", "x"],
    ],
)
def test_an_id_that_is_not_a_uuid_stops_at_the_parser(args, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(args)
    assert stopped.value.code == 2
    assert "is not a job id" in capsys.readouterr().err


def test_the_embedded_postgres_names_a_tool_missing_from_path(monkeypatch):
    # pgserver run as root adds its system user with useradd; with /usr/sbin off PATH that is a
    # FileNotFoundError deep in subprocess, which must reach the user as a code and a fix
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset in root shells
        import pgserver

    def useradd_not_on_path(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "useradd")

    monkeypatch.setattr(pgserver, "get_server", useradd_not_on_path)
    with pytest.raises(EmbeddedUnavailable) as refused, embedded_postgres():
        pass
    assert str(refused.value).startswith("X_EMBEDDED_UNAVAILABLE: ")
    assert "useradd is not on PATH" in str(refused.value)
    assert "/usr/sbin" in refused.value.hint
