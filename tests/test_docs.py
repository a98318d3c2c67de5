"""The documentation site (`make docs`): it builds strictly (no broken link or anchor), its key reference
is the key table, and a broken link fails the build; every figure a page quotes is the bench result it
cites (bench/figures.toml). The tutorials' pages with their figures are checked where the tutorials run
(tests/test_notebooks.py). No stack."""

from __future__ import annotations

import html
import json
import re
import shutil
import tomllib
from pathlib import Path

from helpers import ROOT, build_site

from sinklab.sink.config import keys


def test_the_site_builds_and_its_reference_is_the_key_table(tmp_path: Path) -> None:
    # The committed tutorials stand in for executed ones: their pages then have no outputs.
    built = build_site(ROOT / "notebooks", tmp_path / "site")
    assert built.returncode == 0, built.stderr
    site = tmp_path / "site"
    pages = {p.stem for p in site.glob("*.html")}
    assert {"index", "getting-started", "requirements", "workshop", "glossary", "stack", "sink", "connect",
            "reliability", "protocol", "maintenance", "performance", "bench", "layout", "dead-letters", "fresh-reads",
            "changelog"} <= pages
    assert len(list((site / "tutorials").glob("*.html"))) == len(list((ROOT / "notebooks").glob("*.ipynb")))
    reference = (site / "sink.html").read_text() + (site / "maintenance.html").read_text()
    for key in keys.KEYS:
        row = re.search(rf"<tr>\s*<td><code>{re.escape(key.name.replace('<', '&lt;').replace('>', '&gt;'))}"
                        rf"</code></td>\s*<td>([^<]*)</td>\s*<td>(.*?)</td>", reference)
        assert row, f"{key.name} is not in the site's reference"
        default = f"<code>{key.default_text}</code>" if key.default_text else ""
        assert html.unescape(row.group(1)) == key.type, key.name
        shown = re.sub(r"<code>(.*)</code>", lambda m: f"<code>{html.unescape(m.group(1))}</code>", row.group(2))
        assert shown == default, key.name
    # The front page's links into docs/ lead to the site's pages.
    assert 'href="getting-started.html"' in (site / "index.html").read_text()
    # Each tutorial's first cell links the glossary (../docs/glossary.md, as GitHub reads it), and so does its page.
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        first = json.loads(notebook.read_text())["cells"][0]
        assert first["cell_type"] == "markdown" and "](../docs/glossary.md" in "".join(first["source"]), notebook.name
        assert 'href="../glossary.html' in (site / "tutorials" / f"{notebook.stem}.html").read_text(), notebook.name


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    # The tutorials alone: a kernel running one of them keeps its sockets in notebooks/ meanwhile.
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copytree(ROOT / "notebooks", root / "notebooks", ignore=lambda _, names: [
        n for n in names if not n.endswith(".ipynb")])
    for part in ("mkdocs.yml", "README.md", "CHANGELOG.md", "bench/README.md"):
        (root / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / part, root / part)
    page = root / "docs" / "layout.md"
    page.write_text(page.read_text() + "\nSee [the missing page](missing.md).\n")
    built = build_site(root / "notebooks", tmp_path / "site", root)
    assert built.returncode != 0
    assert "missing.md" in built.stderr


# The figures docs/ quotes from bench/README.md (bench/figures.toml says how): `<!-- figure: KEY -->` then the value.
MARKER = re.compile(r"<!-- figure: ([a-z0-9_]+) -->")
# Pages whose every measured figure is quoted through bench/figures.toml; what a measured figure looks like
# there: a ratio (0.83x, 3.7–4.9x) or seconds with decimals (1.40 s, 0.71 / 1.71 s). Settings are whole
# numbers (a 1 s interval, 5,000 events/s) and pass.
QUOTING = ("performance.md", "fresh-reads.md", "dashboard.md")
MEASURED = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:[–-]\d+(?:\.\d+)?)?x\b|(?<![\w.])\d+\.\d+(?:[–-]\d+\.\d+)? s\b")
CODE = re.compile(r"^```.*?^```|`[^`]*`", re.MULTILINE | re.DOTALL)


def _flat(text: str) -> str:
    """Text as it reads: bold and line breaks left out."""
    return " ".join(text.replace("**", "").split())


def _bench_section(readme: str, title: str) -> str | None:
    """The part of bench/README.md under the heading ``title``, to the next heading of its level or above."""
    lines, fenced, level, found = readme.split("\n"), False, 0, []
    for line in lines:
        fenced = fenced != line.startswith("```")
        heading = None if fenced else re.match(r"(#+) (.*)", line)
        if heading and level and len(heading.group(1)) <= level:
            break
        if heading and not level and heading.group(2).strip() == title:
            level = len(heading.group(1))
        if level:
            found.append(line)
    return "\n".join(found) if found else None


