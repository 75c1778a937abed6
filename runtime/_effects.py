"""The journal of one executor's effects in one superstep (runner side).

A handler calls the outside world through ``ctx.effect``: the journal runs the call
once, encodes its result like a message and hands the handler a decoded copy. The
results made in a superstep travel to the supervisor in the step's report
(``effects``: ``[name, n, result]`` each) and are written into the checkpoint that
commits the superstep; ``ctx.sql`` statements likewise (``statements``), executed by
the store in the transaction that commits that checkpoint.

An effect is identified by its *name* (``key=``, by default the callable's qualified
name) and its occurrence ``n`` among the effects of that name the executor made in
the superstep: the identity does not depend on the order of unrelated effects, so a
handler refactored to call them in another order still finds its results.

Results are looked up, in order, in:

- the results a replay hands in (``recorded``): a replay never calls anything, and an
  effect the stored run did not make is an :class:`~actorflow.errors.EffectNotRecorded`;
- the results of an earlier attempt at the same superstep of the same lineage, kept by
  the runner (a handler that failed after its effect and was restarted, or a
  superstep rolled back and run again in this process), or handed in with the step
  (``remembered``: the results a failed superstep's halt cut recorded, when a resume
  in another process runs it again): not called again.

An effect that raises uses up nothing: the handler's retry of it is the same effect
(same occurrence, same key). Its raise is journaled as a pseudo-effect of its own
(:func:`raised_name`: the exception's type, ``args`` and attributes, never its
traceback), so a replay raises it again at the same call, where the stored run's
handler caught it; it rides every path a result does (a failed attempt's, a halt's,
a sub-workflow's) without a field of its own. So do the arguments of each effect's
first call, as a digest (:func:`arguments_name`): a replay compares them with its
own, so new code that calls an effect with other arguments is not passed by the
stored result; and of each ``ctx.sql`` statement (under :data:`STATEMENTS`). An
attempt that fails takes its
results with its exception (:func:`carry`, all the host knows for the superstep), so
the supervisor hands them to the next attempt (a fresh host too) and records a
superstep that fails for good with them (see ``supervisor._attempts``).

Otherwise the call is made. Its idempotency key (:meth:`EffectJournal.key`) is the
same for every attempt at the superstep along the lineage, so an API that accepts
one deduplicates a call that was in flight when a process died.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import re
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final

from actorflow.actors import (
    HostedFactory,
    HostFuture,
    HostProxy,
    HostRef,
    decode,
    encode,
    error_parts,
    main_module_name,
    rebuilt_error,
    said_by,
    stable_name,
)
from actorflow.errors import EffectNotRecorded, EncodeError, ResultNotRecordable, StatementRefused
from actorflow.storage import SqlValue

from ._wire import StepRequest

__all__ = [
    "NO_FRAME",
    "STATEMENTS",
    "EffectFrame",
    "EffectFrameHost",
    "EffectJournal",
    "EffectMemory",
    "SqlValue",
    "arguments_name",
    "arguments_of",
    "carried",
    "carry",
    "carry_unrecorded",
    "check_statement",
    "raised_name",
    "raised_place",
    "unrecorded",
]

EffectMemory = dict[tuple[str, int], bytes | ResultNotRecordable]
"""(name, n) -> what an executor's effect returned in one superstep: its encoded
result, or why that could not be recorded (raised again, never called again)."""

_CARRIED: Final = "_af_effects"
"""The attribute of a failed attempt's exception that holds its effects (it survives
pickling: an exception's ``__dict__`` travels with it from a host in another process)."""


_UNRECORDED: Final = "_af_unrecorded"
"""The attribute of a failed run's exception that holds the effect results no cut of its
store records (see :func:`carry_unrecorded`)."""

_RAISED: Final = "\x00raised\x00"


def raised_name(name: str, n: int) -> str:
    """The name the raises of occurrence ``n`` of effect ``name`` are journaled under
    (each raise its own occurrence of that name, in the order they happened)."""
    return f"{name}{_RAISED}{n}"


def raised_place(name: str) -> tuple[str, int] | None:
    """The effect name and occurrence a journaled raise's name stands for; None for a
    result's name."""
    effect, marker, n = name.rpartition(_RAISED)
    return (effect, int(n)) if marker and n.isdigit() else None


