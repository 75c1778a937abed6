"""Every error actorflow raises, in one hierarchy under :class:`ActorflowError`.

Errors are named by condition. Each message says what happened and what to do.
Sub-bases group them by area so callers can catch a whole family. The whole tree:
a class with two bases of this module is listed under each, and ``also`` names a
class's other bases::

    ActorflowError
        CodecError: a value could not cross the wire
            EncodeError
                ResultNotRecordable
            DecodeError
            RegistrationError
        GraphError: the workflow graph is malformed (raised by ``build()``)
        WorkflowError: something went wrong while running
            InputNotAccepted
            HandlerReturnedValue
            ContextExpired
            UnroutableMessage
                MessageDropped
                    _DroppedRunFailure (also _UnroutableRunFailure)
                _UnroutableRunFailure (also ExecutorFailed)
                    _DroppedRunFailure (also MessageDropped)
            RunFailed
                ExecutorFailed
                    _UnroutableRunFailure (also UnroutableMessage)
                        _DroppedRunFailure (also MessageDropped)
                SuperstepLimitExceeded
                CheckpointWriteFailed (also CheckpointError)
            RunCancelled
            ExecutorTimedOut (also TimeoutError)
            SessionBusy
            SessionClosed
            SessionBroken
            SessionExists
            EffectNotRecorded
            StatementRefused (also ValueError)
            RequestError
        CheckpointError: storing or restoring a checkpoint failed
            CheckpointNotFound
            CheckpointCorrupt
                CheckpointSealed
            UnsupportedFormat
            GraphMismatch
            CheckpointWriteFailed (also RunFailed)
            StatementFailed
            StoreClosed
            StoreLocked
            StoreNotFound
            LeaseError: the session leases
                SessionOwned
                LeaseLost
            StateMigrationError
        BackendError: a host process of a distributed backend (Ray) failed
            HostLost
            WorkerImportFailed
        MissingExtra (also ImportError): an optional extra is not installed
        ServiceError: the service API (actorflow.serve) refused a request or a setting
            UnsafeBind
            ThreadNotFound
            RunNotFound
            InvalidRequest

This module is also the definition site: the runtime, actor and storage packages
import from here, never the other way round.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

__all__ = [
    "ActorflowError",
    "BackendError",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointNotFound",
    "CheckpointSealed",
    "CheckpointWriteFailed",
    "CodecError",
    "ContextExpired",
    "DecodeError",
    "EffectNotRecorded",
    "EncodeError",
    "ExecutorFailed",
    "ExecutorTimedOut",
    "GraphError",
    "GraphMismatch",
    "HandlerReturnedValue",
    "HostLost",
    "InputNotAccepted",
    "InvalidRequest",
    "LeaseError",
    "LeaseLost",
    "MessageDropped",
    "MissingExtra",
    "RegistrationError",
    "RequestError",
    "ResultNotRecordable",
    "RunCancelled",
    "RunFailed",
    "RunNotFound",
    "ServiceError",
    "SessionBroken",
    "SessionBusy",
    "SessionClosed",
    "SessionExists",
    "SessionOwned",
    "StateMigrationError",
    "StatementFailed",
    "StatementRefused",
    "StoreClosed",
    "StoreLocked",
    "StoreNotFound",
    "SuperstepLimitExceeded",
    "ThreadNotFound",
    "UnroutableMessage",
    "UnsafeBind",
    "WorkerImportFailed",
    "WorkflowError",
]


class HeldLease(Protocol):
    """What an error says of a session's lease (an :class:`actorflow.storage.Lease`).

    Declared here, as what these errors read of it, so that this module imports
    nothing of actorflow's: every other package imports from it.
    """

    @property
    def session(self) -> str:
        """The session held."""

    @property
    def token(self) -> int:
        """The lease's fencing token."""

    @property
    def owner(self) -> str:
        """Who holds it, for humans."""

    @property
    def expires_at(self) -> float:
        """Epoch seconds by the store's clock when it expires unless renewed."""


