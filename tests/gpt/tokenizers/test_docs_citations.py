"""docs/tokenizers.md cites code as `path: name` and tests as `path::test`; each must exist."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "tokenizers.md"
CITATION = re.compile(r"`((?:gpt|tests)/[\w/]+\.py)(?:: (\w+)|::(\w+))`")


def citations() -> list[tuple[str, str]]:
    return [(m[1], m[2] or m[3]) for m in CITATION.finditer(DOC.read_text(encoding="utf-8"))]


def test_the_doc_cites_code_and_tests():
    cited = citations()
    assert len(cited) >= 30
    assert any(path.startswith("tests/") for path, _ in cited)


def test_every_citation_names_something_that_exists():
    missing = []
    for path, name in citations():
        file = REPO / path
        source = file.read_text(encoding="utf-8") if file.exists() else ""
        defined = re.search(rf"^\s*(?:def|class) {name}\b|^{name}\s*[:=]", source, re.M)
        if not defined:
            missing.append(f"{path}: {name}")
    assert missing == []
