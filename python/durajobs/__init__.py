"""durajobs: durable background jobs for Postgres.

The semantics live in the database (the `jobs` schema's PL/pgSQL functions); this package is the
thin shim that installs them and calls them.
"""

from __future__ import annotations

import logging

from durajobs import webhooks
from durajobs._db import calls
from durajobs._db.execute import SCHEMA_VERSION, check_schema, execute, execute_async
from durajobs._db.migrations import downgrade, migrate
from durajobs._db.transactions import current_transaction, in_transaction
from durajobs._values.records import (
    ClaimedJob,
    Declared,
    EnqueueResult,
    Fence,
    HorizonHolder,
    JobType,
    QueueStat,
    SettleResult,
    StepRecord,
)
from durajobs._values.states import (
    DeclareOutcome,
    HeartbeatAnswer,
    JobState,
    NackTarget,
    StepStatus,
)
from durajobs.client import Client
from durajobs.declare.export import ExportSink, LocalDirectory, Page
from durajobs.declare.limits import Concurrency
from durajobs.declare.registry import Job, Registry, Settled
from durajobs.declare.retry import ErrorClass, RetryPolicy, register_error_class
from durajobs.errors import (
    Aborted,
    ArgumentInvalid,
    ClaimQueuesEmpty,
    ConfigInvalid,
    DatabaseUrlMissing,
    DeclarationInvalid,
    Draining,
    DriverUnavailable,
    DurajobsError,
    EmbeddedUnavailable,
    ErrorCodeDuplicate,
    ExportPartTooLarge,
    ExportRowInvalid,
    IdempotencyRequired,
    Invariant,
    JobCancelled,
    JobConcurrencyUnenforceable,
    JobDeclarationConflict,
    JobDuplicate,
    JobInputInvalid,
    JobKeyBusy,
    JobLeaseLost,
    JobMaxAttempts,
    JobNotCancellable,
    JobNotDrainable,
    JobNotFound,
    JobNotPromotable,
    JobNotRemovable,
    JobNotRequeueable,
    JobOnSettledFailed,
    JobPageInvalid,
    JobRowStatusUnknown,
    JobSlotLost,
    JobTenantMismatch,
    JobTenantRequired,
    JobTimeout,
    OutboxNoTransaction,
    PermissionDenied,
    SchemaVersionMismatch,
    StepDuplicate,
    StepOutputInvalid,
    TenancyActorOrgRequired,
    WebhookEventInvalid,
)
from durajobs.runtime.attempt import JobContext, JobExecution, Outcome, SyncJobContext
from durajobs.runtime.worker import Worker

__all__ = [
    "SCHEMA_VERSION",
    "Aborted",
    "ArgumentInvalid",
    "ClaimQueuesEmpty",
    "ClaimedJob",
    "Client",
    "Concurrency",
    "ConfigInvalid",
    "DatabaseUrlMissing",
    "DeclarationInvalid",
    "DeclareOutcome",
    "Declared",
    "Draining",
    "DriverUnavailable",
    "DurajobsError",
    "EmbeddedUnavailable",
    "EnqueueResult",
    "ErrorClass",
    "ErrorCodeDuplicate",
    "ExportPartTooLarge",
    "ExportRowInvalid",
    "ExportSink",
    "Fence",
    "HeartbeatAnswer",
    "HorizonHolder",
    "IdempotencyRequired",
    "Invariant",
    "Job",
    "JobCancelled",
    "JobConcurrencyUnenforceable",
    "JobContext",
    "JobDeclarationConflict",
    "JobDuplicate",
    "JobExecution",
    "JobInputInvalid",
    "JobKeyBusy",
    "JobLeaseLost",
    "JobMaxAttempts",
    "JobNotCancellable",
    "JobNotDrainable",
    "JobNotFound",
    "JobNotPromotable",
    "JobNotRemovable",
    "JobNotRequeueable",
    "JobOnSettledFailed",
    "JobPageInvalid",
    "JobRowStatusUnknown",
    "JobSlotLost",
    "JobState",
    "JobTenantMismatch",
    "JobTenantRequired",
    "JobTimeout",
    "JobType",
    "LocalDirectory",
    "NackTarget",
    "OutboxNoTransaction",
    "Outcome",
    "Page",
    "PermissionDenied",
    "QueueStat",
    "Registry",
    "RetryPolicy",
    "SchemaVersionMismatch",
    "SettleResult",
    "Settled",
    "StepDuplicate",
    "StepOutputInvalid",
    "StepRecord",
    "StepStatus",
    "SyncJobContext",
    "TenancyActorOrgRequired",
    "WebhookEventInvalid",
    "Worker",
    "calls",
    "check_schema",
    "current_transaction",
    "downgrade",
    "execute",
    "execute_async",
    "in_transaction",
    "migrate",
    "register_error_class",
    "webhooks",
]

# a library logs, the application decides where to: nothing reaches stderr unless configured
logging.getLogger("durajobs").addHandler(logging.NullHandler())
