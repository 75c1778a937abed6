"""The supervisor: the thread that drives a session's supersteps over its executor hosts.

:class:`Driver` runs one session's supersteps on a :class:`SupervisorActor`'s
thread; a :class:`RunJob` is what a run hands it. The driver is composed of
collaborators that own their state: the hosts it borrowed (``_hosts``), the
recovery of failed executors (``_recovery``), the cuts it writes (``_cuts``), the
barrier that collects a superstep's answers (``_barrier``) and the last good state
of each executor (``_last_good``).
"""

from ._barrier import CANCEL_GRACE
from ._driver import Driver
from ._history import RECENT, RECENT_BYTES, HistoryLog
from ._job import Payload, RunJob, SupervisorActor, new_run_id

__all__ = [
    "CANCEL_GRACE",
    "RECENT",
    "RECENT_BYTES",
    "Driver",
    "HistoryLog",
    "Payload",
    "RunJob",
    "SupervisorActor",
    "new_run_id",
]
