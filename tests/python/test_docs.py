"""The README's and docs' examples run and print what the docs say (docs_harness.py), and
the harness itself fails on an example whose output is wrong."""
import pathlib

import pytest

from conftest import ROOT, binary
from docs_harness import Runner, blocks, matches

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def run_page(path: pathlib.Path) -> tuple[int, list]:
    found = blocks(path)
    runner = Runner(binary())
    try:
        failures = [f for b in found for f in runner.run(b)]
    finally:
        runner.close()
    return len(found), failures


def test_wildcards():
    assert matches(["a", "...", "z"], ["a", "b", "c", "z"])
    assert matches(["a", "...", "z"], ["a", "z"])
    assert matches(["v = ...1"], ["v = 41"])
    assert not matches(["a"], ["a", "b"])
    assert not matches([], ["x"])
    assert not matches(["v = 1..."], ["w = 1"])


def test_a_wrong_example_fails(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "A counter:\n\n```console\n$ latticekv put n 5 --type counter\n5\n"
        "$ latticekv get n\n6\n```\n\n"
        "```pycon\n>>> 1 + 1\n3\n```\n\n"
        "<!-- docs-test: skip, not an example -->\n```console\n$ false\nnever\n```\n"
    )
    ran, failures = run_page(page)
    assert ran == 2, "the skipped block ran, or a block was missed"
    assert [f.command for f in failures] == ["latticekv get n", "python session"], failures
    assert "5" in failures[0].got


def test_a_right_example_passes(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```console\n$ latticekv put n 5 --type counter\n5\n$ latticekv get n\n5\n"
        "$ latticekv status\n...\n```\n\n```pycon\n>>> 1 + 1\n2\n```\n"
    )
    assert run_page(page) == (2, [])


def test_a_skip_needs_a_reason(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- docs-test: skip -->\n```console\n$ true\n```\n")
    with pytest.raises(ValueError):
        blocks(page)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_examples(page):
    ran, failures = run_page(page)
    assert not failures, "\n\n".join(map(str, failures))


def rust_blocks(path: pathlib.Path) -> list[str]:
    text, out, inside = path.read_text().splitlines(), [], None
    for line in text:
        if inside is None and line.startswith("```rust"):
            inside = []
        elif inside is not None and line.startswith("```"):
            out.append("\n".join(inside))
            inside = None
        elif inside is not None:
            inside.append(line)
    return out


def squeeze(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def test_rust_examples_are_compiled():
    # crates/client/examples/docs.rs holds every `rust` block verbatim; `cargo test` builds it.
    compiled = squeeze((ROOT / "crates/client/examples/docs.rs").read_text())
    joined = "\n".join(compiled)
    missing = [f"{page.name}:\n{block}" for page in PAGES for block in rust_blocks(page)
               if "\n".join(squeeze(block)) not in joined]
    assert not missing, "not in crates/client/examples/docs.rs:\n\n" + "\n\n".join(missing)


def test_the_getting_started_examples_are_tested():
    # The README's sessions must stay runnable examples, not slip back into plain `sh`.
    assert len(blocks(ROOT / "README.md")) >= 3