class ActorflowError(Exception):
    """Base class of every error raised by actorflow."""


class MissingExtra(ActorflowError, ImportError):
    """A feature needs an optional extra of actorflow that is not installed.

    Raised where the feature is first asked for: ``RayBackend()`` without Ray,
    ``PostgresStore`` (or a ``postgresql://`` store on the command line) without
    psycopg, ``actorflow ui`` without its web server, the conformance kit without
    pytest. Install the extra the message names (``pip install 'actorflow[ray]'``).
    Also an ``ImportError``, so code that guards an optional import keeps working.

    Attributes:
        feature: what needed the extra (``RayBackend``, ``PostgresStore``, ...).
        extra: the extra to install (``ray``, ``postgres``, ``ui``, ``test``).
        missing: the module that could not be imported (also ``name``).
    """

    def __init__(self, feature: str, extra: str, missing: str) -> None:
        super().__init__(
            f"{feature} needs the actorflow[{extra}] extra, which is not installed (no module "
            f"named {missing!r}): pip install 'actorflow[{extra}]'",
            name=missing,
        )
        self.feature = feature
        self.extra = extra
        self.missing = missing

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.feature, self.extra, self.missing))


# --- codec -------------------------------------------------------------------------


class CodecError(ActorflowError):
    """A value could not be turned into bytes, or bytes back into a value."""


class EncodeError(CodecError):
    """A value has a type the wire format does not know.

    Raised when a message, output, request or executor state contains an object
    that is neither a built-in encodable type nor a dataclass registered with
    ``@actorflow.message``. Register the type, or convert it before sending.

    Attributes:
        type_name: qualified name of the offending type.
        executor: id of the executor whose value failed, when known.
    """

    def __init__(self, message: str, *, type_name: str = "", executor: str | None = None):
        super().__init__(message)
        self.type_name = type_name
        self.executor = executor


class ResultNotRecordable(EncodeError):
    """An effect (``ctx.effect``, ``ctx.aeffect``) returned a value that cannot be
    recorded: a client, a socket, a file, or anything else the wire format does not know.

    A restart would raise it again (the result is remembered as this error, and the
    effect not called again; a coroutine that ``ctx.effect`` got is never awaited), so
    restart policies never restart it: the run fails at once, no backoff waited. Return
    data from the effect (built-in values or ``@actorflow.message`` classes), and await
    a coroutine function's effect with ``ctx.aeffect``.
    """


class DecodeError(CodecError):
    """Bytes could not be decoded into a value.

    Raised for corrupt or tampered bytes, for an unknown registered-type name (the
    type was never registered with ``@actorflow.message`` in this process: import
    the module that defines it), and for anything that is not actorflow's format.
    Decoding never imports modules or calls anything but registered constructors.
    """


class RegistrationError(CodecError):
    """``@actorflow.message`` was used wrongly (not a dataclass, or a wire name
    already taken by another class: pass ``name=`` to choose a distinct one)."""


# --- graph -------------------------------------------------------------------------


class GraphError(ActorflowError):
    """The workflow graph is malformed. ``build()`` reports every problem at once.

    Attributes:
        problems: one human-readable line per problem found.
    """

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"the workflow graph has {len(self.problems)} problem(s):\n{lines}")


# --- running -----------------------------------------------------------------------


class WorkflowError(ActorflowError):
    """Something went wrong while a workflow ran."""


class InputNotAccepted(WorkflowError):
    """The start executor has no handler for the type of the run's input.

    Raised by ``run()`` / ``stream()`` before any actor starts. Pass a value of a
    type the start executor handles, or add a handler for this type.
    """


class HandlerReturnedValue(WorkflowError):
    """A handler returned a value. A handler's return value goes nowhere, so this is a
    mistake, never ignored: call ``ctx.output(value)`` to emit it as a run output, or
    ``ctx.send(value)`` to pass it on along the out-edges, and return nothing.
    """


