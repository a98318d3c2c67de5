"""The secure stack's catalog door (``sinklab.stack.catalog_auth``) in front of a stand-in catalog server:
tokens by client credentials and by exchange, a request with no token, a foreign or an expired one refused
(401, 419), a valid one passed through with the body and the headers as the server answered them. The
whole door in front of Apache's server, with Spark's and pyiceberg's clients, runs in test_secure_stack.py."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from sinklab.stack import catalog_auth
from sinklab.stack.process import free_port


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: object) -> None:
        return

    def do_GET(self) -> None:  # noqa: N802
        self._answer(b"")

    def do_POST(self) -> None:  # noqa: N802
        self._answer(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _answer(self, body: bytes) -> None:
        data = json.dumps({"path": self.path, "method": self.command, "body": body.decode(),
                           "authorization": self.headers.get("Authorization")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Upstream", "yes")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture()
def door() -> Iterator[tuple[str, catalog_auth.Tokens]]:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    tokens = catalog_auth.Tokens("sinklab", "s3cret-xyz", lifetime_s=1.5)
    port = free_port()
    server = catalog_auth.serve(port, upstream.server_address[1], tokens)
    try:
        yield f"http://127.0.0.1:{port}", tokens
    finally:
        server.shutdown()
        server.server_close()
        upstream.shutdown()
        upstream.server_close()


def token(url: str, **form: str) -> requests.Response:
    return requests.post(f"{url}/v1/oauth/tokens", data=form, timeout=5)


def test_client_credentials_get_a_token_that_opens_the_catalog(door: tuple[str, catalog_auth.Tokens]) -> None:
    url, _ = door
    answer = token(url, grant_type="client_credentials", client_id="sinklab", client_secret="s3cret-xyz",
                   scope="catalog")
    assert answer.status_code == 200
    issued = answer.json()
    assert issued["token_type"] == "bearer" and issued["expires_in"] == 1 and len(issued["access_token"]) > 30
    reply = requests.post(f"{url}/v1/namespaces?x=1", json={"namespace": ["a"]}, timeout=5,
                          headers={"Authorization": f"Bearer {issued['access_token']}"})
    assert reply.status_code == 200 and reply.headers["X-Upstream"] == "yes"
    seen = reply.json()
    assert (seen["method"], seen["path"]) == ("POST", "/v1/namespaces?x=1")
    assert json.loads(seen["body"]) == {"namespace": ["a"]}
    assert seen["authorization"] == f"Bearer {issued['access_token']}"


def test_no_token_a_foreign_one_or_a_wrong_secret_is_refused(door: tuple[str, catalog_auth.Tokens]) -> None:
    url, _ = door
    for headers in ({}, {"Authorization": "Bearer not-one-of-ours"}, {"Authorization": "Basic c2lua2xhYjp4"}):
        refused = requests.get(f"{url}/v1/config", headers=headers, timeout=5)
        assert refused.status_code == 401
        assert refused.json()["error"]["type"] == "NotAuthorizedException"
    basic = requests.post(f"{url}/v1/oauth/tokens", data={"grant_type": "client_credentials"}, timeout=5,
                          auth=("sinklab", "s3cret-xyz"))
    assert basic.status_code == 200 and basic.json()["access_token"]
    wrong = token(url, grant_type="client_credentials", client_id="sinklab", client_secret="guess")
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
    assert "s3cret-xyz" not in wrong.text
    assert token(url, grant_type="password", username="x").status_code == 400


def test_an_expired_token_is_told_apart_and_a_valid_one_exchanged(door: tuple[str, catalog_auth.Tokens]) -> None:
    url, _ = door
    first = token(url, grant_type="client_credentials", client_id="sinklab", client_secret="s3cret-xyz").json()
    exchanged = token(url, grant_type=catalog_auth.TOKEN_EXCHANGE, subject_token=first["access_token"],
                      subject_token_type=catalog_auth.ACCESS_TOKEN_TYPE)
    assert exchanged.status_code == 200 and exchanged.json()["access_token"] != first["access_token"]
    time.sleep(1.7)
    expired = requests.get(f"{url}/v1/config", headers={"Authorization": f"Bearer {first['access_token']}"},
                           timeout=5)
    assert expired.status_code == 419 and expired.json()["error"]["code"] == 419
    # An expired token is exchanged for nothing, unless the client's credentials come with it (Basic).
    assert token(url, grant_type=catalog_auth.TOKEN_EXCHANGE, subject_token=first["access_token"]).status_code == 401
    renewed = requests.post(f"{url}/v1/oauth/tokens", timeout=5, auth=("sinklab", "s3cret-xyz"), data={
        "grant_type": catalog_auth.TOKEN_EXCHANGE, "subject_token": first["access_token"]})
    assert renewed.status_code == 200 and renewed.json()["access_token"]
    assert requests.post(f"{url}/v1/oauth/tokens", timeout=5, auth=("sinklab", "guess"), data={
        "grant_type": catalog_auth.TOKEN_EXCHANGE, "subject_token": first["access_token"]}).status_code == 401


def test_a_token_outlives_the_server_that_issued_it() -> None:
    """Signed, not remembered: a catalog server started again (the same secret) takes the tokens its clients
    hold; another secret's server takes none."""
    issued = catalog_auth.Tokens("sinklab", "s3cret-xyz", lifetime_s=60).issue()
    assert catalog_auth.Tokens("sinklab", "s3cret-xyz", lifetime_s=60).valid(issued)
    other = catalog_auth.Tokens("sinklab", "another", lifetime_s=60)
    assert not other.valid(issued) and not other.expired(issued)
    forged = issued.rsplit(".", 1)[0].replace(issued.split(".", 1)[0], "9999999999000") + "." + "0" * 64
    assert not catalog_auth.Tokens("sinklab", "s3cret-xyz", lifetime_s=60).valid(forged)


def test_a_token_is_valid_to_its_last_millisecond() -> None:
    short = catalog_auth.Tokens("sinklab", "s3cret-xyz", lifetime_s=0.3)
    assert all(short.valid(short.issue()) for _ in range(20))
    issued = short.issue()
    time.sleep(0.35)
    assert short.expired(issued) and not short.valid(issued)
