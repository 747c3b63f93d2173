"""Declarations: jobs and their registry, retry policies and cron tasks."""