class ContextExpired(WorkflowError):
    """A handler's context was used after the handler returned (from a thread or a
    task it started). What the handler does goes into its superstep, which ended with
    it: a late send, output, effect or ``ctx.sql`` would be lost, so it is refused.
    Await the work inside the handler (``await asyncio.gather(...)``, ``future.result()``)
    before returning.
    """


class UnroutableMessage(WorkflowError):
    """An executor sent a value that no out-edge target has a handler for.

    A message is never dropped silently: add an edge to an executor that handles
    the type, add a handler to a target, or stop sending the value.
    """


class MessageDropped(UnroutableMessage):
    """A sent value reached no executor although a target handles its type: every
    condition on the way declined it (an edge's ``when``, a switch without a
    ``Default``, a fan-out selector that chose nobody).

    Raised only in workflows built with ``strict_routing=True`` (otherwise such a
    drop is a ``MessageDroppedEvent`` and a log line); the run fails as for an
    unroutable message. Make a condition take the value, add a ``Default`` to the
    switch, or build without ``strict_routing`` if dropping it is intended.
    """


class RunFailed(WorkflowError):
    """A run ended in failure. The original error is chained as ``__cause__``.

    Attributes:
        run_id: the failed run.
        superstep: the superstep in which it failed.
    """

    def __init__(self, message: str, *, run_id: str = "", superstep: int = 0):
        super().__init__(message)
        self.run_id = run_id
        self.superstep = superstep


class ExecutorFailed(RunFailed):
    """A handler raised (or timed out, or its actor died) and no restart was left.

    Attributes:
        executor: id of the executor that failed.
        error_type: qualified name of the original exception type.
    """

    def __init__(
        self,
        message: str,
        *,
        executor: str,
        error_type: str = "",
        run_id: str = "",
        superstep: int = 0,
    ):
        super().__init__(message, run_id=run_id, superstep=superstep)
        self.executor = executor
        self.error_type = error_type


class _UnroutableRunFailure(ExecutorFailed, UnroutableMessage):
    """How a run fails when a handler sent a value no target handles: an
    :class:`ExecutorFailed` (the executor, the run) that ``except UnroutableMessage``
    catches too. The handler's own ``UnroutableMessage`` is chained."""


class _DroppedRunFailure(_UnroutableRunFailure, MessageDropped):
    """How a ``strict_routing`` run fails when every condition declined a sent value:
    what ``except MessageDropped`` (and ``except ExecutorFailed``) catches. The
    handler's own ``MessageDropped`` is chained."""


class SuperstepLimitExceeded(RunFailed):
    """The run reached ``max_supersteps`` with messages still in flight.

    When a store is configured, the state at the limit is checkpointed, so the run
    can be continued with ``wf.resume(...)``; otherwise raise ``max_supersteps``.
    """


class RunCancelled(WorkflowError):
    """The run was cancelled and stopped at a barrier; its last consistent state is kept."""


class ExecutorTimedOut(WorkflowError, TimeoutError):
    """An executor did not finish its part of a superstep within its ``timeout``.

    The cause of the ``ExecutorFailed`` (or the error the restart policy saw) when
    a handler ran too long. Its actor was abandoned (Python cannot kill a thread):
    the handler keeps running until it returns, and whatever it sends or outputs
    after the deadline is never read. Raise the executor's ``timeout``, or make
    the handler finish sooner.

    Attributes:
        executor: id of the executor that timed out.
        limit: the timeout, in seconds.
    """

    def __init__(self, executor: str, limit: float) -> None:
        super().__init__(
            f"executor {executor!r} did not finish its superstep within its timeout of "
            f"{limit} s; raise the timeout, or make the handler finish sooner"
        )
        self.executor = executor
        self.limit = limit


class SessionBusy(WorkflowError):
    """A session was asked to do a second thing while busy (a run during a run,
    a reset during a run, a run during a reset). Wait for the first to finish, or
    open another session."""


class SessionClosed(WorkflowError):
    """The session or workflow was closed; open a new one."""


