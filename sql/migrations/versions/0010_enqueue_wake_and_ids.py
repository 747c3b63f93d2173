"""enqueue wake and ids

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30
"""

from __future__ import annotations

from pathlib import Path

from durajobs.migrations import apply_sql_file

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent


def upgrade() -> None:
    apply_sql_file(HERE / f"{revision}_upgrade.sql")


def downgrade() -> None:
    apply_sql_file(HERE / f"{revision}_downgrade.sql")
