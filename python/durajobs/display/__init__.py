"""What an operator reads, made from what the functions answered: text and JSON values for the
`durajobs` commands and the dashboard alike (no I/O here)."""
