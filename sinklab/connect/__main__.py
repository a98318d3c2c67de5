"""``python -m sinklab.connect --stack stack.json [--port P]``: the process the embedded stack starts."""

from __future__ import annotations

import argparse
import logging
import sys

from sinklab.connect.worker import run


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m sinklab.connect", description=__doc__)
    parser.add_argument("--stack", required=True, help="stack.json of the stack to run connectors on")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8083)
    parser.add_argument("--state-dir", help="where connector configs and target states are kept")
    parser.add_argument("--spark-connect-port", type=int,
                        help="start the driver at once and serve Spark Connect on this loopback port too")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    run(args.stack, args.host, args.port, args.state_dir, spark_connect_port=args.spark_connect_port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
