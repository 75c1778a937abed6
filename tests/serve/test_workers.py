"""Several workers of one service on one store: any of them serves any thread.

Each worker is a real uvicorn server on 127.0.0.1 with its own ``ServiceApp`` and its
own store object on one SQLite file, as two processes behind a load balancer have:
a thread's session lease is taken by whichever worker runs it, and given back when
its run ends.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import actorflow as af
from actorflow.serve import Server, ServiceApp
from actorflow.serve._threads import Thread, Threads
from tests.serve.conftest import build

pytestmark = pytest.mark.timeout(60)

ITEMS = {"input": {"id": 1, "items": ["a"]}}


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """Clients of two workers that share ``service.db``."""
    path = str(tmp_path / "service.db")
    with (
        build() as wf_a,
        build() as wf_b,
        af.SQLiteStore(path) as store_a,
        af.SQLiteStore(path) as store_b,
        Server(ServiceApp(wf_a, store_a)) as a,
        Server(ServiceApp(wf_b, store_b)) as b,
        httpx.Client(base_url=a.url, timeout=30) as client_a,
        httpx.Client(base_url=b.url, timeout=30) as client_b,
    ):
        yield client_a, client_b


def _ok(response: httpx.Response, status: int = 200) -> httpx.Response:
    assert response.status_code == status, response.text
    return response


def test_runs_of_one_thread_alternate_between_workers(
    workers: tuple[httpx.Client, httpx.Client],
) -> None:
    """A run on one worker, the next on the other, an answer on the first, deleted on
    the second: each worker continues where the other left the thread."""
    a, b = workers
    create = {**ITEMS, "if_not_exists": "create"}
    assert _ok(a.post("/threads/t1/runs/wait", json=create)).json() == {"outputs": ["a"]}
    order_2 = {"input": {"id": 2, "items": ["b", "c"]}}
    assert _ok(b.post("/threads/t1/runs/wait", json=order_2)).json() == {"outputs": ["b", "c"]}
    [interrupt] = _ok(a.post("/threads/t1/runs/wait", json={"input": {"id": 3}})).json()[
        "__interrupt__"
    ]
    answer = {"command": {"resume": {interrupt["id"]: {"approved": True, "note": "ok"}}}}
    assert _ok(b.post("/threads/t1/runs/wait", json=answer)).json() == {
        "outputs": ["approved 3: ok"]
    }
    state = _ok(a.get("/threads/t1")).json()
    assert state["values"]["intake"] == {"orders": [1, 2, 3]}
    assert state["values"]["ship"] == {"shipped": 3}
    _ok(b.delete("/threads/t1"), 204)
    _ok(a.get("/threads/t1"), 404)


def test_a_thread_is_busy_on_the_other_worker_only_while_its_run_goes_on(
    workers: tuple[httpx.Client, httpx.Client], gate: threading.Event
) -> None:
    """While a run goes on on one worker, the other refuses the thread (409, naming the
    owner); once the run was joined, the other worker runs it."""
    a, b = workers
    _ok(a.post("/threads/t1/runs/wait", json={**ITEMS, "if_not_exists": "create"}))
    run = _ok(a.post("/threads/t1/runs", json={"input": 0})).json()  # holds at tick 5
    refused = b.post("/threads/t1/runs/wait", json=ITEMS)
    assert refused.status_code == 409 and refused.json()["error"] == "SessionOwned", refused.text
    # Its stored history is readable there all the same (no lease needed to read).
    stored = _ok(b.get("/threads/t1/events")).json()
    assert [e["event"] for e in stored][:2] == ["run_started", "output"]
    gate.set()
    joined = _ok(a.get(f"/threads/t1/runs/{run['run_id']}/join")).json()
    assert joined["outputs"] == list(range(21))
    assert _ok(b.post("/threads/t1/runs/wait", json=ITEMS)).json() == {"outputs": ["a"]}
    assert _ok(b.get("/threads/t1")).json()["values"]["intake"] == {"orders": [1, 1]}


def test_a_thread_stream_on_one_worker_shows_the_runs_of_another(
    workers: tuple[httpx.Client, httpx.Client],
) -> None:
    """A thread's stream holds nothing: while it is open on one worker, the other runs
    the thread, and the stream shows that run as its events are stored."""
    a, b = workers
    _ok(a.post("/threads/t1/runs/wait", json={**ITEMS, "if_not_exists": "create"}))
    with a.stream("GET", "/threads/t1/stream", params={"stream_mode": "lifecycle"}) as stream:
        lines = stream.iter_lines()  # kept: dropping it closes the response
        data = (
            json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data:")
        )
        assert [next(data)["event"] for _ in range(2)] == ["run_started", "run_completed"]
        ran = _ok(b.post("/threads/t1/runs/wait", json=ITEMS))
        assert ran.json() == {"outputs": ["a"]}
        started, completed = next(data), next(data)
        assert (started["event"], completed["event"]) == ("run_started", "run_completed")
        assert started["run_id"] != "" and started["run_id"] == completed["run_id"]


def test_a_run_asked_for_as_the_last_one_s_stream_ends_is_accepted(
    workers: tuple[httpx.Client, httpx.Client],
) -> None:
    """A client that read a run's stream to its end starts the next run at once: the
    ended run, still giving its session back, does not make the thread busy."""
    a, _ = workers
    _ok(a.post("/threads/t1/runs/wait", json={**ITEMS, "if_not_exists": "create"}))
    body = {**ITEMS, "stream_mode": "events"}
    for _ in range(30):
        with a.stream("POST", "/threads/t1/runs/stream", json=body) as stream:
            assert stream.status_code == 200, stream.read()
            lines = list(stream.iter_lines())
        assert any('"run_completed"' in line for line in lines), lines


class _LockHeldByAStalledSave(af.MemoryStore):
    """A store whose lock a stalled process holds: every lease grant times out."""

    def acquire_lease(
        self, session: str, owner: str, ttl: float, *, lock_wait: float | None = None
    ) -> af.Lease:
        raise af.StoreLocked(
            f"cannot take the lease of session {session!r}: its lock stayed held",
            lock="the store's lock",
            holder="a process stopped inside a save",
        )


def test_a_store_whose_lock_stays_held_is_busy_not_broken() -> None:
    """A worker whose store's lock stays held answers 503 with Retry-After (try again
    soon), not 500, naming the lock."""
    with (
        build() as wf,
        _LockHeldByAStalledSave() as store,
        Server(ServiceApp(wf, store)) as worker,
        httpx.Client(base_url=worker.url, timeout=30) as client,
    ):
        busy = client.post("/threads/t1/runs/wait", json={**ITEMS, "if_not_exists": "create"})
        assert busy.status_code == 503, busy.text
        assert busy.json()["error"] == "StoreLocked" and "lock" in busy.json()["message"]
        assert busy.headers["retry-after"] == "1"


def test_a_worker_keeps_a_bounded_number_of_idle_thread_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its bound, a worker forgets the least recently used idle records of stored
    threads (a service that runs for days keeps a bounded memory); a forgotten thread
    is read and run on from the store as before."""
    monkeypatch.setattr("actorflow.serve._threads.KEPT_THREADS", 3)
    with (
        build() as wf,
        af.SQLiteStore(str(tmp_path / "service.db")) as store,
        Server(app := ServiceApp(wf, store)) as worker,
        httpx.Client(base_url=worker.url, timeout=30) as client,
    ):
        _ok(client.post("/threads", json={"thread_id": "created", "metadata": {"k": 1}}))
        for n in range(6):
            _ok(client.post(f"/threads/t{n}/runs/wait", json={**ITEMS, "if_not_exists": "create"}))
        kept = set(app.threads.known())
        assert kept == {"t3", "t4", "t5"}, kept
        # Forgotten too, as it is stored from its creation on: with its metadata.
        assert _ok(client.get("/threads/created")).json()["metadata"] == {"k": 1}
        assert _ok(client.post("/threads/t0/runs/wait", json=ITEMS)).json() == {"outputs": ["a"]}
        assert _ok(client.get("/threads/t0")).json()["values"]["intake"] == {"orders": [1, 1]}


