"""the test clock as the owner's opt-in: jobs.use_test_clock

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

from pathlib import Path

from durajobs._db.migrations import apply_sql_file

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent


def upgrade() -> None:
    apply_sql_file(HERE / f"{revision}_upgrade.sql")


def downgrade() -> None:
    apply_sql_file(HERE / f"{revision}_downgrade.sql")