class SessionBroken(WorkflowError):
    """A superstep of this session failed and its state cannot be rolled back.

    Rolling back needs each executor's state from the last barrier, which exists
    only when someone asked for snapshots (a store checkpointing every superstep,
    or a restart policy). Without it the session refuses to run rather than let
    half-applied writes of the failed superstep leak into a later run. Call
    ``reset()``, or resume from a checkpoint.
    """


class SessionExists(WorkflowError):
    """A session id that already has checkpoints was opened as if it were new.

    ``wf.session(id, store=store)`` never silently starts a second lineage under an
    id: continue it with ``wf.resume(store, session=id)``, or say what you want with
    ``if_exists="resume"`` (resume or create) or ``if_exists="fresh"`` (start a new
    lineage; the old one stays readable, its pending requests become unanswerable).
    A fork (``wf.resume(..., as_session=new_id)``) needs an id without checkpoints.
    """


class EffectNotRecorded(WorkflowError):
    """A replay met an effect the stored run did not make (``ctx.effect`` with a name
    and occurrence the recorded superstep has no result for): the new code would call
    the outside world where the old code did not. A replay never calls it.

    Attributes:
        executor, superstep: where the effect was made.
        effect: its name (``key=``, or the callable's qualified name).
    """

    def __init__(self, message: str, *, executor: str, superstep: int, effect: str) -> None:
        super().__init__(message)
        self.executor = executor
        self.superstep = superstep
        self.effect = effect


class StatementRefused(WorkflowError, ValueError):
    """``ctx.sql`` refused a statement before queueing it: the session's store does not
    commit statements (only SQLiteStore and PostgresStore do), the statement controls
    the transaction (BEGIN, COMMIT, SAVEPOINT, ...), holds more than one statement, or a
    parameter is not None, bool, 64-bit int, float, str or bytes. The handler fails."""


class RequestError(WorkflowError):
    """A response could not be accepted: unknown request id, a second answer to the
    same request, or a value of the wrong type. Nothing was consumed."""


# --- checkpoints -------------------------------------------------------------------


class CheckpointError(ActorflowError):
    """Storing, loading or restoring a checkpoint failed."""


class CheckpointNotFound(CheckpointError):
    """No checkpoint (or blob) with the requested id exists in the store."""


class CheckpointCorrupt(CheckpointError):
    """Stored bytes are truncated, tampered with, or do not match their digest.

    Never skipped silently. Restore from an older checkpoint (``store.list()``),
    or run ``actorflow checkpoints verify STORE`` to find every damaged record.
    Raised by ``wf.resume``, the message names the session's newest intact
    checkpoint and the ``wf.resume(store, session=..., checkpoint_id=...)`` call
    that resumes from it.
    """


class CheckpointSealed(CheckpointCorrupt):
    """A record an ``EncryptedStore`` sealed was read without its keys: the store was
    opened plain (``SQLiteStore(path)``) on encrypted data. Nothing is damaged; open
    it as ``EncryptedStore(SQLiteStore(path), keys=...)`` with the keys it was
    written with."""


class UnsupportedFormat(CheckpointError):
    """A checkpoint was written in a format version this actorflow cannot read.
    Upgrade actorflow, or restore with the version that wrote it."""


class GraphMismatch(CheckpointError):
    """A checkpoint was taken on a graph different from the one restoring it.

    The message names what differs (executor, edge, handler type). Restore with
    the workflow that wrote it, or start a new session.
    """


class CheckpointWriteFailed(RunFailed, CheckpointError):
    """A checkpoint (or a finished part of a superstep) could not be written, so the
    run stopped rather than continue unsaved. Both a run failure and a checkpoint
    error; the store's own error is chained. Fix the store, then run again or resume
    from the last checkpoint (the session's in-memory state is still consistent)."""


class StatementFailed(CheckpointError):
    """A ``ctx.sql`` statement failed inside the transaction of the checkpoint that
    commits its superstep: nothing of that checkpoint, and no statement of it, was
    committed. The run stops (``CheckpointWriteFailed``, this error chained); fix the
    statement (or the table it writes) and resume: the superstep runs again.

    Attributes:
        executor, superstep: the handler that queued the statement, and when.
    """

    def __init__(self, message: str, *, executor: str, superstep: int) -> None:
        super().__init__(message)
        self.executor = executor
        self.superstep = superstep


