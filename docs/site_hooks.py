"""MkDocs hooks: the pages the site makes from the repository when it builds (`make docs`).

- ``index.md`` is the README, ``bench.md`` bench/README.md, ``changelog.md`` CHANGELOG.md;
- the key blocks of every page are rendered from the key table (``sinklab.sink.config.reference``), so the
  site's reference cannot drift from the code whatever the committed page holds;
- ``tutorials/NN-….md`` are the tutorials as executed (``make notebooks`` writes them to
  ``.sinklab/notebooks``; ``SINKLAB_EXECUTED_NOTEBOOKS`` names another folder): markdown, code, its
  printed output, and each figure as its PNG, which plotly.js (shipped with plotly, copied into the
  site) turns into the interactive figure wherever the page runs JavaScript;
- links out of docs/ become links into the site where the file is one of its pages, else the path as
  text (a source file is read in the repository, not on the site).
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

import nbformat
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

from sinklab.sink.config.reference import render_blocks

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PLOTLY = "application/vnd.plotly.v1+json"
PNG = "image/png"
# Repository files that are pages of the site, as links from the repository root name them.
PAGES = {"README.md": "index.md", "bench/README.md": "bench.md", "CHANGELOG.md": "changelog.md",
         **{f"notebooks/{p.name}": f"tutorials/{p.stem}.md" for p in NOTEBOOKS}}
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
FENCE = re.compile(r"(^```.*?^```)", re.MULTILINE | re.DOTALL)


def executed_folder() -> Path:
    return Path(os.environ.get("SINKLAB_EXECUTED_NOTEBOOKS") or ROOT / ".sinklab" / "notebooks")


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    config.nav.append({"Tutorials": [f"tutorials/{p.stem}.md" for p in NOTEBOOKS]})  # type: ignore[union-attr]
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    def add(uri: str, content: str | bytes) -> None:
        files.append(File.generated(config, uri, content=content))

    for path, page in PAGES.items():
        if path.endswith(".md"):
            add(page, (ROOT / path).read_text())
    import plotly

    add("js/plotly.min.js", (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes())
    folder = executed_folder()
    missing = [p.name for p in NOTEBOOKS if not (folder / p.name).exists()]
    if missing:
        raise SystemExit(f"the docs show the tutorials as executed, and {folder} lacks {', '.join(missing)}: "
                         f"run `make notebooks` (or set SINKLAB_EXECUTED_NOTEBOOKS)")
    for path in NOTEBOOKS:
        page, pictures = tutorial_page(nbformat.read(folder / path.name, as_version=4), path.stem)
        add(f"tutorials/{path.stem}.md", page)
        for name, data in pictures.items():
            add(f"tutorials/{path.stem}/{name}", data)
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if page.file.src_uri.startswith("tutorials/"):
        return markdown  # its links were made the site's as it was made (tutorial_page): relinked twice, they break
    pages = {page: path for path, page in PAGES.items()}
    source = pages.get(page.file.src_uri, f"docs/{page.file.src_uri}")
    return relink(render_blocks(markdown), source, page.file.src_uri)


def relink(markdown: str, source: str, uri: str) -> str:
    """Each relative link of ``source`` (a repository path), now the page ``uri`` of the site."""
    here = Path(source).parent
    depth = uri.count("/")

    def fix(m: re.Match[str]) -> str:
        bang, text, target = m.groups()
        if re.match(r"^[a-z]+:|^#|^mailto:", target):
            return m.group(0)
        path, _, anchor = target.partition("#")
        resolved = os.path.normpath(here / path).replace(os.sep, "/") if path else source
        if resolved.startswith("docs/"):
            site = resolved.removeprefix("docs/")
        elif resolved in PAGES:
            site = PAGES[resolved]
        else:
            return f"{text} (`{resolved}`)" if text and not bang else f"`{resolved}`"
        return f"{bang}[{text}]({'../' * depth}{site}{'#' + anchor if anchor else ''})"

    # Code blocks are left as they are: ``f[i](x)`` is Python, not a link.
    parts = FENCE.split(markdown)
    return "".join(part if FENCE.fullmatch(part) else LINK.sub(fix, part) for part in parts)


def tutorial_page(nb: Any, stem: str) -> tuple[str, dict[str, bytes]]:
    """The executed notebook as a page (markdown) and its figures' files."""
    out: list[str] = []
    pictures: dict[str, bytes] = {}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            out.append(relink(cell.source, f"notebooks/{stem}.ipynb", f"tutorials/{stem}.md"))
            continue
        tags = cell.metadata.get("tags", [])
        if cell.cell_type != "code" or "injected-parameters" in tags or not cell.source.strip():
            continue
        out.append(f"```python\n{cell.source}\n```")
        for output in cell.get("outputs", []):
            out.extend(_output(output, stem, pictures))
    return "\n\n".join(out) + "\n", pictures


def _output(output: Any, stem: str, pictures: dict[str, bytes]) -> list[str]:
    if output.output_type == "stream":
        return [_text(output.text)] if output.text.strip() else []
    if output.output_type == "error":
        return [_text("\n".join(output.traceback))]
    data = output.get("data", {})
    if PNG in data:
        name = f"figure-{len(pictures) + 1}.png"
        pictures[name] = base64.b64decode(data[PNG])
        img = f'<img src="{stem}/{name}" alt="figure {len(pictures)} of {stem}">'
        if PLOTLY not in data:
            return [f'<div class="sinklab-figure">{img}</div>']
        figure = json.dumps(data[PLOTLY]).replace("</", "<\\/")  # no "</script>" inside the script
        return [f'<div class="sinklab-figure">{img}<script type="application/json">{figure}</script></div>']
    if "text/html" in data:
        return [f'<div class="sinklab-output">\n{data["text/html"]}\n</div>']
    if "text/markdown" in data:
        return [data["text/markdown"]]
    if "text/plain" in data:
        return [_text(data["text/plain"])]
    return []


def _text(text: str) -> str:
    return f"```text\n{text.rstrip()}\n```"
