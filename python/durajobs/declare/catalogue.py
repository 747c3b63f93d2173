"""The job catalogue seen from Python: who declares, and what a conflicting declaration says.

`Registry.declare` writes each job's declaration into `jobs.declarations` (a worker does it at
start, `durajobs migrate --app` on a deploy). A name another deploy declared differently keeps
the stored declaration: the worker logs the conflict and goes on, since old and new code both
run during a rolling deploy; `durajobs migrate --app` refuses until the operator says which one
wins (`--redeclare`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from durajobs._values.records import Declared
from durajobs._values.states import DeclareOutcome
from durajobs.errors import JobDeclarationConflict

# a deploy's own name for itself (a release, an image tag), stamped as declared_by
DEPLOY_VARIABLE = "DURAJOBS_DEPLOY"


def deploy_label(fallback: str) -> str:
    """Who declares: $DURAJOBS_DEPLOY when the deploy names itself, else `fallback`."""
    return os.environ.get(DEPLOY_VARIABLE, "").strip() or fallback


def conflicts(answers: Sequence[Declared]) -> list[Declared]:
    return [answer for answer in answers if answer.outcome is DeclareOutcome.CONFLICT]


def difference_text(answer: Declared) -> str:
    """One line a person reads: "mail: queue stored 'emails', declared 'mail-v2'; ..."."""
    parts = [
        f"{field} stored {change['stored']!r}, declared {change['declared']!r}"
        for field, change in sorted((answer.differences or {}).items())
    ]
    return f"{answer.name}: " + "; ".join(parts) + f" (stored by {answer.stored_by})"


def conflict_error(found: Sequence[Declared]) -> JobDeclarationConflict:
    """X_JOB_DECLARATION_CONFLICT naming every job whose stored declaration differs."""
    lines = "\n  ".join(difference_text(answer) for answer in found)
    return JobDeclarationConflict(
        f"{len(found)} job(s) are declared differently in the database's catalogue:\n  {lines}",
        detail={
            "jobs": {
                answer.name: {"differences": answer.differences, "stored_by": answer.stored_by}
                for answer in found
            }
        },
    )