class StoreClosed(CheckpointError):
    """The checkpoint store was closed (``store.close()``), so this call did not run,
    or was stopped before it finished.

    Raised by every call made after ``close()``, and by a call that ``close()``
    (from another thread, task or session) overtook while it ran; a call the close
    did not stop finishes normally. A call stopped this way committed nothing unless
    a later read shows it. Closing a store that sessions still use fails their next
    checkpoint (``CheckpointWriteFailed``, with this error chained). Close a store only
    after the sessions using it; to go on, open a new store on the same data.
    """


class StoreLocked(CheckpointError):
    """A lock of the store stayed held past the bound the caller gave (``wait=``).

    Raised when opening a session for writing, while no live lease holds it, but a
    lock the open needs (the session's lease lock, a SQLite file's write lock, a
    PostgreSQL advisory lock) is held by another process: typically one stalled
    inside a save (paused, stopped by a debugger or ``SIGSTOP``, or swapping). The
    message names the lock and, where the store can tell, who holds it. Nothing
    was changed. Let that process go on or end it, or pass a longer ``wait=``.

    Attributes:
        lock: which lock (a file path, a SQLite lock, an advisory lock key).
        holder: who holds it, as far as the store can tell ("" when it cannot).
    """

    def __init__(self, message: str, *, lock: str = "", holder: str = ""):
        super().__init__(message)
        self.lock = lock
        self.holder = holder

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_locked, (str(self), self.lock, self.holder))


def _rebuild_locked(message: str, lock: str, holder: str) -> StoreLocked:
    return StoreLocked(message, lock=lock, holder=holder)


class StoreNotFound(CheckpointError):
    """A store opened with ``create=False`` found no actorflow store where it looked:
    no SQLite file (or one without actorflow's tables), no FileStore folder (or one
    without its marker), no PostgreSQL schema (or one without actorflow's tables).

    Nothing was created or changed. Check the path, URI or ``schema`` name; to make
    a new store there, open it with ``create=True`` (the default).
    """


class LeaseError(CheckpointError):
    """A session lease could not be taken, kept or used (see ``docs/sessions.md``)."""


class SessionOwned(LeaseError):
    """Another live lease holds the session: somebody else owns it for writing.

    Raised when opening a session another open session (in this or another process)
    holds, and by a save made without a lease while one holds. Close the other
    session, wait for it (``wait=`` seconds when opening), or let its lease expire if
    its owner died.

    Attributes:
        holder: the live lease (its owner and ``expires_at``).
    """

    def __init__(self, holder: HeldLease, *, doing: str = "cannot open it for writing"):
        super().__init__(
            f"session {holder.session!r} is owned by {holder.owner} (lease token "
            f"{holder.token}, {_expiry(holder.expires_at)}); "
            f"{doing}. Close that session first, pass wait=<seconds> to wait for it, or "
            "resume after its lease expires if its owner is dead."
        )
        self.holder = holder
        self._doing = doing

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_owned, (self.holder, self._doing))


def _expiry(expires_at: float) -> str:
    """When a lease expires, for a message: any float (a damaged row's too) formats."""
    left = expires_at - time.time()
    try:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires_at))
    except (OverflowError, OSError, ValueError):  # NaN, infinities, past year 9999
        return f"expiry {expires_at!r}, not a time: the lease row is damaged"
    return f"expires {when}, in {max(left, 0.0):.1f} s unless renewed"


def _rebuild_owned(holder: HeldLease, doing: str) -> SessionOwned:
    return SessionOwned(holder, doing=doing)


