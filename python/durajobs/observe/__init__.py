"""Observation: metrics, tracing, log helpers and the show-one-job document."""
