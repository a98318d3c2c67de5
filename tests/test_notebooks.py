"""Every tutorial in notebooks/ runs headless with papermill, all on one shared stack (`sinklab stack up
--spark-connect --schema-registry`, as `make notebooks` runs them) whose Spark Connect server runs their
sinks; 01 instead on a stack of its own, as a user opening it in Jupyter runs it. No error, at least one
plotly figure, nothing left running (no process, no sink on the shared server); executed, it is small
(≤ 2 MB) and quiet (no stderr, no JVM/Spark/librdkafka log lines, no stray reprs), and every figure carries
a picture for viewers without JavaScript. The committed notebooks carry no outputs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
import requests
from helpers import build_site, run_cli, stop_leftovers

from sinklab.stack import StackInfo, stop_recorded

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
# The two-hour workshop (docs/workshop.md): these tutorials in this order, each ending in exercises whose
# solutions, notebooks of their own in notebooks/solutions/, run here too.
TRACK = ["01-pizzas-on-ice", "02-commit-interval", "04-exactly-once", "06-bad-records"]
SOLUTIONS = sorted((NOTEBOOKS[0].parent / "solutions").glob("*.ipynb"))
PLOTLY = "application/vnd.plotly.v1+json"
PNG = "image/png"
KERNEL = "sinklab"
ENGINE = "sinklab"  # papermill's engine with the kernel over IPC (sinklab/headless.py), as make notebooks runs it
MAX_BYTES = 2_000_000
# Log lines that leaked into an output: log4j's and Spark's console format, librdkafka's
# "%3|1700000000.123|FAIL|...", Python's warnings; and reprs nobody meant to print.
NOISE = re.compile(r"\b(WARN|ERROR|INFO)\b [\w.$]+:|log4j|NativeCodeLoader|Setting default log level|%\d\|\d+\.\d+\|"
                   r"|\w+Warning: |^WARNING: |<bound method |<[\w.]+ object at 0x", re.MULTILINE)
# Smaller runs than the defaults (which `make notebooks` runs and docs/dashboard.md's run times measure):
# the suite's time budget. Notebooks not named here run with their defaults (02's are sized for the suite:
# four intervals of both sinks, each with enough commits for the trade-off figure).
SMALL: dict[str, dict[str, object]] = {
    "01-pizzas-on-ice": {"count": 2000, "rate": 1000},
    "04-exactly-once": {"back_after_s": 3},
    "09-maintenance": {"cycles": 5, "small_files": 3},
}
# Run on a stack of their own, as a reader starts one, instead of on the shared stack (each run costs the
# suite a minute or more: 01 took 70 s on the shared stack and 74 s alone, 2026-11-28). 04 runs on the
# shared stack only: its sink killed and restarted in a process with a JVM of its own is
# tests/test_faults.py's and test_sink.py's (alone it took 218 s of the suite's budget).
ALONE = ["01-pizzas-on-ice"]
SHARED = [p for p in NOTEBOOKS if p.stem not in ALONE]


def test_notebooks_are_committed_clean() -> None:
    assert NOTEBOOKS and SOLUTIONS
    for path in NOTEBOOKS + SOLUTIONS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), f"{path.name} has outputs"
        parameters = [c for c in code if "parameters" in c.metadata.get("tags", [])]
        assert len(parameters) == 1 and "workdir = None" in parameters[0].source, path.name
        assert "stack_at = None" in parameters[0].source, path.name
        assert nb.metadata.kernelspec.name == KERNEL, path.name


def test_the_workshop_track_ends_each_tutorial_in_exercises_with_their_solutions() -> None:
    assert [p.stem for p in SOLUTIONS] == TRACK
    agenda = (NOTEBOOKS[0].parent.parent / "docs" / "workshop.md").read_text()
    assert [agenda.index(f"notebooks/{name}.ipynb") for name in TRACK] == sorted(
        agenda.index(f"notebooks/{name}.ipynb") for name in TRACK), "docs/workshop.md gives the track in its order"
    for name in TRACK:
        nb = nbformat.read(NOTEBOOKS[0].parent / f"{name}.ipynb", as_version=4)
        exercises = [c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## Exercises")]
        assert len(exercises) == 1 and f"(solutions/{name}.ipynb)" in exercises[0].source, name
        asked = re.findall(r"^\d+\. \*\*", exercises[0].source, re.MULTILINE)
        answered = [c for c in nbformat.read(NOTEBOOKS[0].parent / "solutions" / f"{name}.ipynb", as_version=4).cells
                    if c.cell_type == "markdown" and re.match(r"## \d+\. ", c.source)]
        assert 2 <= len(asked) == len(answered) <= 3, name  # each exercise answered, with its prediction
        assert all("*Predict:*" in c.source and "*Answer:*" in c.source for c in answered), name


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


def test_the_engine_runs_the_kernel_quietly_over_ipc(kernel: str, tmp_path: Path,
                                                     capfd: pytest.CaptureFixture[str]) -> None:
    """Over TCP ipykernel warns on its stderr, which papermill's process shares (make notebooks' terminal)."""
    import papermill

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from ipykernel.kernelapp import IPKernelApp\nprint(IPKernelApp.instance().transport)")])
    nb.metadata.kernelspec = {"name": kernel, "display_name": "Python (sinklab)", "language": "python"}
    nbformat.write(nb, tmp_path / "in.ipynb")
    papermill.execute_notebook(str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"), kernel_name=kernel,
                               engine_name=ENGINE, progress_bar=False)
    out = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert [o.text.strip() for o in out.cells[0].outputs] == ["ipc"]
    assert "without encryption" not in capfd.readouterr().err


@pytest.fixture(scope="module")
def shared_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One stack for every notebook, as `make notebooks` starts it; stopped by PID at the end."""
    workdir = tmp_path_factory.mktemp("shared") / "stack"
    up = run_cli("stack", "up", "--workdir", str(workdir), "--spark-connect", "--schema-registry")
    stack_file = workdir / "stack.json"
    info = StackInfo.model_validate_json(stack_file.read_text()) if stack_file.exists() else None
    try:
        assert up.returncode == 0, up.stderr
        yield stack_file
    finally:
        if info is not None:
            stop_recorded(info)
        stop_leftovers(str(workdir))


