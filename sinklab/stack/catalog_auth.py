"""The secure stack's catalog door: an OAuth2 token endpoint and a bearer-token gate in front of Apache's
REST catalog server, which checks no one (``RESTCatalogAdapter`` answers every request, and issues a
token to any client that asks).

- ``POST /v1/oauth/tokens`` (the REST spec's endpoint, where Iceberg's Java client, pyiceberg and Spark ask
  by default): ``client_credentials`` with the stack's client id and secret, or a ``token-exchange`` of a
  token still valid (how Iceberg's Java client renews one before it expires) or with the client's
  credentials in a Basic header (how it renews one that expired first), answers a bearer token that expires
  in ``lifetime_s``; anything else 401 (OAuth2's ``invalid_client``).
- Any other request: with ``Authorization: Bearer <a token issued and not expired>`` it goes to the catalog
  server (on a loopback port of its own); with a token that expired, 419 (the REST spec's "credentials have
  timed out", which pyiceberg answers by getting a new token and asking again); without one, or with one
  never issued, 401 (``NotAuthorizedException``), both in the REST spec's error model.

It runs in the catalog server's process (``catalog_server.py``), a thread per request: a cycle asks the
catalog a few questions, and the answers pass through unread."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote

TOKENS_PATH = "/v1/oauth/tokens"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization",
               "proxy-authenticate", "host", "content-length"}


class Tokens:
    """Bearer tokens signed with a key made from the client's secret (its expiry, a nonce, an HMAC): valid
    until they expire, told apart from tokens never issued after that, and still valid after the catalog
    server restarts (as a JWT is), so that a client holding one keeps working."""

    def __init__(self, client_id: str, client_secret: str, lifetime_s: float):
        self.client_id, self._secret, self.lifetime_s = client_id, client_secret, lifetime_s
        self._key = hashlib.sha256(f"sinklab-catalog-tokens:{client_secret}".encode()).digest()

    def issue(self) -> str:
        body = f"{int((time.time() + self.lifetime_s) * 1000)}.{secrets.token_urlsafe(16)}"  # expiry in epoch ms
        return f"{body}.{self._sign(body)}"

    def _expiry(self, token: str) -> float | None:
        """When ``token`` expires (epoch seconds), if it was issued with this key."""
        body, _, signature = token.rpartition(".")
        if not body or not hmac.compare_digest(signature, self._sign(body)):
            return None
        try:
            return int(body.split(".", 1)[0]) / 1000
        except ValueError:
            return None

    def _sign(self, body: str) -> str:
        return hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()

    def valid(self, token: str) -> bool:
        expires = self._expiry(token)
        return expires is not None and expires > time.time()

    def expired(self, token: str) -> bool:
        """Issued with this key, and no longer valid."""
        expires = self._expiry(token)
        return expires is not None and expires <= time.time()

    def client(self, client_id: str, client_secret: str) -> bool:
        return hmac.compare_digest(client_id, self.client_id) and hmac.compare_digest(client_secret, self._secret)


def serve(port: int, upstream_port: int, tokens: Tokens, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """The door on ``host:port``, in front of the catalog server on ``upstream_port``; serving in a thread."""

    class Door(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: object) -> None:  # the catalog's log is the server's
            return

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self._handle()

        def do_GET(self) -> None:  # noqa: N802
            self._handle()

        def do_DELETE(self) -> None:  # noqa: N802
            self._handle()

        def do_HEAD(self) -> None:  # noqa: N802
            self._handle()

        def do_PUT(self) -> None:  # noqa: N802
            self._handle()

        def _handle(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.split("?")[0].endswith(TOKENS_PATH) and self.command == "POST":
                self._token(body)
                return
            auth = self.headers.get("Authorization", "")
            token = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            if token and tokens.expired(token):
                self._json(419, {"error": {"message": "Credentials have timed out: the bearer token expired",
                                           "type": "AuthenticationTimeoutException", "code": 419}})
                return
            if not token or not tokens.valid(token):
                why = "no bearer token" if not token else "the bearer token was not issued here"
                self._json(401, {"error": {"message": f"Not authorized: {why}", "type": "NotAuthorizedException",
                                           "code": 401}}, {"WWW-Authenticate": 'Bearer realm="sinklab catalog"'})
                return
            self._forward(body)

        def _token(self, body: bytes) -> None:
            form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
            grant = form.get("grant_type", "")
            if grant == "client_credentials":  # the client's id and secret in the form, or in a Basic header
                ok = tokens.client(form.get("client_id", ""), form.get("client_secret", "")) or self._basic_client()
            elif grant == TOKEN_EXCHANGE:
                # A valid token for a new one; or, as Iceberg's Java client renews a token that expired before
                # its refresh ran, any token with the client's credentials in a Basic header.
                ok = tokens.valid(form.get("subject_token", "")) or self._basic_client()
            else:
                self._json(400, {"error": "unsupported_grant_type", "error_description": f"grant_type {grant!r}"})
                return
            if not ok:
                self._json(401, {"error": "invalid_client", "error_description": "the client's id or secret, or "
                                 "the token to exchange, is not valid"})
                return
            self._json(200, {"access_token": tokens.issue(), "token_type": "bearer",
                             "expires_in": int(tokens.lifetime_s), "issued_token_type": ACCESS_TOKEN_TYPE})

        def _basic_client(self) -> bool:
            scheme, _, encoded = self.headers.get("Authorization", "").partition(" ")
            try:
                client_id, _, secret = base64.b64decode(encoded, validate=True).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
            return scheme.lower() == "basic" and tokens.client(unquote(client_id), unquote(secret))

        def _forward(self, body: bytes) -> None:
            conn = http.client.HTTPConnection(host, upstream_port, timeout=120)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                reply = conn.getresponse()
                data = reply.read()
            finally:
                conn.close()
            self.send_response(reply.status)
            for key, value in reply.getheaders():
                if key.lower() not in _HOP_BY_HOP:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _json(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer((host, port), Door)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="sinklab-catalog-door", daemon=True).start()
    return server
