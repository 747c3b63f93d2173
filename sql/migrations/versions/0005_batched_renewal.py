"""one lease renewal per worker round: jobs.heartbeat_many_v1

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

from pathlib import Path

from durajobs._db.migrations import apply_sql_file

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent


def upgrade() -> None:
    apply_sql_file(HERE / f"{revision}_upgrade.sql")


def downgrade() -> None:
    apply_sql_file(HERE / f"{revision}_downgrade.sql")