_ARGUMENTS: Final = "\x00arguments"


def arguments_name(name: str) -> str:
    """The name the arguments of effect ``name`` are journaled under (with its
    occurrence, as a digest: never the values, which may be a card number)."""
    return name + _ARGUMENTS


def arguments_of(name: str) -> str | None:
    """The effect name a journaled arguments digest's name stands for; None for
    another name."""
    return name[: -len(_ARGUMENTS)] if name.endswith(_ARGUMENTS) else None


def _arguments_digest(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> bytes | None:
    """A digest of the arguments ``fn`` is called with, bound to its parameters (so
    passing one by position or by keyword is the same call, and a default counts as
    passed; a ``functools.partial``'s own arguments count too); None when they do not
    encode (a client passed to the effect)."""
    while isinstance(fn, functools.partial):
        args, kwargs = (*fn.args, *args), {**fn.keywords, **kwargs}
        fn = fn.func
    value: object = [list(args), kwargs]
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
        bound.apply_defaults()
        value = bound.arguments
    except (TypeError, ValueError):  # no signature, or arguments fn will refuse
        pass
    try:
        return _digest(value)
    except Exception:  # noqa: BLE001 - any failure means: not these arguments
        return None


def _digest(value: object) -> bytes:
    """What a journal keeps of a value it must compare and never show: 16 bytes."""
    return hashlib.sha256(encode(_canonical(value))).digest()[:16]


def _canonical(value: object) -> object:
    """``value`` with its dicts and sets in one order, whatever order they were built
    in (a dict filled from a set, whose order changes with the process's hash seed),
    down through lists, tuples and message fields: two equal values get one digest.
    Keys and members are sorted, or, where they do not sort (a set of ints and
    strs), ordered by their encoding, which every encodable value has."""
    if isinstance(value, list | tuple) and type(value) in (list, tuple):
        return [_canonical(item) for item in value]
    if isinstance(value, dict) and type(value) is dict:
        items = [(key, _canonical(item)) for key, item in value.items()]
        return ["dict", _in_one_order(items, key=lambda pair: pair[0])]
    if isinstance(value, set | frozenset) and type(value) in (set, frozenset):
        return ["set", _in_one_order([_canonical(item) for item in value], key=lambda m: m)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
        return ["message", stable_name(type(value)), _canonical(fields)]
    return value


def _in_one_order(items: list[Any], key: Callable[[Any], Any]) -> list[Any]:
    """``items`` sorted by ``key``: naturally if the keys are all strs, or all numbers
    (a total order), else by their encoding (mixed types do not compare, and sets
    compare as subsets, which orders nothing)."""
    kinds = {type(key(item)) for item in items}
    if kinds <= {str} or kinds <= {int, float, bool}:
        return sorted(items, key=key)
    return sorted(items, key=lambda item: encode(_canonical(key(item))))


STATEMENTS: Final = "\x00sql"
"""The name each ``ctx.sql`` statement's digest is journaled under; its occurrence is
its place among the executor's statements of the superstep."""


_SAID: Final = 500
"""How much of a raised error's message a raise record keeps."""
_RECORD_BYTES: Final = 16 * 1024
"""A raise record larger than this keeps only the error's type and message: a raise is
journaled with the checkpoint, and an error may carry a whole response body."""
_RAISES_KEPT: Final = 50
"""Raises journaled per effect occurrence in one attempt: a handler polling an effect
until it succeeds would otherwise grow its checkpoint by one record per poll. A
replay raises these, then returns the result."""


def _raise_record(error: Exception) -> bytes:
    """What a replay needs to raise ``error`` again: its type's module (``__main__``
    under the name it is imported by, as a message type's is) and qualified name, the
    arguments it was made with and its attributes (what does not encode is left out;
    arguments None: its message is its only argument), and its message (the first
    ``_SAID`` characters, with what UTF-8 cannot carry escaped)."""
    cls = type(error)
    module = main_module_name() if cls.__module__ == "__main__" else cls.__module__
    said = said_by(error)[:_SAID].encode("utf-8", "backslashreplace").decode("utf-8")
    try:
        args, attrs = error_parts(error, _encodes)
        attrs.pop(_CARRIED, None)  # the runtime's own, not the error's
        attrs.pop(_UNRECORDED, None)
        record = encode([module, cls.__qualname__, args, attrs, said])
    except Exception:  # noqa: BLE001 - the handler must still get its own error
        record = b""
    if not record or len(record) > _RECORD_BYTES:
        record = encode([module, cls.__qualname__, None, {}, said])
    return record


def _encodes(value: object) -> bool:
    try:
        encode(value)
    except Exception:  # noqa: BLE001 - any failure means: not this value
        return False
    return True


def _loaded_error_type(module: str, qualname: str) -> type[BaseException] | None:
    """The exception class ``module.qualname`` of a module this process has loaded
    (never imports: the names come from a store; the script's own module is also
    found as ``__main__``); None if there is none."""
    places = [sys.modules.get(module)]
    if module in (main_module_name(), "__main__"):
        places.append(sys.modules.get("__main__"))
    for place in places:
        found: object = place
        for part in qualname.split("."):
            if found is None or part == "<locals>":
                found = None
                break
            found = getattr(found, part, None)
        if isinstance(found, type) and issubclass(found, BaseException):
            return found
    return None


def carry(error: BaseException, made: list[list[Any]]) -> None:
    """Attach ``made`` (``[name, n, result]`` each) to the exception a step failed with.

    Written into its ``__dict__`` directly: an exception may refuse attributes (a
    frozen dataclass, its own ``__setattr__``), and the handler's error must reach the
    supervisor as it was raised."""
    if made:
        vars(error)[_CARRIED] = list(made)


def carried(error: BaseException) -> list[list[Any]]:
    """The effects a failed step's attempt got, as :func:`carry` attached them."""
    made = getattr(error, _CARRIED, None)
    return made if type(made) is list else []


def carry_unrecorded(error: BaseException, effects: list[list[Any]]) -> None:
    """Attach to the exception a run failed with the effect results of its supersteps
    that no cut recorded (``[executor, superstep, name, n, result]`` each): a policy
    that skips barriers leaves no ``halt`` cut to hold them. A sub-workflow's inner
    run is one: the parent records them instead, so its retry calls none again."""
    if effects:
        vars(error)[_UNRECORDED] = list(effects)


def unrecorded(error: BaseException) -> list[list[Any]]:
    """The effect results a failed run's cuts do not hold, as :func:`carry_unrecorded`
    attached them."""
    effects = getattr(error, _UNRECORDED, None)
    return effects if type(effects) is list else []


_CONTROL: Final = re.compile(
    r"^\s*(BEGIN|COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE|ATTACH|DETACH|VACUUM|PRAGMA|START|"
    r"PREPARE|SET\s+TRANSACTION|LOCK)\b",
    re.IGNORECASE,
)
"""Statements that would take the commit out of the store's hands (or its connection's
settings): refused, since the statement runs inside the checkpoint's transaction."""

_READS: Final = re.compile(r"^\s*(SELECT|VALUES|EXPLAIN|SHOW|TABLE)\b", re.IGNORECASE)
"""Statements that only read: queued, their result would be thrown away unseen."""

_MAX_INT = (1 << 63) - 1


def check_statement(executor: str, statement: str, params: tuple[Any, ...]) -> None:
    """Refuse what cannot run inside a checkpoint's transaction, before it is queued.

    Raises:
        StatementRefused: not a str, more than one statement, transaction control, or a
            parameter neither SQLite nor PostgreSQL binds as is.
    """
    if not isinstance(statement, str) or not statement.strip():
        raise StatementRefused(
            f"executor {executor!r}: ctx.sql takes one SQL statement as a non-empty str, "
            f"not {statement!r}"
        )
    if _READS.match(statement):
        raise StatementRefused(
            f"executor {executor!r}: ctx.sql({statement[:60]!r}) was refused: it only reads, "
            "and a statement queued for the checkpoint's transaction returns nothing to the "
            "handler; read through your own connection (or in a ctx.effect), and pass "
            "ctx.sql an INSERT, UPDATE or DELETE"
        )
    if _CONTROL.match(statement) or ";" in statement.strip().rstrip(";"):
        raise StatementRefused(
            f"executor {executor!r}: ctx.sql({statement[:60]!r}) was refused: it runs inside "
            "the transaction that commits the superstep's checkpoint, so it must be a single "
            "statement without transaction control (BEGIN, COMMIT, SAVEPOINT, ...), ATTACH "
            "or PRAGMA; pass one INSERT/UPDATE/DELETE per call"
        )
    for index, value in enumerate(params):
        ok = value is None or type(value) in (bool, float, str, bytes)
        if type(value) is int:
            ok = -_MAX_INT - 1 <= value <= _MAX_INT
        if not ok:
            raise StatementRefused(
                f"executor {executor!r}: parameter {index} of ctx.sql({statement[:60]!r}) is "
                f"{type(value).__qualname__} {value!r:.40}; pass None, bool, int (64-bit), "
                "float, str or bytes (encode anything else yourself, e.g. as JSON text)"
            )


class EffectJournal:
    """One executor's effects and statements in one superstep (one attempt at it)."""

    __slots__ = (
        "_counts",
        "_lock",
        "_queued",
        "_raises",
        "_released",
        "dialect",
        "executor",
        "fencing",
        "made",
        "memory",
        "recorded",
        "scope",
        "statements",
        "superstep",
    )

    def __init__(
        self,
        executor: str,
        superstep: int,
        scope: str,
        *,
        memory: EffectMemory,
        recorded: dict[tuple[str, int], bytes] | None = None,
        dialect: str | None = None,
        fencing: int | None = None,
    ) -> None:
        self.executor = executor
        self.superstep = superstep
        self.scope = scope
        """The session id and lineage tag: what makes a key unique to this run's lineage."""
        self.memory = memory
        """Results of earlier attempts at this superstep (the runner's; added to here)."""
        self.recorded = recorded
        """A replay's recorded results (then nothing is ever called), else None."""
        self.dialect = dialect
        """The SQL dialect of the store that commits the superstep, None if it takes none."""
        self.fencing = fencing
        """The session lease's fencing token, None without a lease."""
        self.made: list[list[Any]] = []
        """``[name, n, result]`` of each effect of this attempt, in call order (and the
        raises, argument digests and statement digests journaled beside them)."""
        self.statements: list[list[Any]] = []
        """``[sql, params]`` of each ``ctx.sql`` call, in call order."""
        self._counts: dict[str, int] = {}
        """The next occurrence of each name no call has taken yet."""
        self._released: dict[str, list[int]] = {}
        """Occurrences whose call raised, per name: taken again first (smallest first),
        so a retry is the same effect."""
        self._lock = threading.Lock()
        """Calls made at once (``asyncio.gather``, a thread pool) take their occurrences
        under it: each its own."""
        self._queued = 0
        """``ctx.sql`` statements queued in this attempt (a replay's too)."""
        self._raises: dict[tuple[str, int], int] = {}
        """How many times each (name, n) raised in this attempt (or was raised again
        from the record, in a replay)."""

    def key(self, name: str) -> str:
        """The idempotency key of the next effect named ``name``: the same on every attempt
        at this superstep along this lineage (and for a retry of one that raised),
        different for every other effect."""
        n = self._next(name)
        identity = f"{self.scope}\x00{self.superstep}\x00{self.executor}\x00{name}\x00{n}"
        return "af-" + hashlib.sha256(identity.encode()).hexdigest()[:40]

    def call(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Any) -> Any:
        """The result of the next effect named ``name``: recorded, remembered, or called."""
        with self._occurrence(name, fn, args, kwargs) as (n, found):
            if found is not None:
                return decode(found)
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                self._journal_raise(name, n, exc)
                raise
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()  # never run: nothing was called
                raise ResultNotRecordable(
                    f"executor {self.executor!r} (superstep {self.superstep}): effect "
                    f"{name!r} returned {type(result).__name__}, which ctx.effect cannot "
                    "record; in an async handler, await "
                    f"ctx.aeffect({getattr(fn, '__name__', 'fn')}, ...)",
                    type_name=type(result).__name__,
                    executor=self.executor,
                )
            return decode(self._record(name, n, result))

    async def acall(
        self, name: str, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], kwargs: Any
    ) -> Any:
        """:meth:`call` for a coroutine function (awaited only when it must be called);
        a plain function's result is recorded as it is."""
        with self._occurrence(name, fn, args, kwargs) as (n, found):
            if found is not None:
                return decode(found)
            try:
                result = fn(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:
                self._journal_raise(name, n, exc)
                raise
            return decode(self._record(name, n, result))

    @contextlib.contextmanager
    def _occurrence(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Iterator[tuple[int, bytes | None]]:
        """Take the next occurrence of ``name`` for a call of ``fn`` (journaling its
        arguments) and give its recorded or remembered result (None: call it); the
        occurrence is given back if the block raises, so a retry is the same effect."""
        n = self._take(name)
        try:
            self._journal_arguments(name, n, fn, args, kwargs)
            yield n, self._find(name, n)
        except BaseException:
            self._release(name, n)
            raise

    def _next(self, name: str) -> int:
        """The occurrence the next call of ``name`` takes (see :meth:`_take`)."""
        with self._lock:
            released = self._released.get(name)
            return released[0] if released else self._counts.get(name, 0)

    def _take(self, name: str) -> int:
        """Take the next occurrence of ``name`` as a call starts: the smallest one whose
        call raised, else a new one. Taken at the start, so calls made at once each get
        their own (in the order they start), with their own key and result."""
        with self._lock:
            released = self._released.get(name)
            if released:
                return released.pop(0)
            n = self._counts.get(name, 0)
            self._counts[name] = n + 1
            return n

    def _release(self, name: str, n: int) -> None:
        """Give back occurrence ``n`` of ``name``, whose call raised: its retry is the
        same effect (same occurrence, same key)."""
        with self._lock:
            released = self._released.setdefault(name, [])
            released.append(n)
            released.sort()

    def known(self) -> list[list[Any]]:
        """``[name, n, result]`` of every result this superstep's attempts got: this
        attempt's, and those remembered from earlier ones or handed in."""
        found = {(name, n): result for name, n, result in self.made}
        for place, result in self.memory.items():
            if type(result) is bytes:
                found.setdefault(place, result)
        return [[name, n, result] for (name, n), result in found.items()]

    def queue_sql(self, statement: str, params: tuple[Any, ...]) -> None:
        """Queue a statement for the superstep's checkpoint transaction."""
        if self.dialect is None:
            raise StatementRefused(
                f"executor {self.executor!r} called ctx.sql, but the session's store does not "
                "commit statements with its checkpoints (only SQLiteStore and PostgresStore "
                "do, used directly: not through a wrapper or EncryptedStore), or the executor "
                "runs inside a sub-workflow (whose inner run has a store of its own, private "
                "to one delivery); run the session with one of those stores and make the "
                "write in a parent executor, or make it a ctx.effect with an idempotency key"
            )
        check_statement(self.executor, statement, params)
        self.made.append([STATEMENTS, self._queued, _digest([statement, list(params)])])
        self._queued += 1
        if self.recorded is None:  # a replay checks the statement, and commits nothing
            self.statements.append([statement, list(params)])

    def _find(self, name: str, n: int) -> bytes | None:
        """The result of occurrence ``n`` of ``name`` if it was recorded or remembered;
        None when it must be called."""
        if self.recorded is not None:
            self._raise_recorded(name, n)
            found = self.recorded.get((name, n))
            if found is None:
                raise EffectNotRecorded(
                    f"executor {self.executor!r} made effect {name!r} (occurrence {n}) in "
                    f"superstep {self.superstep}, which the stored run did not make: the new "
                    "code calls the outside world where the old did not",
                    executor=self.executor,
                    superstep=self.superstep,
                    effect=name,
                )
            self.made.append([name, n, found])
            return found
        remembered = self.memory.get((name, n))
        if isinstance(remembered, ResultNotRecordable):  # the same result: the same mistake
            raise ResultNotRecordable(
                str(remembered), type_name=remembered.type_name, executor=self.executor
            )
        if remembered is not None:
            self.made.append([name, n, remembered])
        return remembered

    def _journal_arguments(
        self,
        name: str,
        n: int,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        """Journal the digest of the arguments of occurrence ``n`` of ``name``, at its
        first call (a retry after a raise may pass others: the call that counts for a
        replay is the one the handler made first)."""
        if (name, n) in self._raises:
            return
        digest = _arguments_digest(fn, args, kwargs)
        if digest is not None:
            self.made.append([arguments_name(name), n, digest])

    def _journal_raise(self, name: str, n: int, error: Exception) -> None:
        """Journal that occurrence ``n`` of ``name`` raised ``error`` (see the module
        docstring): under :func:`raised_name`, as that name's next occurrence (the
        first ``_RAISES_KEPT`` of them)."""
        k = self._raises.get((name, n), 0)
        if k < _RAISES_KEPT:
            self._raises[(name, n)] = k + 1
            try:
                record = _raise_record(error)
            except Exception:  # noqa: BLE001 - never instead of the handler's own error
                return
            self.made.append([raised_name(name, n), k, record])

    def _raise_recorded(self, name: str, n: int) -> None:
        """In a replay, raise what occurrence ``n`` of ``name`` raised next in the
        stored run, if it raised again there; else return."""
        assert self.recorded is not None
        k = self._raises.get((name, n), 0)
        place = (raised_name(name, n), k)
        record = self.recorded.get(place)
        if record is None and k >= _RAISES_KEPT and (name, n) not in self.recorded:
            # Raised more often than a journal keeps and never returned: it raised
            # again each time, as far as the record knows; the last kept raise again.
            record = self.recorded.get((raised_name(name, n), _RAISES_KEPT - 1))
            place = (raised_name(name, n), _RAISES_KEPT - 1)
        if record is None:
            return
        self._raises[(name, n)] = k + 1
        if k < _RAISES_KEPT:
            self.made.append([*place, record])
        module, qualname, args, attrs, said = decode(record)
        cls = _loaded_error_type(module, qualname)
        if cls is None:
            raise EffectNotRecorded(
                f"executor {self.executor!r}: effect {name!r} (occurrence {n}) in superstep "
                f"{self.superstep} raised {module}.{qualname} in the stored run ({said!r}), "
                "which the replay cannot raise again: no loaded module has that class; "
                "define the exception class at module level in a module the workflow imports",
                executor=self.executor,
                superstep=self.superstep,
                effect=name,
            )
        args = (said,) if args is None else tuple(args)
        raise rebuilt_error(cls, args, attrs, f"{qualname}: {said}")

    def _record(self, name: str, n: int, result: object) -> bytes:
        try:
            data = encode(result)
        except EncodeError as exc:
            error = ResultNotRecordable(
                f"executor {self.executor!r} (superstep {self.superstep}): effect {name!r} "
                f"returned a value holding {exc.type_name or 'a type'!r}, which cannot be "
                "recorded (its result is journaled like a message); return built-in values "
                "or @actorflow.message classes from the effect (data, not a client, socket "
                "or file)",
                type_name=exc.type_name,
                executor=self.executor,
            )
            self.memory[(name, n)] = error
            raise error from None
        self.memory[(name, n)] = data
        self.made.append([name, n, data])
        return data


EffectFrame = list[Any]
"""A step request's ``effects`` field: ``[scope, fencing token, SQL dialect, recorded,
remembered]``; the last two ``[[name, n, result], ...]`` or None."""

NO_FRAME: Final = ("", None, None, None, None)
"""The frame of a step request that carries none."""


class EffectFrameHost(HostProxy):
    """A host whose step requests get their effect frame from ``reframe``.

    ``reframe(executor, superstep, frame)`` returns the frame to send instead: a
    replay gives the stored run's results, a sub-workflow the parent's scope. The
    runtime's own path never wraps a host; the tools that need this do
    (``Session.wrap_host``).
    """

    __slots__ = ("_executor", "_reframe")

    def __init__(
        self,
        host: HostRef,
        executor: str,
        reframe: Callable[[str, int, EffectFrame], EffectFrame],
    ) -> None:
        super().__init__(host)
        self._executor = executor
        self._reframe = reframe

    def call(self, method: str, payload: bytes) -> HostFuture:
        return self._host.call(method, self._rewritten(method, payload))

    def load_call(self, factory: HostedFactory, method: str, payload: bytes) -> HostFuture:
        return self._host.load_call(factory, method, self._rewritten(method, payload))

    def _rewritten(self, method: str, payload: bytes) -> bytes:
        if method != "step":
            return payload
        request = StepRequest.unpacked(payload)
        frame = list(request.effects or NO_FRAME)
        new = self._reframe(self._executor, request.superstep, frame)
        return request._replace(effects=new).packed()
