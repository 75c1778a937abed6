"""The service over HTTP, as httpx speaks it, against a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import httpx
import pytest

import actorflow as af
from actorflow.serve import Server
from tests.support.sse import Sse, read_sse

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


def _thread(client: httpx.Client, tid: str = "t1") -> None:
    response = client.post("/threads", json={"thread_id": tid, "metadata": {"team": "a"}})
    assert response.status_code == 200, response.text


def test_threads_are_created_listed_and_read(client: httpx.Client) -> None:
    """A created thread is listed (with its metadata) and read back idle."""
    _thread(client, "t1")
    client.post("/threads/t1/runs/wait", json={"input": {"id": 1, "items": ["a"]}})
    listed = client.post("/threads/search", json={"metadata": {"team": "a"}}).json()
    assert [t["thread_id"] for t in listed] == ["t1"]
    thread = client.get("/threads/t1").json()
    assert thread["status"] == "idle"
    assert thread["values"] == {"intake": {"orders": [1]}, "ship": {"shipped": 1}, "ticker": {}}


def test_run_and_wait_returns_the_outputs(client: httpx.Client) -> None:
    """runs/wait runs the JSON input (an object of a registered dataclass's fields)."""
    _thread(client)
    result = client.post("/threads/t1/runs/wait", json={"input": {"id": 7, "items": ["a", "b"]}})
    assert result.status_code == 200
    assert result.json() == {"outputs": ["a", "b"]}
    assert result.headers["content-location"].startswith("/threads/t1/runs/")


def test_a_background_run_is_read_later(client: httpx.Client) -> None:
    """POST /runs returns at once; the run's status and result are read afterwards."""
    _thread(client)
    run = client.post("/threads/t1/runs", json={"input": 0}).json()
    assert run["status"] in ("running", "success")
    joined = client.get(f"/threads/t1/runs/{run['run_id']}/join").json()
    assert joined["outputs"] == list(range(21))
    assert client.get(f"/threads/t1/runs/{run['run_id']}").json()["status"] == "success"
    assert [r["run_id"] for r in client.get("/threads/t1/runs").json()] == [run["run_id"]]


def test_stream_modes(client: httpx.Client) -> None:
    """A run streams metadata, then values, updates and events, each history event's
    seq as its SSE id."""
    _thread(client)
    body = {"input": {"id": 1, "items": ["a", "b"]}, "stream_mode": ["values", "updates", "events"]}
    with client.stream("POST", "/threads/t1/runs/stream", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = list(read_sse(response))
    assert events[0].event == "metadata" and events[0].id is None
    assert [e.data for e in events if e.event == "values"] == [
        {"outputs": ["a"]},
        {"outputs": ["a", "b"]},
    ]
    assert [e.data for e in events if e.event == "updates"] == [{"ship": "a"}, {"ship": "b"}]
    kinds = [e.data["event"] for e in events if e.event == "events"]
    assert kinds == ["run_started", "output", "output", "run_completed"]
    ids = [e.data["seq"] for e in events if e.event == "events"]
    assert [e.id for e in events if e.event == "events"] == ids == list(range(ids[0], ids[0] + 4))


def _events(response: httpx.Response, until: int | None = None) -> Iterator[Sse]:
    for event in read_sse(response):
        yield event
        if until is not None and event.id == until:
            return


def test_stream_resumes_after_the_last_event_id(
    client: httpx.Client, gate: threading.Event
) -> None:
    """A client that drops mid-run and reconnects with Last-Event-ID gets every later
    event exactly once: the stored ones, then the live ones."""
    _thread(client)
    run = client.post("/threads/t1/runs", json={"input": 0, "stream_mode": "events"}).json()
    path = f"/threads/t1/runs/{run['run_id']}/stream"
    seen: list[int] = []
    with client.stream("GET", path) as response:
        stream = read_sse(response)
        head = next(stream)  # joined from the start: which run, as the run's own stream
        assert (head.event, head.data["run_id"], head.id) == ("metadata", run["run_id"], None)
        for event in stream:
            assert isinstance(event.id, int)  # one mode: one SSE event per history event
            seen.append(event.id)
            if event.data["event"] == "output" and event.data["data"]["value"] == 2:
                break  # drop the connection mid-run
    with client.stream("GET", path, headers={"Last-Event-ID": str(seen[-1])}) as response:
        stream = read_sse(response)
        first = next(stream)
        gate.set()  # the run goes on only now: the rest arrives live
        rest = [first, *stream]
    seen += [e.id for e in rest if isinstance(e.id, int)]
    assert seen == list(range(seen[0], seen[0] + 23))  # start, 21 outputs, end
    assert rest[-1].data["event"] == "run_completed"
    outputs = [e.data["data"]["value"] for e in rest if e.data["event"] == "output"]
    assert outputs == list(range(3, 21))


def test_thread_stream_replays_the_history_after_last_event_id(client: httpx.Client) -> None:
    """GET /threads/{id}/stream sends the stored history after Last-Event-ID, then live."""
    _thread(client)
    client.post("/threads/t1/runs/wait", json={"input": {"id": 1, "items": ["a"]}})
    client.post("/threads/t1/runs/wait", json={"input": {"id": 2, "items": ["b"]}})
    with client.stream("GET", "/threads/t1/stream", headers={"Last-Event-ID": "2"}) as response:
        events = list(_events(response, until=5))
    assert [e.id for e in events] == [3, 4, 5]
    assert [e.data["event"] for e in events] == ["run_started", "output", "run_completed"]
    history = client.get("/threads/t1/events", params={"since": 4}).json()
    assert [e["seq"] for e in history] == [4, 5]


def test_a_request_is_answered_with_a_plain_object(client: httpx.Client) -> None:
    """A pending request is an interrupt; command.resume answers it with the fields of
    its response type, and a second answer is refused (409)."""
    _thread(client)
    waiting = client.post("/threads/t1/runs/wait", json={"input": {"id": 3}}).json()
    [interrupt] = waiting["__interrupt__"]
    assert interrupt["response_type"] == "tests.serve.Decision"
    assert interrupt["value"] == {"$type": "tests.serve.Order", "id": 3, "items": []}
    assert client.get("/threads/t1").json()["status"] == "interrupted"
    answer = {"command": {"resume": {"approved": True, "note": "fine"}}}
    assert client.post("/threads/t1/runs/wait", json=answer).json() == {
        "outputs": ["approved 3: fine"]
    }
    again = client.post("/threads/t1/runs/wait", json=answer)
    assert again.status_code == 409
    assert again.json()["error"] == "RequestError"
    assert "answered already" in again.json()["message"]


def test_a_wrong_answer_names_the_field(client: httpx.Client) -> None:
    """An answer that does not fit the response type is 422 naming the field."""
    _thread(client)
    [interrupt] = client.post("/threads/t1/runs/wait", json={"input": {"id": 3}}).json()[
        "__interrupt__"
    ]
    bad = client.post(
        "/threads/t1/runs/wait", json={"command": {"resume": {interrupt["id"]: {"approved": "x"}}}}
    )
    assert bad.status_code == 422
    assert "approved" in bad.json()["message"]


def test_cancel_stops_a_run(client: httpx.Client, gate: threading.Event) -> None:
    """Cancelling a run stops it at a barrier; it ends interrupted and the thread is free."""
    _thread(client)
    run = client.post("/threads/t1/runs", json={"input": 0}).json()
    cancelled = client.post(f"/threads/t1/runs/{run['run_id']}/cancel", params={"wait": "false"})
    assert cancelled.status_code in (200, 202)
    gate.set()
    joined = client.get(f"/threads/t1/runs/{run['run_id']}/join").json()
    assert len(joined["outputs"]) < 21
    assert client.get(f"/threads/t1/runs/{run['run_id']}").json()["status"] == "interrupted"


def test_a_busy_thread_refuses_a_second_run(client: httpx.Client, gate: threading.Event) -> None:
    """A second run on a busy thread is 409, naming the run that holds it."""
    _thread(client)
    run = client.post("/threads/t1/runs", json={"input": 0}).json()
    second = client.post("/threads/t1/runs", json={"input": 0})
    assert second.status_code == 409
    assert second.json()["error"] == "SessionBusy"
    assert run["run_id"] in second.json()["message"]
    gate.set()
    client.get(f"/threads/t1/runs/{run['run_id']}/join")


def test_delete_removes_a_thread_and_everything_stored_of_it(
    client: httpx.Client, store: af.SQLiteStore
) -> None:
    """DELETE /threads/{id} is 204; the thread is then unknown, unlisted and absent from
    the store, and its id starts a new thread; a second delete is 404."""
    _thread(client)
    client.post("/threads/t1/runs/wait", json={"input": {"id": 1, "items": ["a"]}})
    assert client.get("/threads/t1/events").json()  # its session is open in the service
    deleted = client.delete("/threads/t1")
    assert deleted.status_code == 204, deleted.text
    assert client.get("/threads/t1").json()["error"] == "ThreadNotFound"
    assert client.post("/threads/search", json={}).json() == []
    assert store.list(session="t1") == [] and store.session_history("t1") == []
    assert client.delete("/threads/t1").status_code == 404
    _thread(client)
    client.post("/threads/t1/runs/wait", json={"input": {"id": 2, "items": ["b"]}})
    assert client.get("/threads/t1/state").json()["values"]["intake"] == {"orders": [2]}


def test_delete_refuses_a_busy_thread_and_one_another_owner_holds(
    client: httpx.Client, gate: threading.Event, workflow: af.Workflow, store: af.SQLiteStore
) -> None:
    """A thread running a run, or whose session another owner holds, is 409 and loses
    nothing; once the run ends, the delete goes through."""
    _thread(client)
    run = client.post("/threads/t1/runs", json={"input": 0}).json()
    busy = client.delete("/threads/t1")
    assert busy.status_code == 409 and busy.json()["error"] == "SessionBusy"
    assert run["run_id"] in busy.json()["message"]
    gate.set()
    assert client.get(f"/threads/t1/runs/{run['run_id']}/join").json()["outputs"] == list(range(21))
    with workflow.session("elsewhere", store=store) as owner:
        owner.run(0)
        owned = client.delete("/threads/elsewhere")
        assert owned.status_code == 409 and owned.json()["error"] == "SessionOwned"
        assert store.list(session="elsewhere")
    assert client.delete("/threads/t1").status_code == 204
    assert client.delete("/threads/elsewhere").status_code == 204
    assert store.sessions() == []


def test_a_finished_run_is_deleted_a_running_one_is_not(
    client: httpx.Client, gate: threading.Event
) -> None:
    """DELETE of a run going on is 409 naming how to cancel it; once it ended, 204, and
    the run is gone from the thread's runs (a second delete is 404)."""
    _thread(client)
    run = client.post("/threads/t1/runs", json={"input": 0}).json()
    path = f"/threads/t1/runs/{run['run_id']}"
    busy = client.delete(path)
    assert busy.status_code == 409 and f"{path}/cancel" in busy.json()["message"]
    gate.set()
    client.get(f"{path}/join")
    assert client.delete(path).status_code == 204
    assert client.get("/threads/t1/runs").json() == []
    assert client.delete(path).json()["error"] == "RunNotFound"


def test_fork_and_state_at_a_checkpoint(client: httpx.Client) -> None:
    """Each checkpoint's state is readable; a fork continues one in a new thread and
    leaves the original alone."""
    _thread(client)
    client.post("/threads/t1/runs/wait", json={"input": {"id": 1, "items": ["a"]}})
    first = client.get("/threads/t1/state").json()["checkpoint"]["checkpoint_id"]
    client.post("/threads/t1/runs/wait", json={"input": {"id": 2, "items": ["b"]}})
    older = client.get(f"/threads/t1/state/{first}").json()
    assert older["values"]["intake"] == {"orders": [1]}
    history = client.post("/threads/t1/history", json={"limit": 100}).json()
    assert history[0]["values"]["intake"] == {"orders": [1, 2]}
    assert first in [h["checkpoint"]["checkpoint_id"] for h in history]
    forked = client.post("/threads/t1/fork", json={"checkpoint_id": first, "thread_id": "t2"})
    assert forked.status_code == 200, forked.text
    client.post("/threads/t2/runs/wait", json={"input": {"id": 9, "items": ["z"]}})
    assert client.get("/threads/t2/state").json()["values"]["intake"] == {"orders": [1, 9]}
    assert client.get("/threads/t1/state").json()["values"]["intake"] == {"orders": [1, 2]}


def test_a_fork_from_the_middle_of_a_run_is_idle_not_failed(client: httpx.Client) -> None:
    """A fork at a checkpoint of a run that went on (messages in flight, nothing
    failed) is ``idle``, with the executors to run next; run on, it does the rest of
    that run's work. A thread whose run's process died there is ``error``: only the
    fork is the service's own cut."""
    _thread(client)
    assert client.post("/threads/t1/runs/wait", json={"input": 17}).status_code == 200
    history = client.post("/threads/t1/history", json={"limit": 100}).json()
    middle = next(h for h in history if h["next"] == ["ticker"])
    body = {"checkpoint_id": middle["checkpoint"]["checkpoint_id"], "thread_id": "t2"}
    forked = client.post("/threads/t1/fork", json=body)
    assert forked.status_code == 200, forked.text
    assert forked.json()["status"] == "idle"
    assert client.get("/threads/t2").json()["status"] == "idle"
    assert client.get("/threads/t2/state").json()["next"] == ["ticker"]
    idle = client.post("/threads/search", json={"status": "idle"}).json()
    assert "t2" in [t["thread_id"] for t in idle]
    for label in ("red", "blue"):  # its own cut hides nothing: it takes new metadata
        patched = client.patch("/threads/t2", json={"metadata": {"label": label}})
        assert patched.status_code == 200, patched.text
        assert patched.json()["metadata"]["label"] == label
        assert patched.json()["status"] == "idle"
    assert client.get("/threads/t2/state").json()["next"] == ["ticker"]
    done = client.post("/threads/t2/runs/wait", json={}).json()
    assert done["outputs"] and done["outputs"][-1] == 20
    assert client.get("/threads/t2").json()["status"] == "idle"


@pytest.mark.parametrize(
    "case",
    [
        ("GET", "/threads/nope", None, 404, "ThreadNotFound", "POST /threads"),
        ("PATCH", "/threads/t1", {"metadata": [1]}, 422, "InvalidRequest", "JSON object"),
        ("PATCH", "/threads/nope", {"metadata": {}}, 404, "ThreadNotFound", "POST /threads"),
        ("POST", "/threads/t1/runs/wait", {"input": "text"}, 422, "InvalidRequest", "Order"),
        ("POST", "/threads/t1/runs/wait", {"input": {"id": "x"}}, 422, "InvalidRequest", "id"),
        ("GET", "/threads/t1/runs/r0", None, 404, "RunNotFound", "r0"),
        ("POST", "/threads/t1/runs/wait", {"stream_mode": "x"}, 422, "InvalidRequest", "values"),
        ("GET", "/nowhere", None, 404, "HTTPError", "docs/service.md"),
        ("POST", "/threads/t1/runs/wait", {"assistant_id": "x"}, 422, "InvalidRequest", "orders"),
    ],
)
def test_errors_are_json_that_say_what_to_do(
    client: httpx.Client, case: tuple[str, str, object, int, str, str]
) -> None:
    """Every error is a JSON body naming the error and what to do about it."""
    method, path, body, status, kind, words = case
    _thread(client)
    response = client.request(method, path, json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"] == kind
    assert words in response.json()["message"]


def test_an_unexpected_error_is_json_logged_and_keeps_the_connection(
    client: httpx.Client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler that fails with an error the service does not expect (a defect) answers
    500 with a JSON body naming it and saying what to do, logs it with its traceback
    on the ``actorflow.serve`` logger, and leaves the connection usable: the client's
    next request on it is answered (a plain 500 closed it, failing that request too)."""
    from actorflow.serve import _threads

    _thread(client)

    async def broken(self: object, *args: object, **kwargs: object) -> None:
        raise RuntimeError("a defect")

    monkeypatch.setattr(_threads.Threads, "fork", broken)
    with caplog.at_level("ERROR", logger="actorflow.serve"):
        failed = client.post("/threads/t1/fork", json={})
    assert failed.status_code == 500, failed.text
    assert failed.json()["error"] == "InternalError"
    assert "RuntimeError: a defect" in failed.json()["message"]
    assert "server's log" in failed.json()["message"]
    [record] = [r for r in caplog.records if r.name == "actorflow.serve"]
    assert record.exc_info is not None and "a defect" in str(record.exc_info[1])
    assert client.get("/threads/t1").status_code == 200  # the same connection


def test_a_method_a_path_does_not_answer_is_405_naming_those_it_does(
    client: httpx.Client,
) -> None:
    """A method no route at the path answers is 405, with every method the routes at that
    path answer (several routes share /threads/{id}) in the message and ``Allow``."""
    _thread(client)
    refused = client.put("/threads/t1", json={})
    assert refused.status_code == 405
    assert refused.headers["allow"] == "DELETE, GET, HEAD, PATCH"
    assert (
        "PUT is not allowed on /threads/t1; it answers DELETE, GET, HEAD, PATCH"
        in (refused.json()["message"])
    )


def test_a_body_that_is_not_json_is_422(client: httpx.Client) -> None:
    """A malformed body is refused with the reason."""
    _thread(client)
    response = client.post("/threads/t1/runs/wait", content=b"{nope")
    assert response.status_code == 422
    assert "not JSON" in response.json()["message"]


def test_a_stream_of_several_modes_resumes_inside_a_group(client: httpx.Client) -> None:
    """One history event is one SSE event per mode, a group: a client that drops after
    any of them and reconnects with its id gets the rest, each exactly once."""
    _thread(client)
    modes = ["values", "updates", "events"]
    run = client.post("/threads/t1/runs/wait", json={"input": {"id": 1, "items": ["a", "b"]}})
    path = run.headers["content-location"] + "/stream"
    with client.stream("GET", path, params={"stream_mode": modes}) as response:
        whole = [e for e in read_sse(response) if e.event != "metadata"]
    assert len(whole) == 2 + 3 * 2 and len({e.id for e in whole}) == len(whole)
    for cut in range(len(whole)):
        last = str(whole[cut].id)
        with client.stream(
            "GET", path, params={"stream_mode": modes}, headers={"Last-Event-ID": last}
        ) as response:
            rest = list(read_sse(response))
        assert rest == whole[cut + 1 :], f"after {last}"


@pytest.mark.parametrize(
    "bad",
    [5, ["t"], "", "a/b", "nul\x00here", "line\nbreak", "lone \udc80", "x" * 300],
    ids=["int", "list", "empty", "slash", "nul", "newline", "surrogate", "long"],
)
def test_a_thread_id_no_client_could_address_is_refused(client: httpx.Client, bad: object) -> None:
    """Every way a thread id gets in (create, a run's if_not_exists, a fork) refuses
    one that is not a string a path can carry, and nothing is left behind."""
    body = json.dumps({"thread_id": bad}).encode()  # (a lone surrogate as JSON escapes it)
    created = client.post("/threads", content=body)
    assert created.status_code == 422, created.text
    assert "thread_id" in created.json()["message"]
    _thread(client)
    client.post("/threads/t1/runs/wait", json={"input": {"id": 1, "items": ["a"]}})
    forked = client.post("/threads/t1/fork", content=body)
    assert forked.status_code == 422 and "thread_id" in forked.json()["message"]
    listed = client.post("/threads/search", json={})
    assert listed.status_code == 200 and [t["thread_id"] for t in listed.json()] == ["t1"]


def test_a_thread_id_in_any_script_is_served(client: httpx.Client) -> None:
    """A thread id beyond Latin-1 runs, is read back and listed, and the run's
    Content-Location (a header, Latin-1) carries it percent-encoded."""
    tid = "заказ-7 ✓"
    assert client.post("/threads", json={"thread_id": tid}).status_code == 200
    done = client.post(f"/threads/{tid}/runs/wait", json={"input": {"id": 7, "items": ["a"]}})
    assert done.status_code == 200 and done.json() == {"outputs": ["a"]}, done.text
    location = done.headers["content-location"]
    assert location.startswith("/threads/%D0%B7") and location.isascii()
    assert client.get(location).json()["status"] == "success"
    assert client.get(f"/threads/{tid}").json()["thread_id"] == tid
    assert [t["thread_id"] for t in client.post("/threads/search", json={}).json()] == [tid]


@pytest.mark.parametrize(
    "case",
    [
        ("POST", "/threads/search", {"limit": "x"}, "limit"),
        ("POST", "/threads/search", {"offset": -1}, "offset"),
        ("POST", "/threads/search", {"metadata": [1]}, "metadata"),
        ("POST", "/threads/search", {"ids": "t1"}, "ids"),
        ("POST", "/threads/search", {"status": "sleeping"}, "status"),
        ("POST", "/threads/search", {"sort_by": "colour"}, "sort_by"),
        ("POST", "/threads/search", {"sort_order": "up"}, "sort_order"),
        ("POST", "/threads", {"if_exists": "maybe"}, "if_exists"),
        ("POST", "/threads/t1/history", {"limit": True}, "limit"),
        ("POST", "/threads/t1/history", {"before": 5}, "before"),
        ("GET", "/threads/t1/events?since=-1", None, "since"),
        ("GET", "/threads/t1/runs?limit=x", None, "limit"),
        ("POST", "/threads/t1/runs/wait", {"stream_mode": 5}, "stream_mode"),
        ("POST", "/threads/t1/runs/wait", {"stream_mode": [["values"]]}, "stream_mode"),
        ("POST", "/threads/t1/runs/wait", {"checkpoint_id": 5}, "checkpoint_id"),
        ("POST", "/threads/t9/runs/wait", {"if_not_exists": "maybe"}, "if_not_exists"),
        ("POST", "/threads/t1/fork", {"checkpoint_id": ["x"]}, "checkpoint_id"),
        ("POST", "/assistants/search", {"limit": -2}, "limit"),
    ],
)
def test_a_field_of_the_wrong_type_is_422_naming_it(
    client: httpx.Client, case: tuple[str, str, object, str]
) -> None:
    """Never a bare 500, never silently taken as something else."""
    method, path, body, field_name = case
    _thread(client)
    response = client.request(method, path, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "InvalidRequest"
    assert field_name in response.json()["message"]


def test_a_last_event_id_this_service_never_sent_is_422(client: httpx.Client) -> None:
    _thread(client)
    client.post("/threads/t1/runs/wait", json={"input": {"id": 1, "items": ["a"]}})
    refused = client.get("/threads/t1/stream", headers={"Last-Event-ID": "abc"})
    assert refused.status_code == 422 and "Last-Event-ID" in refused.json()["message"]


def test_an_answer_keyed_by_a_request_that_is_not_pending_says_which_is(
    client: httpx.Client,
) -> None:
    _thread(client)
    [interrupt] = client.post("/threads/t1/runs/wait", json={"input": {"id": 3}}).json()[
        "__interrupt__"
    ]
    wrong = {"command": {"resume": {"intake:0:9": {"approved": True}}}}
    refused = client.post("/threads/t1/runs/wait", json=wrong)
    assert refused.status_code == 422
    message = refused.json()["message"]
    assert "'intake:0:9' is no pending request" in message and interrupt["id"] in message


def test_a_cancelled_run_leaves_its_thread_idle_and_says_it_was_cancelled(
    client: httpx.Client, gate: threading.Event
) -> None:
    _thread(client)
    run = client.post("/threads/t1/runs", json={"input": 0}).json()
    client.post(f"/threads/t1/runs/{run['run_id']}/cancel", params={"wait": "false"})
    gate.set()
    joined = client.get(f"/threads/t1/runs/{run['run_id']}/join").json()
    assert "cancelled" in joined["__cancelled__"]["message"]
    assert client.get("/threads/t1").json()["status"] == "idle"
    patched = client.patch("/threads/t1", json={"metadata": {"label": "red"}})
    assert patched.status_code == 200, patched.text  # it stopped as asked: nothing to hide
    assert patched.json()["status"] == "idle" and patched.json()["metadata"]["label"] == "red"
    again = client.post("/threads/t1/runs/wait", json={})  # goes on from where it stopped
    assert again.json()["outputs"] == list(range(len(joined["outputs"]), 21))