class LeaseLost(LeaseError):
    """The caller's lease is no longer the session's current one (taken over or released).

    Nothing was written. The process no longer owns the session: a run that hits it
    fails and rolls its superstep back; reopen the session to continue.

    Attributes:
        lease: the stale lease, when known.
    """

    def __init__(self, message: str, *, lease: HeldLease | None = None):
        super().__init__(message)
        self.lease = lease

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_lost, (str(self), self.lease))


def _rebuild_lost(message: str, lease: HeldLease | None) -> LeaseLost:
    return LeaseLost(message, lease=lease)


class StateMigrationError(CheckpointError):
    """A stored executor state cannot be brought to the current code; the resume failed.

    Raised by ``wf.resume`` before any actor starts. The message names the executor,
    the stored and current state versions and the fix: declare ``state_version`` and
    a ``migrate(state, from_version)`` classmethod on the executor class (see
    ``docs/sessions.md``), or resume with the code that wrote the checkpoint.

    Attributes:
        executor: the executor id.
        stored_version: the state version in the checkpoint (1 when none was recorded).
        current_version: the class's ``state_version``.
    """

    def __init__(
        self,
        message: str,
        *,
        executor: str = "",
        stored_version: int = 0,
        current_version: int = 0,
    ):
        super().__init__(message)
        self.executor = executor
        self.stored_version = stored_version
        self.current_version = current_version

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_migration,
            (str(self), self.executor, self.stored_version, self.current_version),
        )


def _rebuild_migration(
    message: str, executor: str, stored: int, current: int
) -> StateMigrationError:
    return StateMigrationError(
        message, executor=executor, stored_version=stored, current_version=current
    )


# --- backends ----------------------------------------------------------------------


class BackendError(ActorflowError):
    """An executor host of a distributed backend (a Ray worker process) died, or
    cannot run the workflow's code."""


class HostLost(BackendError):
    """The process hosting an executor died: it crashed, was killed (``kill -9``) or
    its node was lost. The supervisor treats it as that executor's failure: under a
    ``RestartPolicy`` the executor is restored from its last good state on a new
    host and only it re-runs; otherwise the run fails with this error chained."""


class WorkerImportFailed(BackendError):
    """A worker process cannot import a class a program needs (an executor or
    message class, or a function an edge uses). Raised when a session starts its
    hosts. Ship the code: install the package on every node, pass it in the Ray
    ``runtime_env`` (``py_modules`` or ``working_dir``), or register the module for
    by-value pickling (``ray.cloudpickle.register_pickle_by_value``).

    Attributes:
        type_name: the executor and class that failed.
    """

    def __init__(self, message: str, *, type_name: str = "") -> None:
        super().__init__(message)
        self.type_name = type_name

    def __reduce__(self) -> tuple[Any, ...]:
        # Raised on a worker process and re-raised on the driver: the name travels too.
        return (_rebuild_import_failed, (str(self), self.type_name))


def _rebuild_import_failed(message: str, type_name: str) -> WorkerImportFailed:
    return WorkerImportFailed(message, type_name=type_name)


# --- the service API -----------------------------------------------------------------


class ServiceError(ActorflowError):
    """The service API (``actorflow.serve``) refused a request or a setting. Over HTTP
    each is a JSON error body whose ``message`` is the error's text."""


class UnsafeBind(ServiceError):
    """A service was asked to listen on an address other than loopback without a
    bearer token, which would let anybody on the network run the workflow. Give a
    token (``--token``, ``ServiceApp(token=...)``) or listen on 127.0.0.1."""


class ThreadNotFound(ServiceError):
    """No thread (session) with this id: the service never created it and the store
    has no checkpoint of it. Create it (``POST /threads``) or run with
    ``if_not_exists="create"``. HTTP 404."""


class RunNotFound(ServiceError):
    """No run with this id on the thread: neither this worker's records (kept until it
    stops) nor the thread's stored history hold it. List the thread's runs, or read
    its events. HTTP 404."""


class InvalidRequest(ServiceError):
    """A request's body or parameters are malformed: not JSON, a field of the wrong
    shape, an input the workflow cannot take, an answer that fits no pending
    request. The message names the field and what it should be. HTTP 422."""
