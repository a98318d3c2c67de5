"""The embedded S3-compatible server: moto, on loopback, holding the warehouse bucket.

moto keeps objects in memory: they live as long as the process. Measured against S3Proxy (the
persistent candidate from Maven Central) in the closing note of the stack's move to Apache parts.

Run as ``python -m sinklab.stack.s3 --port P --stack-dir DIR``: ``--stack-dir`` puts the stack's
workdir in the command line, which is how ``stack down`` makes sure a recorded PID still belongs to
the stack before signalling it (PIDs are reused).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import requests

from sinklab.exceptions import ProcessError, S3NotAvailable
from sinklab.stack.process import LOOPBACK, ManagedProcess, free_port

DEFAULT_BUCKET = "sinklab"
DEFAULT_REGION = "us-east-1"
# moto accepts any credentials; fixed ones keep stack.json and a user's own clients simple.
DEFAULT_ACCESS_KEY = "sinklab"
DEFAULT_SECRET_KEY = "sinklab-secret"


def s3_client_properties(
    endpoint: str,
    access_key: str,
    secret_key: str,
    region: str = DEFAULT_REGION,
    path_style: bool = True,
) -> dict[str, str]:
    """Iceberg's client properties for an S3-compatible store, the names pyiceberg and Iceberg's
    Java FileIOs (S3FileIO) read."""
    return {
        "s3.endpoint": endpoint,
        "s3.access-key-id": access_key,
        "s3.secret-access-key": secret_key,
        # Without an explicit region pyiceberg asks AWS where the bucket lives: a request that
        # goes nowhere on a machine without internet, and the wrong answer for a local server.
        "s3.region": region,
        "client.region": region,
        "s3.path-style-access": str(path_style).lower(),
    }


def require_moto() -> None:
    try:
        import moto.server  # noqa: F401
    except ImportError as exc:
        raise S3NotAvailable(
            "the embedded S3 server needs moto: pip install 'sinklab[s3]' (moto[server]==5.2.5)"
        ) from exc


class EmbeddedS3:
    """A moto S3 server as a managed process, with the warehouse bucket created at start."""

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        bucket: str = DEFAULT_BUCKET,
        access_key: str = DEFAULT_ACCESS_KEY,
        secret_key: str = DEFAULT_SECRET_KEY,
        region: str = DEFAULT_REGION,
    ):
        require_moto()
        self.workdir = workdir
        self.port = port or free_port()
        self.bucket = bucket
        self.access_key, self.secret_key, self.region = access_key, secret_key, region
        self.process = ManagedProcess(
            "S3 server (moto)",
            [sys.executable, "-m", "sinklab.stack.s3", "--host", LOOPBACK, "--port", str(self.port),
             "--stack-dir", str(workdir)],
            workdir / "logs" / "s3.log",
        )

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def client_properties(self) -> dict[str, str]:
        return s3_client_properties(self.endpoint, self.access_key, self.secret_key, self.region)

    def ready(self) -> bool:
        # ListBuckets: moto answers it only once its S3 backend is loaded.
        return requests.get(self.endpoint + "/", timeout=2).status_code == 200

    def start(self, timeout: float = 60) -> None:
        self.process.start()
        self.process.wait_ready(self.ready, timeout)
        self.create_bucket()

    def create_bucket(self) -> None:
        import boto3

        client = boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=self.region,
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
        )
        try:
            client.create_bucket(Bucket=self.bucket)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass
        except Exception as exc:
            raise ProcessError(f"could not create bucket {self.bucket!r} on {self.endpoint}: {exc}") from exc

    def stop(self) -> None:
        self.process.stop(timeout=10)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="sinklab's embedded S3 server (moto)")
    parser.add_argument("--host", default=LOOPBACK)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--stack-dir", required=True, help="the workdir of the stack this server belongs to")
    args = parser.parse_args(argv)
    from moto.server import main as moto_main

    moto_main(["--host", args.host, "--port", str(args.port)])


if __name__ == "__main__":
    main()
