"""The guard: what counts as a failure while one input is decoded.

Decoding must raise nothing but :class:`~actorflow.errors.ActorflowError`, import
nothing, execute nothing and start no process. The guard checks each of these
three ways, since each alone has blind spots (an audit hook sees no ``import``
event for a module already cached, and ``importlib.import_module`` of a cached
parent raises none; a ``sys.modules`` diff misses a module that removes itself):

- a ``sys.modules`` diff around every input;
- packages planted at the front of ``sys.path`` under names decoding could be
  tricked into importing (``tzdata``, the fallback of ``zoneinfo``, and a few
  generic ones); their code records that it ran;
- an audit hook, armed only while an input is decoded, failing on ``import``,
  ``exec``, ``compile``, process creation and ``ctypes``.

Time and memory are the driver's (:mod:`fuzz.run`): each input's wall time is
measured here, and workers run under ``RLIMIT_AS`` and a ``faulthandler`` alarm.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from actorflow.errors import ActorflowError

__all__ = ["PLANTED", "Guard", "Outcome", "SilentRollback"]

PLANTED = ("tzdata", "tzdata.zoneinfo", "actorflow_planted", "evil")
"""Packages planted on ``sys.path``; importing any of them is a failure."""

_AUDITED = (
    "import",
    "exec",
    "compile",
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "pty.spawn",
    "ctypes.dlopen",
    "ctypes.dlsym",
    "code.__new__",
    "builtins.input",
    "pickle.find_class",
    "marshal.loads",
)

_PLANT = """
import sys
sys.modules["fuzz._guard"].RAN.append(__name__)
"""

RAN: list[str] = []
"""Names of planted modules whose code ran (appended by the planted code itself)."""


class SilentRollback(Exception):
    """A store returned an older record, or left a saved one out, without an error."""

    def __init__(self, message: str, damage: str = "") -> None:
        super().__init__(message)
        self.damage = damage
        """What was done to the store (the outcome's kind names it), if known."""


@dataclass(slots=True)
class Outcome:
    """What happened to one input."""

    kind: str = "ok"
    """``ok``, ``rejected`` (an ActorflowError), or a failure kind: ``exception:<type>``,
    ``import``, ``exec``, ``subprocess``, ``planted``, ``memory``, ``slow``, ``rollback``
    or ``rollback:<damage>`` (a saved record neither returned nor reported:
    :class:`SilentRollback`)."""
    detail: str = ""
    seconds: float = 0.0
    """Wall time."""
    cpu_seconds: float = 0.0
    """CPU time of the decoding thread: what ``slow`` is judged on, since on a shared
    machine the wall time also counts other processes' turns."""

    @property
    def failed(self) -> bool:
        return self.kind not in ("ok", "rejected")


@dataclass
class Guard:
    """Arms the checks around one input at a time (one guard per process)."""

    slow_seconds: float = 5.0
    events: list[str] = field(default_factory=list)
    _armed: bool = False
    _thread: int = 0
    _folder: tempfile.TemporaryDirectory[str] | None = None

    def install(self) -> None:
        """Plant the packages and add the audit hook (hooks cannot be removed: once)."""
        self._folder = tempfile.TemporaryDirectory(prefix="actorflow-fuzz-planted-")
        root = Path(self._folder.name)
        for name in PLANTED:
            package = root.joinpath(*name.split("."))
            package.mkdir(parents=True, exist_ok=True)
            (package / "__init__.py").write_text(_PLANT)
        # Every directory a key could name under tzdata.zoneinfo is planted lazily by
        # the import system itself failing; the planted parents catch those imports.
        sys.path.insert(0, str(root))
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[object, ...]) -> None:
        if self._armed and threading.get_ident() == self._thread and event.startswith(_AUDITED):
            self.events.append(f"{event} {args[:2]!r}"[:200])

    @contextmanager
    def watching(self) -> Iterator[Outcome]:
        """Check the body: it fills and classifies the yielded Outcome."""
        outcome = Outcome()
        modules = set(sys.modules)
        ran = len(RAN)
        self.events.clear()
        self._thread = threading.get_ident()
        self._armed = True
        started, started_cpu = time.perf_counter(), time.thread_time()
        try:
            yield outcome
        except ActorflowError as exc:
            outcome.kind, outcome.detail = "rejected", str(exc)[:200]
        except SilentRollback as exc:
            outcome.kind = f"rollback:{exc.damage}" if exc.damage else "rollback"
            outcome.detail = str(exc)[:300]
        except MemoryError:
            outcome.kind, outcome.detail = "memory", "MemoryError"
        except RecursionError as exc:
            outcome.kind, outcome.detail = "exception:RecursionError", str(exc)[:200]
        except Exception as exc:  # noqa: BLE001 - any other exception is the finding
            outcome.kind = f"exception:{type(exc).__name__}"
            outcome.detail = f"{exc!r}"[:300]
        finally:
            self._armed = False
            outcome.seconds = time.perf_counter() - started
            outcome.cpu_seconds = time.thread_time() - started_cpu
        new = sorted(set(sys.modules) - modules)
        if len(RAN) > ran:
            outcome.kind, outcome.detail = "planted", f"planted code ran: {RAN[ran:]}"
        elif new:
            outcome.kind, outcome.detail = "import", f"new modules: {new[:5]}"
            for name in new:  # so the next input is judged on its own
                sys.modules.pop(name, None)
        elif self.events:
            kind = (
                "subprocess"
                if any(
                    "spawn" in e or "Popen" in e or "fork" in e or "system" in e
                    for e in self.events
                )
                else "import"
                if any(e.startswith("import") for e in self.events)
                else "exec"
            )
            outcome.kind, outcome.detail = kind, "; ".join(self.events[:3])
        elif outcome.cpu_seconds > self.slow_seconds:
            outcome.kind = "slow"
            outcome.detail = f"{outcome.cpu_seconds:.2f} s of CPU ({outcome.seconds:.2f} s wall)"


def warm_up(check: Callable[[bytes], object], samples: list[bytes]) -> None:
    """Run ``check`` unguarded on valid samples, so lazy imports of the library happen first."""
    for sample in samples:
        try:
            check(sample)
        except ActorflowError:
            pass
