"""The documentation site (`make docs`): it builds strictly (no broken link or anchor), its key reference
is the key table, and a broken link fails the build. The tutorials' pages with their figures are
checked where the tutorials run (tests/test_notebooks.py). No stack."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

from helpers import ROOT, build_site

from sinklab.sink.config import keys


def test_the_site_builds_and_its_reference_is_the_key_table(tmp_path: Path) -> None:
    # The committed tutorials stand in for executed ones: their pages then have no outputs.
    built = build_site(ROOT / "notebooks", tmp_path / "site")
    assert built.returncode == 0, built.stderr
    site = tmp_path / "site"
    pages = {p.stem for p in site.glob("*.html")}
    assert {"index", "getting-started", "stack", "sink", "connect", "reliability", "protocol", "maintenance",
            "performance", "bench", "layout", "dead-letters", "fresh-reads", "changelog"} <= pages
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


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    for part in ("docs", "notebooks"):
        shutil.copytree(ROOT / part, root / part)
    for part in ("mkdocs.yml", "README.md", "CHANGELOG.md", "bench/README.md"):
        (root / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / part, root / part)
    page = root / "docs" / "layout.md"
    page.write_text(page.read_text() + "\nSee [the missing page](missing.md).\n")
    built = build_site(root / "notebooks", tmp_path / "site", root)
    assert built.returncode != 0
    assert "missing.md" in built.stderr
