"""The README and docs/*.md hold together: every relative link reaches an existing file, every `#anchor` an
existing heading of its target (GitHub's slugs), and the README stays a short start (at most 250 lines)."""

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250

FENCE = re.compile(r"^(```|~~~)")
# [text](target) and ![alt](target); the target ends at whitespace (an optional "title" follows) or ")"
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`[^`]*`")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a `# comment` in a bash block is no heading, `[x](y)` there no link)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text without markup, lower-cased, every character that is not a
    letter, mark, digit, connector (`_`), space or hyphen dropped, and spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays, its target goes
    kept = []
    for char in text.lower():
        category = unicodedata.category(char)
        if char in " -" or category[0] in "LMN" or category == "Pc":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor in a Markdown file; a repeated slug gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    result = set()
    for line in prose_lines(text):
        match = HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def relative_links(text: str) -> list[str]:
    """Link targets that point into the repository: no scheme (http:, mailto:...), code spans skipped."""
    prose = INLINE_CODE.sub("", "\n".join(prose_lines(text)))  # a link's text may wrap onto the next line
    return [t for t in LINK.findall(prose) if not re.match(r"^[a-z][a-z0-9+.-]*:", t, flags=re.IGNORECASE)]


def broken_links(document: Path) -> list[str]:
    """Each link of `document` whose file is missing or whose anchor names no heading of that file, with why."""
    broken = []
    for target in relative_links(document.read_text()):
        path, _, anchor = target.partition("#")
        file = (document.parent / path).resolve() if path else document
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            broken.append(f"{target}: no heading with the anchor #{anchor} in {file.name}")
    return broken


def test_slugs_follow_githubs_rules():
    assert github_slug("The dataset index: `vitviz index`") == "the-dataset-index-vitviz-index"
    assert github_slug("bench_precision.py: fp32 or bf16, decided on the machine") == (
        "bench_precisionpy-fp32-or-bf16-decided-on-the-machine"
    )
    assert github_slug("Text towers: prompts as classes (CLIP, SigLIP)") == "text-towers-prompts-as-classes-clip-siglip"
    assert github_slug("The 2025-26 backbones") == "the-2025-26-backbones"
    assert github_slug("Über [the docs](docs/x.md)") == "über-the-docs"


def test_repeated_headings_and_code_comments():
    text = "# Setup\n\n```bash\n# not a heading\n```\n\n## Setup\n### Setup\n"
    assert anchors(text) == {"setup", "setup-1", "setup-2"}


def test_the_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Real heading\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md) [ok too](other.md#real-heading) [web](https://example.com/x) `[code](nowhere.md)`\n"
        "![gone](missing.png) [bad anchor](other.md#fake) [self](#top) [a wrapped\nlink](nowhere.md)\n\n"
        "```\n[in a block](nowhere.md)\n```\n"
        "## Top\n"
    )
    assert broken_links(page) == [
        f"missing.png: no file {tmp_path / 'missing.png'}",
        "other.md#fake: no heading with the anchor #fake in other.md",
        f"nowhere.md: no file {tmp_path / 'nowhere.md'}",
    ]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(document):
    assert broken_links(document) == []


def test_the_readme_links_every_document_of_docs():
    linked = {
        (ROOT / target.partition("#")[0]).resolve() for target in relative_links((ROOT / "README.md").read_text())
    }
    assert [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked] == []


def test_the_readme_is_a_short_start():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move details into docs/"