def running_sinks(stack_file: Path) -> list[str]:
    """The sinks of the shared server's clients that run still (a notebook stops what it started)."""
    url = StackInfo.model_validate_json(stack_file.read_text()).connect_url
    names = requests.get(f"{url}/sinklab/sinks", timeout=10).json()
    return [n for n in names if requests.get(f"{url}/sinklab/sinks/{n}/status", timeout=10).json()["state"]
            == "RUNNING"]


# One worker runs them all, on its one shared stack (make test: --dist loadgroup).
@pytest.mark.spark
@pytest.mark.xdist_group("notebooks")
@pytest.mark.parametrize("path", SHARED, ids=[p.stem for p in SHARED])
def test_notebook_runs_and_shows_figures_on_the_shared_stack(path: Path, tmp_path: Path, kernel: str,
                                                             shared_stack: Path, executed: Path) -> None:
    run_on_the_shared_stack(path, tmp_path, kernel, shared_stack, executed)


# Each solution checks its answers with asserts: a solution that no longer holds fails here.
@pytest.mark.spark
@pytest.mark.xdist_group("notebooks")
@pytest.mark.parametrize("path", SOLUTIONS, ids=[f"solutions-{p.stem}" for p in SOLUTIONS])
def test_a_workshop_solution_runs_on_the_shared_stack(path: Path, tmp_path: Path, kernel: str,
                                                      shared_stack: Path) -> None:
    run_notebook(path, tmp_path, kernel, {"stack_at": str(shared_stack)}, figures=False)
    assert not running_sinks(shared_stack), f"{path.name} left sinks running on the shared server"


