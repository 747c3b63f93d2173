"""bulk enqueue: a batch with nothing to refuse or dedupe checked in one pass, answered without lookups

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30
"""

from __future__ import annotations

from pathlib import Path

from durajobs.migrations import apply_sql_file

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent


def upgrade() -> None:
    apply_sql_file(HERE / f"{revision}_upgrade.sql")


def downgrade() -> None:
    apply_sql_file(HERE / f"{revision}_downgrade.sql")
