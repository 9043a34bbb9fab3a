"""Every link and every file path the README and docs cite exists: relative links resolve to
a file (and, with `#anchor`, to a heading of it), and the repository paths they quote in
backticks (`crates/…`, `tests/…`, …) name files or directories that are there. A page that
points at a moved test or a renamed section fails here instead of misleading a reader."""
import pathlib
import re

import pytest

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")
TOP = ("crates/", "tests/", "bench/", "docs/", "python/", "deploy/", "docker/", "fuzz/", ".ci/")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: pathlib.Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    text = FENCE.sub("", page.read_text())
    bad = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_relative_to(root):
            continue  # ../shared/…: the team's references, outside the repository
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading with that anchor in {dest.name}")
    return bad


def missing_paths(page: pathlib.Path) -> list[str]:
    bad = []
    for code in CODE.findall(page.read_text()):
        word = code.split()[0] if code.split() else ""
        word = word.split(":")[0].rstrip(".,;)")
        if not word.startswith(TOP) or any(c in word for c in "*<>{}…$"):
            continue
        if not (ROOT / word).exists():
            bad.append(word)
    return sorted(set(bad))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve(page):
    bad = broken_links(page)
    assert not bad, f"{page.name}: " + "; ".join(bad)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_quoted_paths_exist(page):
    bad = missing_paths(page)
    assert not bad, f"{page.name} names paths that do not exist: " + ", ".join(bad)


def test_the_checks_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[a](page.md#title) [b](page.md#nope) [c](gone.md)\n")
    assert broken_links(page, tmp_path.resolve()) == [
        "page.md#nope: no heading with that anchor in page.md",
        "gone.md: no such file",
    ]
    assert slug("Deletes: what tombstone reclamation leaves open") == (
        "deletes-what-tombstone-reclamation-leaves-open"
    )
    assert slug("Acknowledged writes (durability)") == "acknowledged-writes-durability"
