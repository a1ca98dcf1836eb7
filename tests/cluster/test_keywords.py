"""The fixed strings the login node searches whole logs for (``grep -F``) before it tries
the failure catalog's patterns: every line a pattern matches holds one of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from cluster.watching.collect_remote import GENERIC_ERROR_RE
from cluster.watching.diagnosis import CATALOG
from cluster.watching.evidence import scan_patterns
from cluster.watching.keywords import MIN_KEYWORD, keywords

CORPUS = Path(__file__).parent / "data" / "corpus"
PATTERNS = [*scan_patterns(CATALOG), GENERIC_ERROR_RE]


def corpus_lines() -> list[str]:
    samples = yaml.safe_load((CORPUS / "corpus.yaml").read_text())
    texts = [s.get("text") or (CORPUS / s["file"]).read_text() for s in samples]
    texts += [p.read_text() for p in (Path(__file__).parent / "data" / "failures").glob("*.*")]
    return [line for text in texts for line in text.splitlines()]


def test_the_catalog_reduces_to_fixed_strings() -> None:
    found = keywords(PATTERNS)
    assert found is not None and all(len(k) >= MIN_KEYWORD for k in found)
    assert all(k == k.lower() for k in found)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_matching_corpus_line_holds_a_keyword(pattern: str) -> None:
    words = keywords([pattern])
    assert words is not None
    compiled = re.compile(pattern, re.IGNORECASE)
    for line in corpus_lines():
        if compiled.search(line):
            assert any(w in line.lower() for w in words), (pattern, line)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("CUDA out of memory", ["cuda out of memory"]),
        (r"\b(?:torch|cuda)\.OutOfMemoryError\b", [".outofmemoryerror"]),
        (r"(?:ModuleNotFoundError|ImportError): ", ["importerror", "modulenotfounderror"]),
        (r"(?:ab|x)yz+", None),  # the best it can do is "yz" (too short to be worth it)
        (r"\d+: ", None),
        (r"[", None),
    ],
)
def test_keywords_of_one_pattern(pattern: str, expected: list[str] | None) -> None:
    assert keywords([pattern]) == expected


@given(st.text(alphabet="abcXYZ .:-[]()", max_size=40), st.sampled_from(PATTERNS))
def test_a_match_anywhere_in_a_line_holds_a_keyword(noise: str, pattern: str) -> None:
    """Lines built around a corpus match (noise on either side) still hold a keyword."""
    compiled = re.compile(pattern, re.IGNORECASE)
    words = keywords([pattern]) or []
    for line in corpus_lines()[:400]:
        if (m := compiled.search(line)) is not None:
            text = noise + m.group(0) + noise
            if compiled.search(text):
                assert any(w in text.lower() for w in words), (pattern, text)
            break
