"""Every tutorial in notebooks/ runs headless with papermill, on its own embedded stack: no error, at
least one plotly figure, nothing left running; executed, it is small (≤ 2 MB) and quiet (no stderr,
no JVM/Spark/librdkafka log lines, no stray reprs), and every figure carries a picture for viewers
without JavaScript. The committed notebooks carry no outputs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from helpers import stop_leftovers

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
PLOTLY = "application/vnd.plotly.v1+json"
PNG = "image/png"
KERNEL = "sinklab"
MAX_BYTES = 2_000_000
# Log lines that leaked into an output: log4j's and Spark's console format, librdkafka's
# "%3|1700000000.123|FAIL|...", Python's warnings; and reprs nobody meant to print.
NOISE = re.compile(r"\b(WARN|ERROR|INFO)\b [\w.$]+:|log4j|NativeCodeLoader|Setting default log level|%\d\|\d+\.\d+\|"
                   r"|\w+Warning: |<bound method |<[\w.]+ object at 0x")
# Smaller runs than the defaults (which `make notebooks` runs and the README's run times measure):
# the suite's time budget. Notebooks not named here run with their defaults.
SMALL: dict[str, dict[str, object]] = {
    "01-pizzas-on-ice": {"count": 2000, "rate": 1000},
    "02-commit-interval": {"intervals_ms": [1000, 3000], "count": 1200, "rate": 400},
    "04-exactly-once": {"back_after_s": 3},
    "09-maintenance": {"cycles": 5, "small_files": 3},
}


def test_notebooks_are_committed_clean() -> None:
    assert NOTEBOOKS
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), f"{path.name} has outputs"
        parameters = [c for c in code if "parameters" in c.metadata.get("tags", [])]
        assert len(parameters) == 1 and "workdir = None" in parameters[0].source, path.name
        assert nb.metadata.kernelspec.name == KERNEL, path.name


@pytest.fixture(scope="module")
def kernel() -> str:
    """The `sinklab` kernelspec (`make setup` installs it into the venv) runs this very python."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    def spec_python() -> str | None:
        try:
            return KernelSpecManager().get_kernel_spec(KERNEL).argv[0]
        except NoSuchKernel:
            return None

    if spec_python() != sys.executable:
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL,
                        "--display-name", "Python (sinklab)"], check=True, capture_output=True)
    assert spec_python() == sys.executable
    return KERNEL


@pytest.mark.spark
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_shows_figures(path: Path, tmp_path: Path, kernel: str) -> None:
    import papermill

    workdir = tmp_path / "stack"
    out = tmp_path / path.name
    started = time.monotonic()
    try:
        parameters = {"workdir": str(workdir), **SMALL.get(path.stem, {})}
        papermill.execute_notebook(str(path), str(out), parameters=parameters, kernel_name=kernel,
                                   cwd=str(path.parent), progress_bar=False, execution_timeout=600)
    finally:
        left = stop_leftovers(str(workdir))  # the kernel's stack, if the notebook did not close it
    print(f"\n{path.name}: {time.monotonic() - started:.1f}s")
    assert not left, f"{path.name} left processes running: {left}"
    nb = nbformat.read(out, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    figures = [o for o in outputs if PLOTLY in o.get("data", {})]
    assert figures, f"{path.name} shows no plotly figure"
    assert all(fig["data"][PLOTLY]["data"] for fig in figures), f"{path.name} shows an empty figure"
    # Shown by nbconvert's HTML and GitHub too: a PNG beside every figure's JSON.
    assert all(PNG in fig["data"] for fig in figures), f"{path.name} has a figure without a picture"
    assert out.stat().st_size <= MAX_BYTES, f"{path.name} is {out.stat().st_size:,} bytes executed"
    assert not [o for o in outputs if o.output_type == "stream" and o.name == "stderr"], \
        f"{path.name} wrote to stderr: {[o.text for o in outputs if o.get('name') == 'stderr']}"
    for o in outputs:
        text = o.get("text", "") if o.output_type == "stream" else json.dumps(
            {k: v for k, v in o.get("data", {}).items() if k.startswith("text/")})
        found = NOISE.search(text)
        assert not found, f"{path.name}: {found.group(0)!r} in an output: {text[:300]}"
