"""Paused cron tasks keep their watermark: on resume the catch-up policy decides

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03
"""

from __future__ import annotations

from pathlib import Path

from durajobs._db.migrations import apply_sql_file, close_to_public

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent


def upgrade() -> None:
    apply_sql_file(HERE / f"{revision}_upgrade.sql")
    close_to_public()


def downgrade() -> None:
    apply_sql_file(HERE / f"{revision}_downgrade.sql")
