"""Tenant runs named by id, capped rows unflagged with no limit, nack locks in id order

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-04
"""

from __future__ import annotations

from pathlib import Path

from durajobs._db.migrations import apply_sql_file, close_to_public

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent


def upgrade() -> None:
    apply_sql_file(HERE / f"{revision}_upgrade.sql")
    close_to_public()


def downgrade() -> None:
    apply_sql_file(HERE / f"{revision}_downgrade.sql")
