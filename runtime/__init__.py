"""actorflow.runtime: graphs, executors, the supervisor, workflows and sessions."""

from ._builder import WorkflowBuilder
from ._context import RUN_INPUT, Context
from ._events import (
    CheckpointedEvent,
    CheckpointFailedEvent,
    Event,
    ExecutorCompletedEvent,
    ExecutorFailedEvent,
    ExecutorInvokedEvent,
    MessageDroppedEvent,
    OutputEvent,
    PendingRequest,
    RequestAnsweredEvent,
    RequestEvent,
    RunCancelledEvent,
    RunCompletedEvent,
    RunFailedEvent,
    RunIdleEvent,
    RunIdleWithPendingRequestsEvent,
    RunRestartedEvent,
    RunResult,
    RunStartedEvent,
    RunStatus,
    SuperstepCompletedEvent,
    SuperstepRolledBackEvent,
    SuperstepStartedEvent,
)
from ._policy import Backoff, CheckpointPolicy, Durability, RestartPolicy
from ._subworkflow import WorkflowExecutor
from ._workflow import Workflow
from .graph import Case, Default, Executor, Resource, handler, resource, response_handler
from .session import Session, delete_session

__all__ = [
    "RUN_INPUT",
    "Backoff",
    "Case",
    "CheckpointFailedEvent",
    "CheckpointPolicy",
    "CheckpointedEvent",
    "Context",
    "Default",
    "Durability",
    "Event",
    "Executor",
    "ExecutorCompletedEvent",
    "ExecutorFailedEvent",
    "ExecutorInvokedEvent",
    "MessageDroppedEvent",
    "OutputEvent",
    "PendingRequest",
    "RequestAnsweredEvent",
    "RequestEvent",
    "Resource",
    "RestartPolicy",
    "RunCancelledEvent",
    "RunCompletedEvent",
    "RunFailedEvent",
    "RunIdleEvent",
    "RunIdleWithPendingRequestsEvent",
    "RunRestartedEvent",
    "RunResult",
    "RunStartedEvent",
    "RunStatus",
    "Session",
    "SuperstepCompletedEvent",
    "SuperstepRolledBackEvent",
    "SuperstepStartedEvent",
    "Workflow",
    "WorkflowBuilder",
    "WorkflowExecutor",
    "delete_session",
    "handler",
    "resource",
    "response_handler",
]

# The front's seam into the runtime (the CLI, the inspector, the otel and testing
# modules): importable from the package so no one reaches into its private modules,
# but not in __all__: not the public API.
# isort: split
from ._effects import arguments_of as arguments_of
from ._effects import raised_place as raised_place
from ._history import KINDS as KINDS
from ._history import event_of as event_of
from ._history import read_entries as read_entries
from ._history import run_going_on as run_going_on
from ._replay import Divergence as Divergence
from ._replay import ReplayReport as ReplayReport
from ._replay import replay as replay
from ._wire import StepRequest as StepRequest
from .checkpoints import check_runtime as check_runtime
from .checkpoints import check_runtime_bytes as check_runtime_bytes
from .checkpoints import decode_runtime as decode_runtime
from .session import NO_INPUT as NO_INPUT
from .telemetry import PREFIX as PREFIX
from .telemetry import SPAN_CHECKPOINT as SPAN_CHECKPOINT
from .telemetry import SPAN_PROCESS as SPAN_PROCESS
from .telemetry import SPAN_RESTART as SPAN_RESTART
from .telemetry import SPAN_ROLLBACK as SPAN_ROLLBACK
from .telemetry import SPAN_RUN as SPAN_RUN
from .telemetry import SPAN_SEND as SPAN_SEND
from .telemetry import SPAN_SUPERSTEP as SPAN_SUPERSTEP
from .telemetry import TRACE_KEY as TRACE_KEY
from .telemetry import set_providers as set_providers
