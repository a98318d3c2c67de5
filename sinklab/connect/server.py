"""Kafka Connect's REST API over HTTP: its paths, JSON shapes, status codes and error body.

The standard library's ``ThreadingHTTPServer``: the API is a handful of small JSON requests, and
the work (commit cycles) happens in the herder's threads, never in a request.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import re
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import ValidationError

from sinklab.connect import loggers
from sinklab.connect.herder import PLUGIN_CLASSES, Herder, is_plugin, normalize, shown_config, validate
from sinklab.connect.sessions import SinkSessions
from sinklab.exceptions import BadRequest, ConfigError, Conflict, ConnectError, NotFound
from sinklab.sink import SESSIONS_PATH, error_json
from sinklab.sink.config import keys
from sinklab.stack.jars import ICEBERG_VERSION, KAFKA_VERSION

log = logging.getLogger("sinklab.connect.http")

SINKLAB_VERSION = "0.1.0"
Response = tuple[int, Any]
Route = tuple[str, re.Pattern[str], Callable[..., Response]]


def config_error_message(exc: ConfigError) -> str:
    # Connect's wording, with the key sinklab's ConfigError names first.
    problem = f"{exc.key}: {exc.problem}" if exc.key else exc.problem
    return (f"Connector configuration is invalid and contains the following 1 error(s):\n{problem}\n"
            "You can also find the above list of errors at the endpoint `/connector-plugins/{connectorType}/config/"
            "validate`")


# A given key no declaration knows: the sink notes it and goes on.
UNKNOWN_KEY_DOC = "Not a key of this connector: accepted, not used."


def validate_response(plugin: str, config: dict[str, Any]) -> dict[str, Any]:
    """``PUT /connector-plugins/{class}/config/validate``: Connect's ConfigInfos. As Kafka Connect lists all
    of a connector's ConfigDef keys, every key ``sinklab.sink.keys`` declares is listed, then each other key
    given (a family's, or unknown); the error, if any, is on the key the exception names."""
    name = str(config.get(keys.NAME) or "validate")
    error: ConfigError | BadRequest | None = None
    try:
        validate(name, normalize(name, config))
    except (ConfigError, BadRequest) as exc:
        if exc.key is None:
            raise  # about no key: the request's error
        error = exc
    names = dict.fromkeys([*(k.name for k in keys.KEYS if not k.family), *config, *([error.key] if error else [])])
    configs = [_config_info(key, config.get(key), [str(error)] if error and error.key == key else [])
               for key in names]
    groups = dict.fromkeys(c["definition"]["group"] for c in configs if c["definition"]["group"])
    return {"name": plugin, "error_count": 1 if error else 0, "groups": list(groups), "configs": configs}


# Connect's order of a key in its group (1, 2, ...): the order of the declarations.
_ORDER = {k.name: [d.name for d in keys.KEYS if d.group == k.group].index(k.name) + 1 for k in keys.KEYS}


def _config_info(key: str, given: Any, errors: list[str]) -> dict[str, Any]:
    """One key's ConfigInfo: its definition (the declaration's, or its family's; for an older spelling of
    Tabular's sink, its current key's) and its value."""
    current = keys.current_spelling(key)
    decl = keys.lookup(current or key)
    if given is not None:
        value: str | None = "[hidden]" if decl is not None and decl.type == "PASSWORD" else str(given)
    else:
        value = decl.default_text if decl is not None else None
    definition = {"name": key, "type": "STRING", "required": False, "default_value": None, "importance": "LOW",
                  "documentation": UNKNOWN_KEY_DOC, "group": None, "width": "NONE", "display_name": key,
                  "dependents": [], "order": -1}
    if decl is not None:
        definition.update(type=decl.type, required=decl.required, default_value=decl.default_text,
                          importance=decl.importance, documentation=decl.plain_doc, group=decl.group,
                          order=_ORDER[decl.name])
        if current is not None:
            definition["documentation"] = (f"The older spelling (Tabular's sink) of {current}, read as it. "
                                           f"{decl.plain_doc}")
    return {"definition": definition,
            "value": {"name": key, "value": value, "recommended_values": list(decl.choices) if decl else [],
                      "errors": errors, "visible": True}}


class ConnectApi:
    """The routes: pure functions of the herder, so that they can be called without a socket too."""

    def __init__(self, herder: Herder, cluster_id: Callable[[], str | None] = lambda: None,
                 sessions: SinkSessions | None = None):
        self.herder = herder
        self._cluster_id = cluster_id
        self.sessions = sessions
        name = r"(?P<name>[^/]+)"
        sink = rf"{SESSIONS_PATH}/{name}"
        self.routes: list[Route] = [
            ("GET", re.compile(r"/"), self.root),
            ("GET", re.compile(r"/health/?"), self.health),
            ("GET", re.compile(r"/connector-plugins/?"), self.plugins),
            ("PUT", re.compile(r"/connector-plugins/(?P<plugin>[^/]+)/config/validate/?"), self.validate_config),
            ("GET", re.compile(r"/connectors/?"), self.list),
            ("POST", re.compile(r"/connectors/?"), self.create),
            ("GET", re.compile(rf"/connectors/{name}/?"), self.info),
            ("DELETE", re.compile(rf"/connectors/{name}/?"), self.delete),
            ("GET", re.compile(rf"/connectors/{name}/config/?"), self.get_config),
            ("PUT", re.compile(rf"/connectors/{name}/config/?"), self.put_config),
            ("PATCH", re.compile(rf"/connectors/{name}/config/?"), self.patch_config),
            ("GET", re.compile(rf"/connectors/{name}/status/?"), self.status),
            ("GET", re.compile(rf"/connectors/{name}/tasks/?"), self.tasks),
            ("GET", re.compile(rf"/connectors/{name}/tasks/(?P<task>\d+)/status/?"), self.task_status),
            ("POST", re.compile(rf"/connectors/{name}/tasks/(?P<task>\d+)/restart/?"), self.task_restart),
            ("PUT", re.compile(rf"/connectors/{name}/pause/?"), self.pause),
            ("PUT", re.compile(rf"/connectors/{name}/resume/?"), self.resume),
            ("PUT", re.compile(rf"/connectors/{name}/stop/?"), self.stop),
            ("POST", re.compile(rf"/connectors/{name}/restart/?"), self.restart),
            ("GET", re.compile(rf"/connectors/{name}/topics/?"), self.topics),
            ("PUT", re.compile(rf"/connectors/{name}/topics/reset/?"), self.topics_reset),
            ("GET", re.compile(rf"/connectors/{name}/offsets/?"), self.offsets),
            ("PATCH", re.compile(rf"/connectors/{name}/offsets/?"), self.alter_offsets),
            ("DELETE", re.compile(rf"/connectors/{name}/offsets/?"), self.reset_offsets),
            ("GET", re.compile(r"/admin/loggers/?"), lambda **_: (200, loggers.list_levels())),
            ("GET", re.compile(r"/admin/loggers/(?P<logger>[^/]+)/?"), self.get_logger),
            ("PUT", re.compile(r"/admin/loggers/(?P<logger>[^/]+)/?"), self.put_logger),
        ]
        if sessions is not None:
            # sinklab's own: the sinks of Spark Connect clients (sinklab.sink.remote), not connectors.
            self.routes += [
                ("GET", re.compile(rf"{SESSIONS_PATH}/?"), lambda **_: (200, sessions.names())),
                ("PUT", re.compile(rf"{sink}/?"), self.put_session),
                ("DELETE", re.compile(rf"{sink}/?"), self.delete_session),
                ("GET", re.compile(rf"{sink}/status/?"), self.session_status),
                ("POST", re.compile(rf"{sink}/cycle/?"), self.session_cycle),
                ("POST", re.compile(rf"{sink}/run-until-idle/?"), self.session_until_idle),
                ("POST", re.compile(rf"{sink}/replay/?"), self.session_replay),
                ("PUT", re.compile(rf"{sink}/start/?"), self.session_start),
                ("PUT", re.compile(rf"{sink}/halt/?"), self.session_halt),
                ("PUT", re.compile(rf"{sink}/stop/?"), self.session_stop),
            ]

    def handle(self, method: str, target: str, body: Any) -> Response:
        url = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        expands = parse_qs(url.query).get("expand", [])
        allowed = False
        for route_method, pattern, func in self.routes:
            match = pattern.fullmatch(url.path)
            if match is None:
                continue
            allowed = True
            if route_method != method:
                continue
            params = {k: unquote(v) for k, v in match.groupdict().items()}
            try:
                return func(body=body, query=query, expands=expands, **params)
            except ConnectError as exc:
                return exc.status, error(exc.status, exc.message)
            except ConfigError as exc:
                return 400, error(400, config_error_message(exc))
        if allowed:
            return 405, error(405, "HTTP 405 Method Not Allowed")
        return 404, error(404, "HTTP 404 Not Found")

    # ---- the worker
    def root(self, **_: Any) -> Response:
        return 200, {"version": KAFKA_VERSION, "commit": f"sinklab-{SINKLAB_VERSION}",
                     "kafka_cluster_id": self._cluster_id()}

    def health(self, **_: Any) -> Response:
        """KIP-1017's probe: 200 once the worker serves requests, 503 while it starts or stops."""
        if self.herder.ready:
            return 200, {"status": "healthy",
                         "message": "Worker has completed startup and is ready to handle requests."}
        return 503, {"status": "starting", "message": "Worker is still starting up (or stopping): its connectors are "
                                                     "being read from the config store."}

    def get_logger(self, logger: str, **_: Any) -> Response:
        return 200, loggers.get_level(logger)

    def put_logger(self, logger: str, body: Any, query: dict[str, str], **_: Any) -> Response:
        if not isinstance(body, dict) or "level" not in body:
            raise BadRequest("The request body must be a JSON object with a 'level' field.")
        changed = loggers.set_level(logger, body["level"])
        # scope=cluster asks every worker and answers at once; this server is the one worker.
        return (204, None) if query.get("scope", "worker").lower() == "cluster" else (200, changed)

    def plugins(self, **_: Any) -> Response:
        return 200, [{"class": cls, "type": "sink", "version": ICEBERG_VERSION} for cls in PLUGIN_CLASSES]

    def validate_config(self, plugin: str, body: Any, **_: Any) -> Response:
        if not is_plugin(plugin):
            raise NotFound(f"Failed to find any class that implements Connector and which name matches {plugin}")
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object of config values")
        given = body.get(keys.CONNECTOR_CLASS)
        if given is not None and given != plugin and not (is_plugin(given) and is_plugin(plugin)):
            raise BadRequest(f"{keys.CONNECTOR_CLASS}: {given!r} does not match {plugin!r} in the URL",
                             key=keys.CONNECTOR_CLASS)
        return 200, validate_response(plugin, {keys.CONNECTOR_CLASS: plugin, **body})

    # ---- connectors
    def list(self, expands: list[str], **_: Any) -> Response:
        names = self.herder.names()
        if not expands:
            return 200, names
        out: dict[str, dict[str, Any]] = {}
        for name in names:
            entry: dict[str, Any] = {}
            try:
                if "status" in expands:
                    entry["status"] = self.herder.status(name)
                if "info" in expands:
                    entry["info"] = self.herder.info(name)
            except NotFound:
                continue  # deleted meanwhile
            out[name] = entry
        return 200, out

    def create(self, body: Any, **_: Any) -> Response:
        if not isinstance(body, dict) or not isinstance(body.get("name"), str) or not body["name"]:
            raise BadRequest("name: the request needs a connector name: {\"name\": ..., \"config\": {...}}")
        if not isinstance(body.get("config"), dict):
            raise BadRequest("config: the request needs a config object: {\"name\": ..., \"config\": {...}}")
        name = body["name"]
        self._not_a_session(name)
        return 201, self.herder.create(name, {**body["config"], keys.NAME: body["config"].get(keys.NAME, name)},
                                       str(body.get("initial_state", "RUNNING")).upper())

    def info(self, name: str, **_: Any) -> Response:
        return 200, self.herder.info(name)

    def delete(self, name: str, **_: Any) -> Response:
        self.herder.delete(name)
        return 204, None

    def get_config(self, name: str, **_: Any) -> Response:
        return 200, shown_config(self.herder.get(name).config)

    def patch_config(self, name: str, body: Any, **_: Any) -> Response:
        """KIP-477: change some keys of an existing connector (a null value removes the key); the
        sink restarts on the merged config, as after a PUT. 200 with the connector's info."""
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object of the config keys to change (null removes one)")
        merged = {**self.herder.get(name).config, **body}
        self.herder.put_config(name, {key: value for key, value in merged.items() if value is not None})
        return 200, self.herder.info(name)

    def put_config(self, name: str, body: Any, **_: Any) -> Response:
        if isinstance(body, dict) and isinstance(body.get("config"), dict) and set(body) <= {"name", "config"}:
            # Connect wants the flat map here; a {"name", "config"} file is a common slip, and its
            # meaning is clear.
            body = {**body["config"], **({"name": body["name"]} if "name" in body else {})}
        self._not_a_session(name)
        created = self.herder.put_config(name, body)
        return (201 if created else 200), self.herder.info(name)

    def status(self, name: str, **_: Any) -> Response:
        return 200, self.herder.status(name)

    def tasks(self, name: str, **_: Any) -> Response:
        return 200, self.herder.tasks(name)

    def task_status(self, name: str, task: str, **_: Any) -> Response:
        return 200, self.herder.task_status(name, int(task))

    def task_restart(self, name: str, task: str, **_: Any) -> Response:
        # Every task of a connector is a share of one commit cycle: restarting one restarts the sink.
        self.herder.task_status(name, int(task))
        self.herder.restart(name)
        return 204, None

    def pause(self, name: str, **_: Any) -> Response:
        self.herder.set_target(name, "PAUSED")
        return 202, None

    def resume(self, name: str, **_: Any) -> Response:
        self.herder.set_target(name, "RUNNING")
        return 202, None

    def stop(self, name: str, **_: Any) -> Response:
        self.herder.set_target(name, "STOPPED")
        return 204, None

    def restart(self, name: str, query: dict[str, str], **_: Any) -> Response:
        include_tasks = query.get("includeTasks", "false").lower() == "true"
        only_failed = query.get("onlyFailed", "false").lower() == "true"
        before = self.herder.status(name)
        restarting = self.herder.restart(name, include_tasks, only_failed)
        if not include_tasks and not only_failed:
            return 204, None  # Connect's answer to the plain restart, before KIP-745
        # KIP-745: 202 with the status, RESTARTING where a restart was issued.
        if restarting:
            before["connector"] = {"state": "RESTARTING", "worker_id": self.herder.worker_id}
            if include_tasks:
                before["tasks"] = [{"id": t["id"], "state": "RESTARTING", "worker_id": t["worker_id"]}
                                   for t in before["tasks"]]
        return 202, before

    def topics(self, name: str, **_: Any) -> Response:
        return 200, self.herder.topics(name)

    def topics_reset(self, name: str, **_: Any) -> Response:
        self.herder.reset_topics(name)
        return 202, None

    def offsets(self, name: str, **_: Any) -> Response:
        return 200, self.herder.offsets(name)

    def alter_offsets(self, name: str, body: Any, **_: Any) -> Response:
        return 200, self.herder.alter_offsets(name, body)

    def reset_offsets(self, name: str, **_: Any) -> Response:
        return 200, self.herder.reset_offsets(name)

    def _not_a_session(self, name: str) -> None:
        if self.sessions is not None and name in self.sessions.names():
            raise Conflict(f"a Spark Connect client's sink named {name} is on this server (DELETE "
                           f"/sinklab/sinks/{name} frees the name); its name is the connector's group and "
                           "transactional id")

    # ---- the sinks of Spark Connect clients
    def put_session(self, name: str, body: Any, **_: Any) -> Response:
        assert self.sessions is not None
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a sink config (SinkConfig's JSON)")
        try:
            replaced = self.sessions.put(name, body)
        except ValidationError as exc:
            raise BadRequest(f"the sink config is not SinkConfig's JSON: {exc}") from exc
        return (200 if replaced else 201), {"name": name}

    def delete_session(self, name: str, **_: Any) -> Response:
        assert self.sessions is not None
        sessions = self.sessions
        return _sink_call(lambda: sessions.delete(name), 204)

    def session_status(self, name: str, **_: Any) -> Response:
        assert self.sessions is not None
        return 200, self.sessions.status(name)

    def session_cycle(self, name: str, **_: Any) -> Response:
        assert self.sessions is not None
        sessions = self.sessions
        return _sink_call(lambda: sessions.cycle(name))

    def session_until_idle(self, name: str, query: dict[str, str], **_: Any) -> Response:
        assert self.sessions is not None
        sink = self.sessions.get(name)
        return _sink_call(lambda: {"cycles": sink.run_until_idle(float(query.get("idle_s", "1")))})

    def session_replay(self, name: str, body: Any, **_: Any) -> Response:
        assert self.sessions is not None
        sessions = self.sessions
        where = body.get("where") if isinstance(body, dict) else None
        return _sink_call(lambda: sessions.replay(name, where))

    def session_start(self, name: str, **_: Any) -> Response:
        assert self.sessions is not None
        self.sessions.get(name).start()
        return 202, None

    def session_halt(self, name: str, **_: Any) -> Response:
        assert self.sessions is not None
        self.sessions.get(name).halt()
        return 202, None

    def session_stop(self, name: str, query: dict[str, str], **_: Any) -> Response:
        assert self.sessions is not None
        sink = self.sessions.get(name)
        return _sink_call(lambda: sink.stop(float(query.get("timeout_s", "120"))), 204)


def _sink_call(call: Callable[[], Any], status: int = 200) -> Response:
    """``status`` and what ``call`` returns (nothing for 204); a sink's own failure (a record it cannot
    convert, Kafka away) as a 500 that names its class, so the client raises it again as that class
    (``sinklab.sink.remote.error_from_json``)."""
    try:
        payload = call()
        return status, None if status == 204 else payload
    except (ConnectError, ConfigError):
        raise
    except Exception as exc:  # noqa: BLE001 - answered, with its class, to the client that asked
        log.info("a client's sink failed: %s", exc)
        return 500, error_json(exc)


def error(status: int, message: str) -> dict[str, Any]:
    return {"error_code": status, "message": message}


def _encoded(payload: Any) -> bytes:
    return b"" if payload is None else json.dumps(payload).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = f"sinklab-connect/{SINKLAB_VERSION}"
    api: ConnectApi  # set on the subclass the server makes
    basic_auth: tuple[str, str] | None = None  # (user, password) a request must bring; None: anyone

    def _authorized(self) -> bool:
        assert self.basic_auth is not None
        scheme, _, encoded = self.headers.get("Authorization", "").partition(" ")
        try:
            given = base64.b64decode(encoded, validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            return False
        expected = ":".join(self.basic_auth)
        return scheme.lower() == "basic" and hmac.compare_digest(given.encode(), expected.encode())

    def _dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.basic_auth is not None and not self._authorized():
            # As Kafka Connect's BasicAuthSecurityRestExtension answers.
            self._send(401, error(401, "User cannot access the resource: basic authentication is required"),
                       headers={"WWW-Authenticate": 'Basic realm="sinklab connect"'})
            return
        body: Any = None
        if raw.strip():
            try:
                body = json.loads(raw)
            except json.JSONDecodeError as exc:
                self._send(400, error(400, f"the request body is not valid JSON: {exc}"))
                return
        try:
            status, payload = self.api.handle(self.command, self.path, body)
            data = _encoded(payload)  # an answer that cannot be sent is a failure too, not a dropped connection
        except Exception as exc:  # noqa: BLE001 - Connect answers 500 with the error's message
            log.exception("%s %s", self.command, self.path)
            status, payload = 500, error(500, f"{type(exc).__name__}: {exc}")
            data = _encoded(payload)
        self._send(status, payload, data)

    def _send(self, status: int, payload: Any, data: bytes | None = None, headers: dict[str, str] | None = None
              ) -> None:
        data = _encoded(payload) if data is None else data
        self.send_response(status, HTTPStatus(status).phrase)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if status == 201 and isinstance(payload, dict) and "name" in payload:
            self.send_header("Location", f"/connectors/{payload['name']}")
        if data:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch  # noqa: N815 - http.server's names

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        log.info("%s " + format, self.address_string(), *args)


class ConnectServer:
    """The HTTP server in a background thread; ``close`` stops it (the herder is the caller's)."""

    def __init__(self, api: ConnectApi, host: str = "127.0.0.1", port: int = 8083,
                 basic_auth: tuple[str, str] | None = None):
        handler = type("BoundHandler", (Handler,), {"api": api, "basic_auth": basic_auth})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.host, self.port = host, int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="connect-http", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ConnectServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(10)

