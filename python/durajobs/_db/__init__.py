"""The database seam: SQL call builders, their executors, transactions and migrations."""