def _quoted_end(text: str, start: int, value: str) -> int | None:
    """Where ``value`` ends in ``text`` from ``start``, word for word (line breaks may fall between words)."""
    pos = start
    words = value.split()
    for i, word in enumerate(words):
        while pos < len(text) and text[pos].isspace() and i:
            pos += 1
        if not text.startswith(word, pos):
            return None
        pos += len(word)
        follows = text[pos:pos + 1]
        if i < len(words) - 1 and not follows.isspace():
            return None
        if i == len(words) - 1 and word[-1].isalnum() and follows.isalnum():
            return None
    return pos


def figure_problems(root: Path) -> list[str]:
    """What does not agree between the figures docs/ quotes, bench/figures.toml and bench/README.md."""
    figures = tomllib.loads((root / "bench" / "figures.toml").read_text())
    readme = (root / "bench" / "README.md").read_text()
    problems: list[str] = []
    for key, figure in figures.items():
        section = _bench_section(readme, figure["section"])
        context = _flat(figure.get("context", figure["value"]))
        if section is None:
            problems.append(f"{key}: bench/README.md has no heading {figure['section']!r}")
        elif _flat(figure["value"]) not in context:
            problems.append(f"{key}: its value {figure['value']!r} is not in its context {context!r}")
        elif context not in _flat(section):
            problems.append(f"{key}: bench/README.md, {figure['section']!r}, does not say {context!r} "
                            f"(measured again? change bench/figures.toml and the pages that quote {key})")
    quoted: set[str] = set()
    for page in sorted((root / "docs").glob("*.md")):
        text, name = page.read_text(), f"docs/{page.name}"
        masked = CODE.sub(lambda m: " " * len(m.group(0)), text)
        for marker in MARKER.finditer(text):
            key = marker.group(1)
            quoted.add(key)
            if not text[text.rfind("\n", 0, marker.start()) + 1:marker.start()].strip():
                problems.append(f"{name}: {key}'s marker starts a line, where Markdown takes it for a block of HTML")
            if key not in figures:
                problems.append(f"{name}: quotes {key}, which bench/figures.toml does not have")
                continue
            value = figures[key]["value"]
            end = _quoted_end(text, marker.end(), value)
            if end is None:
                says = _flat(text[marker.end():marker.end() + len(value) + 40])[:len(value)]
                problems.append(f"{name}: quotes {key} as {says!r}, where bench/README.md measured {value!r} "
                                f"({figures[key]['run']}; {figures[key]['section']})")
                end = marker.end() + len(value)  # reported once: not again as a figure without a marker
            masked = masked[:marker.start()] + " " * (end - marker.start()) + masked[end:]
        if page.name in QUOTING:
            for figure in MEASURED.finditer(masked):
                line = masked.count("\n", 0, figure.start()) + 1
                problems.append(f"{name}:{line}: {figure.group(0)!r} is quoted through no figure of bench/figures.toml")
    problems += [f"{key}: no page of docs/ quotes it" for key in figures if key not in quoted]
    return problems


def test_every_quoted_figure_is_the_bench_result_it_cites() -> None:
    """Each figure a page of docs/ quotes (`<!-- figure: KEY -->` and its value) is the value of KEY in
    bench/figures.toml, which is in the run and section of bench/README.md it names; every measured
    figure of the performance, fresh-reads and dashboard pages goes through one. When it does not, the
    message names the key, the page, what the page says and what was measured
    (`test_a_figure_quoted_differently_is_reported_with_its_key_and_page` shows one)."""
    assert figure_problems(ROOT) == []


def test_a_figure_quoted_differently_is_reported_with_its_key_and_page(tmp_path: Path) -> None:
    """docs/performance.md quoting Apache's p99 at a 1 s interval as 3.0 s, where bench/README.md measured
    5.01 s (the second full run), fails the check above and says where; so does a figure measured again
    in bench/README.md without bench/figures.toml, and a measured figure quoted without a marker."""
    for part in ("docs", "bench/README.md", "bench/figures.toml"):
        (tmp_path / part).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if part == "docs" else shutil.copy)(ROOT / part, tmp_path / part)
    assert figure_problems(tmp_path) == []
    page = tmp_path / "docs" / "performance.md"
    text = page.read_text()
    quoted = "<!-- figure: apache_p99_1s -->5.01 s"
    assert quoted in text
    page.write_text(text.replace(quoted, "<!-- figure: apache_p99_1s -->3.0 s", 1))
    [problem] = figure_problems(tmp_path)
    assert "docs/performance.md" in problem and "apache_p99_1s" in problem and "'5.01 s'" in problem

    page.write_text(text)
    readme = tmp_path / "bench" / "README.md"
    readme.write_text(readme.read_text().replace("(Apache's sink 5.01 s)", "(Apache's sink 4.87 s)"))
    problems = figure_problems(tmp_path)
    assert any(p.startswith("apache_p99_1s:") for p in problems), problems

    shutil.copy(ROOT / "bench" / "README.md", readme)
    page.write_text(text + "\nApache's sink took 4.87 s there.\n")
    [problem] = figure_problems(tmp_path)
    assert problem.startswith("docs/performance.md:") and "'4.87 s'" in problem
