"""The token rule: loopback by default, any other address only with a bearer token,
and with a token every endpoint requires it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client

import actorflow as af
from actorflow.cli import main
from actorflow.serve import Server, ServiceApp, check_bind

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "example.com"])
def test_another_address_without_a_token_is_refused(host: str) -> None:
    """Listening beyond loopback without a token raises UnsafeBind, naming the fix."""
    with pytest.raises(af.UnsafeBind, match="--token"):
        check_bind(host, None)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.5", "::1", "localhost"])
def test_loopback_needs_no_token(host: str) -> None:
    """Loopback addresses are served without a token."""
    check_bind(host, None)


def test_another_address_with_a_token_is_allowed() -> None:
    """A token makes any address acceptable (the check only; nothing listens)."""
    check_bind("0.0.0.0", "secret")


def test_the_server_refuses_before_binding(workflow: af.Workflow, store: af.SQLiteStore) -> None:
    """Server() checks the rule before it opens a socket."""
    with pytest.raises(af.UnsafeBind):
        Server(ServiceApp(workflow, store), host="0.0.0.0")


def test_the_command_refuses_too(capsys: pytest.CaptureFixture[str]) -> None:
    """``actorflow serve --host 0.0.0.0`` without a token exits 2 with one line."""
    assert main(["serve", "tests.serve.conftest:build", "--store", "x", "--host", "0.0.0.0"]) == 2
    assert "without a token" in capsys.readouterr().err


@pytest.mark.parametrize(
    "path", ["/ok", "/threads/search", "/assistants/orders", "/threads/t/stream"]
)
def test_every_endpoint_needs_the_token(guarded: Server, path: str) -> None:
    """Without the token (or with a wrong one) every endpoint answers 401 in JSON."""
    with httpx.Client(base_url=guarded.url, timeout=10) as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
            response = client.get(path, headers=headers)
            assert response.status_code == 401
            assert response.json()["error"] == "Unauthorized"
            assert "Bearer" in response.headers["www-authenticate"]


def test_the_token_opens_every_endpoint(guarded: Server) -> None:
    """With the token, as a header or as the SDK's api_key, requests are served."""
    with httpx.Client(
        base_url=guarded.url, timeout=10, headers={"Authorization": "Bearer secret"}
    ) as client:
        assert client.get("/ok").json() == {"ok": True}
    sdk = get_sync_client(url=guarded.url, api_key="secret")
    try:
        thread = sdk.threads.create()
        start: Any = 0
        assert sdk.runs.wait(thread["thread_id"], "orders", input=start) == {
            "outputs": list(range(21))
        }
    finally:
        sdk.close()


def test_without_a_token_other_host_names_are_refused(server: Server) -> None:
    """A request that names another host (DNS rebinding) is refused without a token."""
    with httpx.Client(base_url=server.url, timeout=10) as client:
        assert client.get("/ok").status_code == 200
        refused = client.get("/ok", headers={"Host": "attacker.example:80"})
    assert refused.status_code == 421
    assert "token" in refused.json()["message"]
