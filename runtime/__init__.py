"""actorflow.runtime: graphs, executors, the supervisor, workflows and sessions."""

from ._builder import WorkflowBuilder
from ._context import RUN_INPUT, Context
from ._edges import Case, Default
from ._events import (
    CheckpointedEvent,
    CheckpointFailedEvent,
    Event,
    ExecutorCompletedEvent,
    ExecutorFailedEvent,
    ExecutorInvokedEvent,
    OutputEvent,
    PendingRequest,
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
    SuperstepStartedEvent,
)
from ._executor import Executor, Resource, handler, resource, response_handler
from ._policy import Backoff, CheckpointPolicy, Durability, RestartPolicy
from ._subworkflow import WorkflowExecutor
from ._workflow import Workflow
from .session import Session

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
    "OutputEvent",
    "PendingRequest",
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
    "SuperstepStartedEvent",
    "Workflow",
    "WorkflowBuilder",
    "WorkflowExecutor",
    "handler",
    "resource",
    "response_handler",
]

# The front's seam into the runtime (testing tools): importable from the package so
# no one reaches into its private modules, but not in __all__: not the public API.
# isort: split
from ._wire import StepRequest as StepRequest
from .session import NO_INPUT as NO_INPUT
