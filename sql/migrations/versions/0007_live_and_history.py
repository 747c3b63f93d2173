"""jobs in two tables: the live rows, and a history of finished rows kept by the day

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

from pathlib import Path

from durajobs._db.migrations import apply_sql_file

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent


def upgrade() -> None:
    apply_sql_file(HERE / f"{revision}_upgrade.sql")


def downgrade() -> None:
    apply_sql_file(HERE / f"{revision}_downgrade.sql")
