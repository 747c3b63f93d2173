"""Long-running services beside the worker: the outbox relay, the scheduler, retention."""
