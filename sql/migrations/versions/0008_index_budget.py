"""index budget: one index fewer on every state change, one for dead rows only

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

from __future__ import annotations

from pathlib import Path

from durajobs.migrations import apply_sql_file

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

HERE = Path(__file__).parent


def upgrade() -> None:
    apply_sql_file(HERE / f"{revision}_upgrade.sql")


def downgrade() -> None:
    apply_sql_file(HERE / f"{revision}_downgrade.sql")
