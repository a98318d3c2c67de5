"""How sinklab's figures show up: interactive in JupyterLab, and as a picture everywhere else.

Each figure's output carries two representations: plotly's JSON (``application/vnd.plotly.v1+json``,
which JupyterLab's plotly extension draws, interactive) and a PNG (``image/png``), which nbconvert's
HTML, GitHub and any viewer without JavaScript show. Embedding plotly.js as ``text/html`` instead
would cost 4.8 MB per notebook; a PNG costs tens of kilobytes and needs no script.

The PNG is drawn by plotly's own exporter, kaleido, in a headless Chromium (Debian's ``chromium``,
which ``make setup`` installs): one browser per kernel, started with the first figure and stopped
when the kernel exits.
"""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import threading
import warnings
from typing import Any

import plotly.io as pio
from plotly.io._base_renderers import MimetypeRenderer, PlotlyRenderer

NAME = "sinklab"
PLOTLY_MIME = "application/vnd.plotly.v1+json"
PNG_MIME = "image/png"
WIDTH = 960
HEIGHT = 450

_lock = threading.Lock()
_server_started = False
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium() -> str | None:
    """The browser kaleido draws in: ``BROWSER_PATH`` (kaleido's own variable), else one on PATH."""
    return os.environ.get("BROWSER_PATH") or next((p for p in map(shutil.which, BROWSERS) if p), None)


def png(fig: Any, width: int | None = None, height: int | None = None) -> bytes:
    """The figure (a ``go.Figure`` or its dict) as a PNG, drawn by kaleido in this kernel's Chromium."""
    import kaleido

    global _server_started
    fig_dict = fig if isinstance(fig, dict) else fig.to_plotly_json()
    layout = fig_dict.get("layout", {})
    opts = {"format": "png", "width": width or layout.get("width") or WIDTH,
            "height": height or layout.get("height") or HEIGHT, "scale": 1}
    with _lock:
        if not _server_started:
            # One browser for every figure of the kernel: starting Chromium costs seconds, a figure
            # then half a second.
            kaleido.start_sync_server(silence_warnings=True)
            atexit.register(kaleido.stop_sync_server, silence_warnings=True)
            _server_started = True
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return bytes(kaleido.calc_fig_sync(fig_dict, opts=opts))


class OfflineRenderer(MimetypeRenderer):
    """plotly's JSON for JupyterLab plus a PNG for everything that runs no JavaScript."""

    def __init__(self) -> None:
        self.plotly = PlotlyRenderer()

    def to_mimebundle(self, fig_dict: dict[str, Any]) -> dict[str, Any]:
        bundle = dict(self.plotly.to_mimebundle(fig_dict))
        if chromium() is None:
            bundle["text/plain"] = ("(no picture of this figure: Chromium was not found; `make tools` installs it, "
                                    "or set BROWSER_PATH)")
            return bundle
        bundle[PNG_MIME] = base64.b64encode(png(fig_dict)).decode("ascii")
        return bundle


def use() -> None:
    """Make every plotly figure shown in this kernel carry its PNG (``import sinklab.viz`` does it)."""
    pio.renderers[NAME] = OfflineRenderer()
    pio.renderers.default = NAME
