"""baseline

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

from pathlib import Path

from durajobs._db.migrations import apply_sql_file

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

HERE = Path(__file__).parent


def upgrade() -> None:
    apply_sql_file(HERE / f"{revision}_upgrade.sql")


def downgrade() -> None:
    apply_sql_file(HERE / f"{revision}_downgrade.sql")
