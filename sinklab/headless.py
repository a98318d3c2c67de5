"""papermill's engine for the tutorials run headless: ``papermill --engine sinklab`` (``make notebooks``,
the suite).

It is papermill's own engine with the kernel's sockets on IPC (files in Jupyter's runtime folder, which
only this user reads) instead of TCP ports: over TCP without CurveZMQ keys ipykernel warns, once per
notebook, that code and outputs travel in plain text, a warning a newcomer takes for trouble (#44).
"""

from __future__ import annotations

from typing import Any

from papermill.engines import NBClientEngine
from traitlets.config import Config

TRANSPORT = "ipc"


class Engine(NBClientEngine):
    @classmethod
    def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, **kwargs: Any) -> Any:
        config = Config(kwargs.pop("config", None) or {})
        config.KernelManager.transport = TRANSPORT
        return super().execute_managed_notebook(nb_man, kernel_name, config=config, **kwargs)
