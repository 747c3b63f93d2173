"""Claim marks and jobs.horizon: a held xmin horizon, walked past and shown

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

from pathlib import Path

from durajobs._db.migrations import apply_sql_file, close_to_public

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent


def upgrade() -> None:
    apply_sql_file(HERE / f"{revision}_upgrade.sql")
    close_to_public()


def downgrade() -> None:
    apply_sql_file(HERE / f"{revision}_downgrade.sql")
