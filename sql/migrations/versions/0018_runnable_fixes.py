"""Every error code's fix is one line a caller can run

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03
"""

from __future__ import annotations

from pathlib import Path

from durajobs._db.migrations import apply_sql_file, close_to_public

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent


def upgrade() -> None:
    apply_sql_file(HERE / f"{revision}_upgrade.sql")
    close_to_public()


def downgrade() -> None:
    apply_sql_file(HERE / f"{revision}_downgrade.sql")
