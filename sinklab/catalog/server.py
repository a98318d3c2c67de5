"""An Iceberg REST catalog server backed by pyiceberg's SqlCatalog on SQLite.

The same shape as Apache's REST fixture (which wraps a JDBC catalog): one process owns the
SQLite file and serialises commits, so Spark (Java ``RESTCatalog``) and pyiceberg can commit to
the same tables concurrently. Optimistic concurrency comes from the REST commit requirements:
a stale commit gets 409 and the client retries on fresh metadata.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import CreateTableRequest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchPropertyException,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.table import CommitTableRequest, Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import AssertCreate, AssertRefSnapshotId

NAMESPACE_SEPARATOR = "\x1f"

# Java's ErrorHandlers pick the exception from the status and, for 404/409, the "type" name.
_ERRORS: list[tuple[type[Exception], int, str]] = [
    (NoSuchNamespaceError, 404, "NoSuchNamespaceException"),
    (NoSuchTableError, 404, "NoSuchTableException"),
    (NamespaceNotEmptyError, 409, "NamespaceNotEmptyException"),
    (NamespaceAlreadyExistsError, 409, "AlreadyExistsException"),
    (TableAlreadyExistsError, 409, "AlreadyExistsException"),
    (CommitFailedException, 409, "CommitFailedException"),
    (NoSuchPropertyException, 400, "BadRequestException"),
    (ValidationError, 400, "BadRequestException"),
    (ValueError, 400, "BadRequestException"),
]

ENDPOINTS = [
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/register",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
    "POST /v1/{prefix}/tables/rename",
]


def error_body(status: int, type_: str, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "code": status}}


class RestError(Exception):
    def __init__(self, status: int, type_: str, message: str):
        super().__init__(message)
        self.status, self.type, self.message = status, type_, message


class CreateNamespaceBody(BaseModel):
    namespace: list[str]
    properties: dict[str, str] = Field(default_factory=dict)


class UpdateNamespacePropertiesBody(BaseModel):
    removals: list[str] = Field(default_factory=list)
    updates: dict[str, str] = Field(default_factory=dict)


class TableRef(BaseModel):
    namespace: list[str]
    name: str


class RenameTableBody(BaseModel):
    source: TableRef
    destination: TableRef


class RegisterTableBody(BaseModel):
    # pyiceberg's RegisterTableRequest makes "overwrite" required; Java clients before 1.10 omit it.
    model_config = ConfigDict(populate_by_name=True)
    name: str
    metadata_location: str = Field(alias="metadata-location")
    overwrite: bool = False


class CreateTableBody(CreateTableRequest):
    # Optional in the spec; pyiceberg's client model requires them because it always sends them.
    location: str | None = Field(default=None)
    partition_spec: PartitionSpec | None = Field(alias="partition-spec", default=None)
    write_order: SortOrder | None = Field(alias="write-order", default=None)


class SpecAssertRefSnapshotId(AssertRefSnapshotId):
    """The spec's assert-ref-snapshot-id, as Java's catalogs check it.

    pyiceberg also refuses any ref but ``main`` on a table without snapshots; the spec does not,
    and a write to a new branch of an empty table (a staged first commit) needs it.
    """

    def validate(self, base_metadata: TableMetadata | None) -> None:
        if base_metadata is None:
            raise CommitFailedException("Requirement failed: current table metadata is missing")
        ref = base_metadata.refs.get(self.ref)
        if ref is None:
            if self.snapshot_id is not None:
                raise CommitFailedException(f"Requirement failed: branch or tag {self.ref} is missing, "
                                            f"expected {self.snapshot_id}")
        elif self.snapshot_id is None:
            raise CommitFailedException(f"Requirement failed: {self.ref} was created concurrently")
        elif self.snapshot_id != ref.snapshot_id:
            raise CommitFailedException(f"Requirement failed: {self.ref} has changed: expected id "
                                        f"{self.snapshot_id}, found {ref.snapshot_id}")


def spec_requirements(requirements: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        SpecAssertRefSnapshotId(ref=r.ref, snapshot_id=r.snapshot_id) if isinstance(r, AssertRefSnapshotId) else r
        for r in requirements
    )


class _Ident:
    """What ``SqlCatalog.commit_table`` needs of a table: its name (the table may not exist yet)."""

    def __init__(self, identifier: tuple[str, ...]):
        self._identifier = identifier

    def name(self) -> tuple[str, ...]:
        return self._identifier


def parse_namespace(raw: str) -> tuple[str, ...]:
    parts = tuple(raw.split(NAMESPACE_SEPARATOR))
    if not all(parts):
        raise RestError(400, "BadRequestException", f"invalid namespace {raw!r}: empty level")
    return parts


def table_result(table: Table, config: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata-location": table.metadata_location,
        "metadata": metadata_json(table.metadata),
        "config": dict(config),
    }


def metadata_json(metadata: TableMetadata) -> dict[str, Any]:
    return json.loads(metadata.model_dump_json())


T = TypeVar("T")


def create_app(
    catalog: Catalog,
    token: str | None = None,
    table_config: dict[str, str] | None = None,
    defaults: dict[str, str] | None = None,
) -> FastAPI:
    """The REST routes over any pyiceberg catalog; every catalog call holds one lock."""
    app = FastAPI(title="sinklab Iceberg REST catalog")
    lock = threading.Lock()
    load_config = dict(table_config or {})

    def locked(fn: Callable[[], T]) -> T:
        with lock:
            return fn()

    def parse_body(model: type[BaseModel], body: bytes) -> Any:
        try:
            return model.model_validate_json(body)
        except ValidationError as exc:
            raise RestError(400, "BadRequestException", f"malformed {model.__name__}: {exc}") from exc

    @app.middleware("http")
    async def auth_and_errors(request: Request, call_next: Callable[[Request], Any]) -> Response:
        if token is not None and request.headers.get("authorization") != f"Bearer {token}":
            return JSONResponse(
                error_body(401, "NotAuthorizedException", "missing or invalid bearer token"), status_code=401
            )
        try:
            return await call_next(request)
        except RestError as exc:
            return JSONResponse(error_body(exc.status, exc.type, exc.message), status_code=exc.status)
        except Exception as exc:  # mapped to the spec's envelope; anything unmapped is a 500 with its reason
            for kind, status, type_ in _ERRORS:
                if isinstance(exc, kind):
                    return JSONResponse(error_body(status, type_, str(exc)), status_code=status)
            return JSONResponse(
                error_body(500, type(exc).__name__, f"{type(exc).__name__}: {exc}"), status_code=500
            )

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(400, "BadRequestException", str(exc)), status_code=400)

    @app.get("/v1/config")
    def get_config() -> dict[str, Any]:
        return {"defaults": dict(defaults or {}), "overrides": {}, "endpoints": ENDPOINTS}

    # ---- namespaces
    @app.get("/v1/namespaces")
    def list_namespaces(parent: str | None = None) -> dict[str, Any]:
        ns = parse_namespace(parent) if parent else ()
        found = locked(lambda: catalog.list_namespaces(ns))
        return {"namespaces": sorted(list(n) for n in found), "next-page-token": None}

    @app.post("/v1/namespaces")
    async def create_namespace(request: Request) -> dict[str, Any]:
        body = parse_body(CreateNamespaceBody, await request.body())
        if not body.namespace or not all(body.namespace):
            raise RestError(400, "BadRequestException", "namespace must have at least one non-empty level")
        ns = tuple(body.namespace)
        locked(lambda: catalog.create_namespace(ns, body.properties))
        return {"namespace": list(ns), "properties": body.properties}

    @app.get("/v1/namespaces/{namespace}")
    def load_namespace(namespace: str) -> dict[str, Any]:
        ns = parse_namespace(namespace)
        props = locked(lambda: catalog.load_namespace_properties(ns))
        return {"namespace": list(ns), "properties": {k: v for k, v in props.items() if k != "exists"}}

    @app.head("/v1/namespaces/{namespace}")
    def namespace_exists(namespace: str) -> Response:
        ns = parse_namespace(namespace)
        return Response(status_code=204 if locked(lambda: catalog.namespace_exists(ns)) else 404)

    @app.delete("/v1/namespaces/{namespace}")
    def drop_namespace(namespace: str) -> Response:
        ns = parse_namespace(namespace)
        locked(lambda: catalog.drop_namespace(ns))
        return Response(status_code=204)

    @app.post("/v1/namespaces/{namespace}/properties")
    async def update_namespace_properties(namespace: str, request: Request) -> dict[str, Any]:
        ns = parse_namespace(namespace)
        body = parse_body(UpdateNamespacePropertiesBody, await request.body())
        overlap = set(body.removals) & set(body.updates)
        if overlap:
            raise RestError(422, "UnprocessableEntityException", f"keys both updated and removed: {overlap}")
        summary = locked(
            lambda: catalog.update_namespace_properties(ns, set(body.removals), body.updates)
        )
        return {"updated": summary.updated, "removed": summary.removed, "missing": summary.missing or []}

    # ---- tables
    @app.get("/v1/namespaces/{namespace}/tables")
    def list_tables(namespace: str) -> dict[str, Any]:
        ns = parse_namespace(namespace)
        found = locked(lambda: catalog.list_tables(ns))
        return {
            "identifiers": [{"namespace": list(t[:-1]), "name": t[-1]} for t in sorted(found)],
            "next-page-token": None,
        }

    @app.post("/v1/namespaces/{namespace}/tables")
    async def create_table(namespace: str, request: Request) -> dict[str, Any]:
        ns = parse_namespace(namespace)
        body: CreateTableBody = parse_body(CreateTableBody, await request.body())
        ident = (*ns, body.name)
        spec = body.partition_spec or UNPARTITIONED_PARTITION_SPEC
        order = body.write_order or UNSORTED_SORT_ORDER

        def create() -> dict[str, Any]:
            if not catalog.namespace_exists(ns):
                raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(ns)}")
            if catalog.table_exists(ident):
                raise TableAlreadyExistsError(f"Table already exists: {'.'.join(ident)}")
            if body.stage_create:
                # Nothing is written: the client's first commit (with assert-create) creates it.
                staged = catalog._create_staged_table(  # type: ignore[attr-defined]
                    ident, body.table_schema, body.location, spec, order, body.properties
                )
                return {"metadata-location": None, "metadata": metadata_json(staged.metadata),
                        "config": dict(load_config)}
            table = catalog.create_table(ident, body.table_schema, body.location, spec, order, body.properties)
            return table_result(table, load_config)

        return locked(create)

    @app.post("/v1/namespaces/{namespace}/register")
    async def register_table(namespace: str, request: Request) -> dict[str, Any]:
        ns = parse_namespace(namespace)
        body = parse_body(RegisterTableBody, await request.body())
        table = locked(lambda: catalog.register_table((*ns, body.name), body.metadata_location, body.overwrite))
        return table_result(table, load_config)

    @app.get("/v1/namespaces/{namespace}/tables/{table}")
    def load_table(namespace: str, table: str) -> dict[str, Any]:
        ident = (*parse_namespace(namespace), table)
        return table_result(locked(lambda: catalog.load_table(ident)), load_config)

    @app.head("/v1/namespaces/{namespace}/tables/{table}")
    def table_exists(namespace: str, table: str) -> Response:
        ident = (*parse_namespace(namespace), table)
        return Response(status_code=204 if locked(lambda: catalog.table_exists(ident)) else 404)

    @app.post("/v1/namespaces/{namespace}/tables/{table}")
    async def commit_table(namespace: str, table: str, request: Request) -> dict[str, Any]:
        ident = (*parse_namespace(namespace), table)
        raw = json.loads(await request.body() or b"{}")
        if not isinstance(raw, dict):
            raise RestError(400, "BadRequestException", "commit request must be a JSON object")
        # The identifier in the body is optional in the spec; the path names the table.
        raw["identifier"] = {"namespace": list(ident[:-1]), "name": ident[-1]}
        body: CommitTableRequest = parse_body(CommitTableRequest, json.dumps(raw).encode())

        def commit() -> dict[str, Any]:
            creating = any(isinstance(r, AssertCreate) for r in body.requirements)
            if not creating and not catalog.table_exists(ident):
                raise NoSuchTableError(f"Table does not exist: {'.'.join(ident)}")
            response = catalog.commit_table(_Ident(ident), spec_requirements(body.requirements), body.updates)  # type: ignore[arg-type]
            return {"metadata-location": response.metadata_location, "metadata": metadata_json(response.metadata)}

        return locked(commit)

    @app.delete("/v1/namespaces/{namespace}/tables/{table}")
    def drop_table(namespace: str, table: str, purgeRequested: bool = False) -> Response:  # noqa: N803
        ident = (*parse_namespace(namespace), table)
        locked(lambda: catalog.purge_table(ident) if purgeRequested else catalog.drop_table(ident))
        return Response(status_code=204)

    @app.post("/v1/namespaces/{namespace}/tables/{table}/metrics")
    def report_metrics(namespace: str, table: str) -> Response:
        return Response(status_code=204)

    @app.post("/v1/tables/rename")
    async def rename_table(request: Request) -> Response:
        body = parse_body(RenameTableBody, await request.body())
        src = (*body.source.namespace, body.source.name)
        dst = (*body.destination.namespace, body.destination.name)
        locked(lambda: catalog.rename_table(src, dst))
        return Response(status_code=204)

    return app


def sql_catalog(db_path: Path, warehouse: str, name: str = "sinklab",
                io_properties: dict[str, str] | None = None) -> SqlCatalog:
    # io_properties (s3.endpoint, s3.access-key-id, ...) configure the FileIO the server writes
    # table metadata with.
    return SqlCatalog(name, uri=f"sqlite:///{db_path}", warehouse=warehouse, **(io_properties or {}))


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="sinklab's embedded Iceberg REST catalog")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", type=Path, required=True, help="SQLite file holding the catalog")
    parser.add_argument("--warehouse", required=True, help="warehouse location, e.g. file:///data/warehouse")
    parser.add_argument("--token-file", type=Path, help="file holding a bearer token every request must carry")
    parser.add_argument("--table-config", default="{}", help="JSON object returned as config on table loads")
    parser.add_argument(
        "--io-properties-file", type=Path,
        help="JSON file of FileIO properties (s3.endpoint, s3.access-key-id, ...): the server's own FileIO uses "
             "them, and table loads return them as config so that clients knowing only the URI read the files",
    )
    args = parser.parse_args(argv)
    token = args.token_file.read_text().strip() if args.token_file else None
    io_properties = json.loads(args.io_properties_file.read_text()) if args.io_properties_file else {}
    table_config = {**io_properties, **json.loads(args.table_config)}
    app = create_app(sql_catalog(args.db, args.warehouse, io_properties=io_properties), token=token,
                     table_config=table_config)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