def run_on_the_shared_stack(path: Path, tmp_path: Path, kernel: str, shared_stack: Path, executed: Path) -> None:
    shutil.copy(run_notebook(path, tmp_path, kernel, {"stack_at": str(shared_stack)}), executed / path.name)
    assert not running_sinks(shared_stack), f"{path.name} left sinks running on the shared server"


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tutorials as the shared stack ran them, for the docs site."""
    return tmp_path_factory.mktemp("executed")


@pytest.mark.spark
@pytest.mark.xdist_group("notebooks")
@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.stem in ALONE], ids=ALONE)
def test_notebook_runs_and_shows_figures_on_a_stack_of_its_own(path: Path, tmp_path: Path, kernel: str,
                                                               executed: Path) -> None:
    shutil.copy(run_notebook(path, tmp_path, kernel, {}), executed / path.name)


@pytest.mark.spark
@pytest.mark.xdist_group("notebooks")
def test_notebook_01_runs_on_the_secure_stack_with_one_parameter_and_shows_no_secret(tmp_path: Path,
                                                                                   kernel: str) -> None:
    """``secure=True``: the same story with Kafka on SASL_SSL, the catalog behind OAuth2 and Connect behind
    a password; none of the stack's secrets is in any output."""
    from sinklab.security import properties
    from sinklab.stack import tls

    [path] = [p for p in NOTEBOOKS if p.stem == "01-pizzas-on-ice"]
    out = run_notebook(path, tmp_path, kernel, {"secure": True})
    secrets = properties((tmp_path / "stack" / tls.SECRETS_FILE).read_text())
    assert set(secrets) == set(tls.PASSWORDS)
    text = out.read_text()
    for name, secret in secrets.items():
        assert secret not in text, f"{name} in an output of {path.name}"


def run_notebook(path: Path, tmp_path: Path, kernel: str, extra: dict[str, object], figures: bool = True) -> Path:
    import papermill

    workdir = tmp_path / "stack"
    out = tmp_path / path.name
    started = time.monotonic()
    try:
        parameters = {"workdir": str(workdir), **SMALL.get(path.stem, {}), **extra}
        papermill.execute_notebook(str(path), str(out), parameters=parameters, kernel_name=kernel, engine_name=ENGINE,
                                   cwd=str(path.parent), progress_bar=False, execution_timeout=600)
    finally:
        left = stop_leftovers(str(workdir))  # the kernel's stack, if the notebook did not close it
    print(f"\n{path.name}: {time.monotonic() - started:.1f}s")
    assert not left, f"{path.name} left processes running: {left}"
    nb = nbformat.read(out, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    shown = [o for o in outputs if PLOTLY in o.get("data", {})]
    assert shown or not figures, f"{path.name} shows no plotly figure"
    assert all(fig["data"][PLOTLY]["data"] for fig in shown), f"{path.name} shows an empty figure"
    # Shown by nbconvert's HTML and GitHub too: a PNG beside every figure's JSON.
    assert all(PNG in fig["data"] for fig in shown), f"{path.name} has a figure without a picture"
    assert out.stat().st_size <= MAX_BYTES, f"{path.name} is {out.stat().st_size:,} bytes executed"
    assert not [o for o in outputs if o.output_type == "stream" and o.name == "stderr"], \
        f"{path.name} wrote to stderr: {[o.text for o in outputs if o.get('name') == 'stderr']}"
    for o in outputs:
        text = o.get("text", "") if o.output_type == "stream" else json.dumps(
            {k: v for k, v in o.get("data", {}).items() if k.startswith("text/")})
        found = NOISE.search(text)
        assert not found, f"{path.name}: {found.group(0)!r} in an output: {text[:300]}"
    return out


# Last of the group: the tutorials ran above (any that did not, as when this runs alone, run here: all
# eleven take about ten minutes, past the suite's per-test timeout).
@pytest.mark.spark
@pytest.mark.xdist_group("notebooks")
@pytest.mark.timeout(1800)
def test_the_docs_show_every_tutorial_executed_with_its_figures(tmp_path: Path, kernel: str, shared_stack: Path,
                                                               executed: Path) -> None:
    for path in NOTEBOOKS:
        if not (executed / path.name).exists():
            (tmp_path / path.stem).mkdir()
            run_on_the_shared_stack(path, tmp_path / path.stem, kernel, shared_stack, executed)
    built = build_site(executed, tmp_path / "site")
    assert built.returncode == 0, built.stderr
    for path in NOTEBOOKS:
        page = (tmp_path / "site" / "tutorials" / f"{path.stem}.html").read_text()
        pictures = re.findall(rf'<img src="({re.escape(path.stem)}/figure-\d+\.png)"', page)
        assert pictures, f"the page of {path.name} shows no figure"
        for picture in pictures:
            assert (tmp_path / "site" / "tutorials" / picture).read_bytes().startswith(b"\x89PNG"), picture
        # Each figure also carries its plotly JSON, which plotly.js (in the site) draws interactive.
        assert page.count('<script type="application/json">') == len(pictures), path.name
    assert (tmp_path / "site" / "js" / "plotly.min.js").stat().st_size > 1_000_000
