"""actorflow: a workflow runtime where every executor is an isolated actor.

Executors own their private state and exchange only msgpack-encoded messages; a
supervisor actor drives bulk-synchronous supersteps and assembles checkpoints
from the executors' serialized snapshots. See ``README.md`` and ``docs/``.

>>> import actorflow as af
>>> class Echo(af.Executor):
...     @af.handler
...     def on_text(self, text: str, ctx: af.Context) -> None:
...         ctx.output(text.upper())
>>> with af.WorkflowBuilder("echo", start=Echo("echo")).build() as wf:
...     wf.run("hi").outputs
['HI']
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from actorflow._version import __version__
from actorflow.actors import ActorBackend, RayBackend, ThreadBackend, message
from actorflow.errors import (
    ActorflowError,
    BackendError,
    CheckpointCorrupt,
    CheckpointError,
    CheckpointNotFound,
    CheckpointWriteFailed,
    CodecError,
    DecodeError,
    EncodeError,
    ExecutorFailed,
    ExecutorTimedOut,
    GraphError,
    GraphMismatch,
    HandlerReturnedValue,
    HostLost,
    InputNotAccepted,
    InvalidRequest,
    LeaseError,
    LeaseLost,
    RegistrationError,
    RequestError,
    RunCancelled,
    RunFailed,
    RunNotFound,
    ServiceError,
    SessionBroken,
    SessionBusy,
    SessionClosed,
    SessionExists,
    SessionOwned,
    StateMigrationError,
    StoreClosed,
    StoreLocked,
    SuperstepLimitExceeded,
    ThreadNotFound,
    UnroutableMessage,
    UnsafeBind,
    UnsupportedFormat,
    WorkerImportFailed,
    WorkflowError,
)
from actorflow.runtime import (
    RUN_INPUT,
    Backoff,
    Case,
    CheckpointedEvent,
    CheckpointFailedEvent,
    CheckpointPolicy,
    Context,
    Default,
    Durability,
    Event,
    Executor,
    ExecutorCompletedEvent,
    ExecutorFailedEvent,
    ExecutorInvokedEvent,
    OutputEvent,
    PendingRequest,
    RequestAnsweredEvent,
    RequestEvent,
    Resource,
    RestartPolicy,
    RunCancelledEvent,
    RunCompletedEvent,
    RunFailedEvent,
    RunIdleEvent,
    RunIdleWithPendingRequestsEvent,
    RunRestartedEvent,
    RunResult,
    RunStartedEvent,
    RunStatus,
    Session,
    SuperstepCompletedEvent,
    SuperstepRolledBackEvent,
    SuperstepStartedEvent,
    Workflow,
    WorkflowBuilder,
    WorkflowExecutor,
    handler,
    resource,
    response_handler,
)
from actorflow.storage import (
    CheckpointStore,
    FileStore,
    HistoryEntry,
    Lease,
    MemoryStore,
    SQLiteStore,
)

if _TYPE_CHECKING:
    from actorflow.storage import PostgresStore


__all__ = [
    "RUN_INPUT",
    "ActorBackend",
    "ActorflowError",
    "BackendError",
    "Backoff",
    "Case",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointFailedEvent",
    "CheckpointNotFound",
    "CheckpointPolicy",
    "CheckpointStore",
    "CheckpointWriteFailed",
    "CheckpointedEvent",
    "CodecError",
    "Context",
    "DecodeError",
    "Default",
    "Durability",
    "EncodeError",
    "Event",
    "Executor",
    "ExecutorCompletedEvent",
    "ExecutorFailed",
    "ExecutorFailedEvent",
    "ExecutorInvokedEvent",
    "ExecutorTimedOut",
    "FileStore",
    "GraphError",
    "GraphMismatch",
    "HandlerReturnedValue",
    "HistoryEntry",
    "HostLost",
    "InputNotAccepted",
    "InvalidRequest",
    "Lease",
    "LeaseError",
    "LeaseLost",
    "MemoryStore",
    "OutputEvent",
    "PendingRequest",
    "PostgresStore",
    "RayBackend",
    "RegistrationError",
    "RequestAnsweredEvent",
    "RequestError",
    "RequestEvent",
    "Resource",
    "RestartPolicy",
    "RunCancelled",
    "RunCancelledEvent",
    "RunCompletedEvent",
    "RunFailed",
    "RunFailedEvent",
    "RunIdleEvent",
    "RunIdleWithPendingRequestsEvent",
    "RunNotFound",
    "RunRestartedEvent",
    "RunResult",
    "RunStartedEvent",
    "RunStatus",
    "SQLiteStore",
    "ServiceError",
    "Session",
    "SessionBroken",
    "SessionBusy",
    "SessionClosed",
    "SessionExists",
    "SessionOwned",
    "StateMigrationError",
    "StoreClosed",
    "StoreLocked",
    "SuperstepCompletedEvent",
    "SuperstepLimitExceeded",
    "SuperstepRolledBackEvent",
    "SuperstepStartedEvent",
    "ThreadBackend",
    "ThreadNotFound",
    "UnroutableMessage",
    "UnsafeBind",
    "UnsupportedFormat",
    "WorkerImportFailed",
    "Workflow",
    "WorkflowBuilder",
    "WorkflowError",
    "WorkflowExecutor",
    "__version__",
    "handler",
    "message",
    "resource",
    "response_handler",
]


def __getattr__(name: str) -> object:
    # The extra's store is imported on first use (``af.PostgresStore``): importing
    # actorflow never imports psycopg.
    if name == "PostgresStore":
        from actorflow import storage  # noqa: PLC0415  # resolved lazily, see above

        return storage.PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
