"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from __future__ import annotations

from pathlib import Path

from durajobs._db.migrations import apply_sql_file, close_to_public

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None

HERE = Path(__file__).parent


def upgrade() -> None:
    apply_sql_file(HERE / f"{revision}_upgrade.sql")
    close_to_public()


def downgrade() -> None:
    apply_sql_file(HERE / f"{revision}_downgrade.sql")
