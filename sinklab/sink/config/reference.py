"""The documentation's key reference, made from the key table (``sinklab.sink.config.keys``).

    python -m sinklab.sink.config.reference            # rewrite the key blocks of docs/
    python -m sinklab.sink.config.reference --check    # exit 1 when they are out of date

Each block of a page between ``<!-- keys:begin NAME -->`` and ``<!-- keys:end NAME -->`` holds what
``reference_markdown`` makes of its keys. The docs site renders them again when it builds.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from sinklab.sink.config.keys import MAINTENANCE_KEYS, OWNERS, SINK_KEYS, Key

DOCS = Path(__file__).resolve().parents[3] / "docs"
BLOCKS: dict[str, Sequence[Key]] = {"sink": SINK_KEYS, "maintenance": MAINTENANCE_KEYS}
PAGES = {"sink": DOCS / "sink.md", "maintenance": DOCS / "maintenance.md"}  # where each block is


def reference_markdown(keys: Sequence[Key] = SINK_KEYS) -> str:
    """The keys as Markdown: a table per group, in the order they are declared."""
    groups: dict[str, list[Key]] = {}
    for key in keys:
        groups.setdefault(key.group, []).append(key)
    out = []
    for group, members in groups.items():
        out += [f"**{group}**", "", "| key | type | default | from | what it does |", "|---|---|---|---|---|"]
        for k in members:
            default = f"`{k.default_text}`" if k.default_text else ""
            doc = f"{k.doc} *Accepted, not used: {k.ignored}.*" if k.ignored else k.doc
            if k.older:
                doc += " Also read as Tabular's older spelling " + ", ".join(f"`{o}`" for o in k.older) + "."
            out.append(f"| `{k.name}` | {k.type} | {default} | {OWNERS[k.owner]} | {doc} |")
        out.append("")
    return "\n".join(out).rstrip("\n")


def render_blocks(text: str) -> str:
    """``text`` (a page) with each key block it has holding what ``reference_markdown`` makes of its keys."""
    for name, keys in BLOCKS.items():
        begin, end = f"<!-- keys:begin {name} -->", f"<!-- keys:end {name} -->"
        head, found, rest = text.partition(begin)
        if found:
            if end not in rest:
                raise ValueError(f"the block {begin} has no {end}")
            text = f"{head}{begin}\n{reference_markdown(keys)}\n{end}{rest.partition(end)[2]}"
    return text


def main(argv: Sequence[str]) -> int:
    stale = []
    for path in sorted(set(PAGES.values())):
        text = path.read_text()
        rendered = render_blocks(text)
        if rendered != text:
            stale.append(path)
            if "--check" not in argv:
                path.write_text(rendered)
    if stale and "--check" in argv:
        print(f"{', '.join(map(str, stale))}: the key reference is out of date; run "
              "python -m sinklab.sink.config.reference", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