def test_the_stream_of_a_run_that_ended_is_read_while_another_worker_runs_the_thread(
    workers: tuple[httpx.Client, httpx.Client], gate: threading.Event
) -> None:
    """A run's stream, asked for after it ended, comes from the store: the worker that
    ran it serves it while another worker holds the thread for a new run."""
    a, b = workers
    done = _ok(a.post("/threads/t1/runs", json={**ITEMS, "if_not_exists": "create"})).json()
    _ok(a.get(f"/threads/t1/runs/{done['run_id']}/join"))
    going = _ok(b.post("/threads/t1/runs", json={"input": 0})).json()  # holds at tick 5
    try:
        replayed = a.get(
            f"/threads/t1/runs/{done['run_id']}/stream", params={"stream_mode": "events"}
        )
        assert replayed.status_code == 200, replayed.text
        data = [line for line in replayed.text.splitlines() if line.startswith("data:")]
        metadata, *events = data
        assert done["run_id"] in metadata, metadata
        assert '"run_started"' in events[0] and '"run_completed"' in events[-1], events
        assert all(done["run_id"] in line for line in events), events
    finally:
        gate.set()
    _ok(b.get(f"/threads/t1/runs/{going['run_id']}/join"))


def test_a_run_asked_for_as_a_thread_stream_shows_the_last_one_ended_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that watches the thread's stream starts the next run as soon as it sees
    the last one end: that run, still giving its session back (slowly here: a store
    that takes its time), does not make the thread busy; the next run waits for it."""
    let_go = Threads.let_go

    async def slowly(self: Threads, thread: Thread) -> None:
        await asyncio.sleep(0.2)  # a slow close: the window in which the thread is ending
        await let_go(self, thread)

    monkeypatch.setattr(Threads, "let_go", slowly)
    with (
        build() as wf,
        af.SQLiteStore(str(tmp_path / "service.db")) as store,
        Server(ServiceApp(wf, store)) as worker,
        httpx.Client(base_url=worker.url, timeout=30) as client,
    ):
        _ok(client.post("/threads/t1/runs/wait", json={**ITEMS, "if_not_exists": "create"}))
        with client.stream("GET", "/threads/t1/stream", params={"stream_mode": "lifecycle"}) as s:
            lines = s.iter_lines()
            ended = 0
            for runs in range(1, 4):  # the first run's end is in the history it begins with
                while ended < runs:
                    ended += '"run_completed"' in next(lines)
                _ok(client.post("/threads/t1/runs", json=ITEMS))  # at once


def test_a_run_another_worker_started_is_read_and_joined_from_the_store(
    workers: tuple[httpx.Client, httpx.Client], gate: threading.Event
) -> None:
    """A worker asked for a run it did not start reads it from the thread's stored
    history: its status while it goes on, a join that returns when it ends, its
    interrupts; it cancels it through the store (the running worker sees the request
    on the thread's lease and stops the run at a barrier)."""
    a, b = workers
    _ok(a.post("/threads/t1/runs/wait", json={**ITEMS, "if_not_exists": "create"}))
    going = _ok(a.post("/threads/t1/runs", json={"input": 0})).json()  # holds at tick 5
    path = f"/threads/t1/runs/{going['run_id']}"
    assert _ok(b.get(path)).json()["status"] == "running"
    cancelled = _ok(b.post(f"{path}/cancel")).json()  # waits until the run stopped
    assert cancelled["status"] == "interrupted", cancelled  # the API's word for cancelled
    gate.set()  # the handler abandoned at tick 5 may return now
    stopped = _ok(a.get(f"{path}/join")).json()
    assert stopped["outputs"] == list(range(5)) and "__cancelled__" in stopped, stopped
    assert _ok(a.get("/threads/t1")).json()["status"] == "idle"
    gate.clear()
    going = _ok(a.post("/threads/t1/runs", json={})).json()  # on from tick 5, holds there
    path = f"/threads/t1/runs/{going['run_id']}"
    joined: list[httpx.Response] = []
    joiner = threading.Thread(target=lambda: joined.append(b.get(f"{path}/join")))
    joiner.start()
    gate.set()
    joiner.join(timeout=30)
    assert _ok(joined[0]).json() == {"outputs": list(range(5, 21))}
    assert _ok(b.get(path)).json()["status"] == "success"
    asked = _ok(a.post("/threads/t1/runs/wait", json={"input": {"id": 3}})).json()
    [interrupt] = asked["__interrupt__"]
    run_id = next(r["run_id"] for r in _ok(a.get("/threads/t1/runs")).json())
    assert _ok(b.get(f"/threads/t1/runs/{run_id}/join")).json() == asked
    assert interrupt["response_type"] == "tests.serve.Decision"
    _ok(b.get("/threads/t1/runs/no-such-run"), 404)


def test_a_run_another_worker_runs_is_streamed_from_the_store(
    workers: tuple[httpx.Client, httpx.Client], gate: threading.Event
) -> None:
    """A worker asked for the stream of a run another worker runs follows it in the
    store: what is stored first, then each event as it is stored, to the run's end."""
    a, b = workers
    _ok(a.post("/threads/t1/runs/wait", json={**ITEMS, "if_not_exists": "create"}))
    going = _ok(a.post("/threads/t1/runs", json={"input": 0})).json()  # holds at tick 5
    path = f"/threads/t1/runs/{going['run_id']}/stream"
    with b.stream("GET", path, params={"stream_mode": "events"}) as stream:
        assert stream.status_code == 200
        data = (line for line in stream.iter_lines() if line.startswith("data:"))
        assert going["run_id"] in next(data)  # the metadata event
        events = [json.loads(next(data).removeprefix("data: ")) for _ in range(6)]
        assert [e["event"] for e in events] == ["run_started"] + ["output"] * 5
        gate.set()  # the run goes on: the rest arrives as it is stored
        events += [json.loads(line.removeprefix("data: ")) for line in data]
    outputs = [e["data"]["value"] for e in events if e["event"] == "output"]
    assert outputs == list(range(21)) and events[-1]["event"] == "run_completed"


def test_a_thread_made_on_one_worker_is_run_found_and_updated_on_another(
    workers: tuple[httpx.Client, httpx.Client],
) -> None:
    """A thread made by POST /threads is stored at once: the other worker reads it (with
    its metadata and creation time), runs it and finds it by its metadata; metadata
    changed on either worker is what both show, and runs carry it on."""
    a, b = workers
    made = _ok(a.post("/threads", json={"thread_id": "t1", "metadata": {"user": "ann"}})).json()
    assert made["metadata"] == {"user": "ann"} and made["status"] == "idle"
    seen = _ok(b.get("/threads/t1")).json()
    assert seen["metadata"] == {"user": "ann"} and seen["status"] == "idle"
    assert seen["created_at"] == made["created_at"]
    assert _ok(b.post("/threads/t1/runs/wait", json=ITEMS)).json() == {"outputs": ["a"]}
    found = _ok(b.post("/threads/search", json={"metadata": {"user": "ann"}})).json()
    assert [t["thread_id"] for t in found] == ["t1"]
    patched = _ok(b.patch("/threads/t1", json={"metadata": {"tier": 2}})).json()
    assert patched["metadata"] == {"user": "ann", "tier": 2}
    assert _ok(a.get("/threads/t1")).json()["metadata"] == {"user": "ann", "tier": 2}
    run = {**ITEMS, "metadata": {"source": "web"}}
    assert _ok(a.post("/threads/t1/runs/wait", json=run)).json() == {"outputs": ["a"]}
    after = _ok(b.get("/threads/t1")).json()
    assert after["metadata"] == {"user": "ann", "tier": 2}
    assert after["created_at"] == made["created_at"] < after["updated_at"]
    assert after["values"]["intake"] == {"orders": [1, 1]}
    state = _ok(b.get("/threads/t1/state")).json()
    assert state["metadata"]["source"] == "web"  # the run's own, beside the thread's
    assert not _ok(a.post("/threads/search", json={"metadata": {"user": "bob"}})).json()
    refused = a.post("/threads", json={"thread_id": "t1"})
    assert refused.status_code == 409 and refused.json()["error"] == "SessionExists"
    same = _ok(b.post("/threads", json={"thread_id": "t1", "if_exists": "do_nothing"})).json()
    assert same["metadata"] == {"user": "ann", "tier": 2}


def test_a_fork_made_on_one_worker_is_run_on_another_at_once(
    workers: tuple[httpx.Client, httpx.Client],
) -> None:
    """A fork is stored as it is made: the worker that made it holds nothing, and the
    other runs it at once from the source's state, with the source's metadata."""
    a, b = workers
    _ok(a.post("/threads", json={"thread_id": "t1", "metadata": {"user": "ann"}}))
    _ok(a.post("/threads/t1/runs/wait", json=ITEMS))
    fork = _ok(a.post("/threads/t1/fork", json={"thread_id": "t2"})).json()
    assert fork["metadata"] == {"user": "ann", "forked_from": "t1"}
    assert _ok(b.post("/threads/t2/runs/wait", json=ITEMS)).json() == {"outputs": ["a"]}
    assert _ok(a.get("/threads/t2")).json()["values"]["intake"] == {"orders": [1, 1]}
    assert _ok(b.get("/threads/t1")).json()["values"]["intake"] == {"orders": [1]}


def test_metadata_is_not_changed_under_a_run_nor_over_a_run_that_stopped_midway(
    workers: tuple[httpx.Client, httpx.Client], gate: threading.Event
) -> None:
    """A PATCH while a run goes on (on this worker or the other) is refused, naming what
    to do; once the run is cancelled (stopped as asked, at a barrier, with messages in
    flight) either worker takes it; a run's metadata may not hide the thread's key."""
    a, b = workers
    _ok(a.post("/threads", json={"thread_id": "t1", "metadata": {"user": "ann"}}))
    run = _ok(a.post("/threads/t1/runs", json={"input": 0})).json()  # holds at tick 5
    here = a.patch("/threads/t1", json={"metadata": {"tier": 2}})
    assert here.status_code == 409 and "wait for it" in here.json()["message"], here.text
    there = b.patch("/threads/t1", json={"metadata": {"tier": 2}})
    assert there.status_code == 409 and there.json()["error"] == "SessionOwned", there.text
    _ok(a.post(f"/threads/t1/runs/{run['run_id']}/cancel", params={"wait": "false"}), 202)
    gate.set()
    _ok(a.get(f"/threads/t1/runs/{run['run_id']}/join"))
    assert _ok(a.get("/threads/t1")).json()["metadata"] == {"user": "ann"}
    _ok(b.patch("/threads/t1", json={"metadata": {"tier": 2}}))
    assert _ok(a.get("/threads/t1")).json()["metadata"] == {"user": "ann", "tier": 2}
    assert _ok(a.get("/threads/t1")).json()["status"] == "idle"
    hidden = a.post(
        "/threads/t1/runs/wait", json={"input": 1, "metadata": {"actorflow.thread": {}}}
    )
    assert hidden.status_code == 422 and "PATCH /threads/t1" in hidden.json()["message"]


def test_a_thread_stream_ends_when_its_thread_is_deleted_and_made_anew_between_reads(
    workers: tuple[httpx.Client, httpx.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread deleted on one worker and made anew (and run) there between two reads of
    its stream on the other ends that stream, as a deletion does: the stream never goes
    on into the new thread from the old one's position (skipping the new one's first
    events)."""
    a, b = workers
    monkeypatch.setattr("actorflow.serve._threads.STORED_POLL", 2.0)  # room between reads
    checked = threading.Event()
    exists = Threads._exists

    async def noted(self: Threads, thread: Thread) -> bool:
        found = await exists(self, thread)
        checked.set()  # the stream read the thread's history, then found it stored
        return found

    monkeypatch.setattr(Threads, "_exists", noted)
    _ok(a.post("/threads/t1/runs/wait", json={**ITEMS, "if_not_exists": "create"}))
    _ok(a.post("/threads/t1/runs/wait", json=ITEMS))
    stream_timeout = httpx.Timeout(30, read=10)
    with a.stream(
        "GET", "/threads/t1/stream", params={"stream_mode": "lifecycle"}, timeout=stream_timeout
    ) as stream:
        lines = stream.iter_lines()
        data = (
            json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data:")
        )
        seen = [next(data)["event"] for _ in range(4)]
        assert seen == ["run_started", "run_completed"] * 2
        assert checked.wait(10)
        _ok(b.delete("/threads/t1"), 204)
        _ok(b.post("/threads/t1/runs/wait", json={**ITEMS, "if_not_exists": "create"}))
        _ok(b.post("/threads/t1/runs/wait", json=ITEMS))
        _ok(b.post("/threads/t1/runs/wait", json=ITEMS))
        assert list(data) == []  # it ended, showing nothing of the new thread


class _DeletedWhileRead(af.MemoryStore):
    """A store on which the next state read of a thread finds it deleted (by another
    worker) between reading its latest checkpoint and that checkpoint's states."""

    def __init__(self) -> None:
        super().__init__()
        self.victim: str | None = None

    def load_blob(self, digest: str) -> bytes:
        victim, self.victim = self.victim, None
        if victim is not None:
            af.delete_session(self, victim)
        return super().load_blob(digest)


def test_a_thread_deleted_while_it_is_read_is_not_found_and_left_out_of_a_search() -> None:
    """A thread deleted (on another worker) while a worker reads it: GET says the thread
    was deleted (404 ThreadNotFound, not a missing blob), and a search leaves it out
    rather than failing as a whole."""
    with (
        build() as wf,
        _DeletedWhileRead() as store,
        Server(ServiceApp(wf, store)) as worker,
        httpx.Client(base_url=worker.url, timeout=30) as client,
    ):
        for n, tid in enumerate(("t1", "t2", "t3")):
            _ok(client.post("/threads", json={"thread_id": tid, "metadata": {"team": "x"}}))
            order = {"input": {"id": n, "items": ["a"]}}  # a state of its own (blobs too)
            _ok(client.post(f"/threads/{tid}/runs/wait", json=order))
        store.victim = "t1"
        gone = client.get("/threads/t1")
        assert gone.status_code == 404 and gone.json()["error"] == "ThreadNotFound", gone.text
        assert "deleted" in gone.json()["message"]
        store.victim = "t2"  # the first thread the search reads (ids in order)
        found = _ok(client.post("/threads/search", json={"metadata": {"team": "x"}})).json()
        assert [t["thread_id"] for t in found] == ["t3"]


def test_a_thread_deleted_on_another_worker_can_be_made_again_here(
    workers: tuple[httpx.Client, httpx.Client],
) -> None:
    """A worker that made a thread (and remembers it) does not take it for existing
    once another worker deleted it: POST /threads makes it anew, whatever ``if_exists``."""
    a, b = workers
    for if_exists in ("raise", "do_nothing"):
        _ok(a.post("/threads", json={"thread_id": "t1", "metadata": {"n": 1}}))
        _ok(b.delete("/threads/t1"), 204)
        body = {"thread_id": "t1", "metadata": {"n": 2}, "if_exists": if_exists}
        again = _ok(a.post("/threads", json=body)).json()
        assert again["metadata"] == {"n": 2}, if_exists
        assert _ok(b.get("/threads/t1")).json()["metadata"] == {"n": 2}
        _ok(a.delete("/threads/t1"), 204)


def test_do_nothing_on_a_thread_deleted_while_it_is_read_makes_it_anew() -> None:
    """``if_exists: do_nothing`` finds the thread, which another worker deletes before
    it is read: the request, ordered after that delete, makes the thread (200), never
    404 for a create."""
    with (
        build() as wf,
        _DeletedWhileRead() as store,
        Server(ServiceApp(wf, store)) as worker,
        httpx.Client(base_url=worker.url, timeout=30) as client,
    ):
        _ok(client.post("/threads", json={"thread_id": "t1", "metadata": {"n": 1}}))
        _ok(client.post("/threads/t1/runs/wait", json={"input": {"id": 1, "items": ["a"]}}))
        store.victim = "t1"
        body = {"thread_id": "t1", "metadata": {"n": 2}, "if_exists": "do_nothing"}
        made = _ok(client.post("/threads", json=body)).json()
        assert made["metadata"] == {"n": 2} and made["values"]["intake"] == {"orders": []}
        assert store.victim is None  # the deletion happened, mid-read


def test_a_fork_goes_into_a_thread_id_deleted_on_another_worker(
    workers: tuple[httpx.Client, httpx.Client],
) -> None:
    """The id of a thread another worker deleted is free for a fork here too."""
    a, b = workers
    _ok(a.post("/threads", json={"thread_id": "t1", "metadata": {"user": "ann"}}))
    _ok(a.post("/threads/t1/runs/wait", json=ITEMS))
    _ok(a.post("/threads", json={"thread_id": "t2"}))
    _ok(b.delete("/threads/t2"), 204)
    fork = _ok(a.post("/threads/t1/fork", json={"thread_id": "t2"})).json()
    assert fork["metadata"] == {"user": "ann", "forked_from": "t1"}
    assert _ok(b.get("/threads/t2")).json()["values"]["intake"] == {"orders": [1]}
    taken = a.post("/threads/t1/fork", json={"thread_id": "t2"})
    assert taken.status_code == 409 and taken.json()["error"] == "SessionExists"


def test_a_fork_into_its_own_id_is_refused_even_as_it_is_deleted(
    workers: tuple[httpx.Client, httpx.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork of t1 into t1 is refused (409 SessionExists), also when t1 reads as gone by
    then (deleted on another worker between the look at the thread and the look at
    the new id): it was a 500, the runtime refusing a fork into the session forked."""
    a, _ = workers
    _ok(a.post("/threads/t1/runs/wait", json={**ITEMS, "if_not_exists": "create"}))

    async def gone(self: Threads, thread_id: str) -> None:
        return None  # the id reads as free: its thread was just deleted elsewhere

    monkeypatch.setattr(Threads, "_existing", gone)
    itself = a.post("/threads/t1/fork", json={"thread_id": "t1"})
    assert itself.status_code == 409 and itself.json()["error"] == "SessionExists", itself.text
    assert "new thread id" in itself.json()["message"]
