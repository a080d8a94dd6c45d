"""Every ```python block of README.md and docs/**/*.md runs.

Each block is one test, executed on its own (a fresh namespace, a temporary working directory,
``torch._dynamo.reset()`` after it), so a page's examples cannot depend on each other. A block
that cannot run here (it needs torchrun, several ranks or a device) carries the marker
``<!-- snippet: skip (why) -->`` on the line before its fence; it is reported as a skip with
that reason, and :func:`test_skips_are_few_and_say_why` keeps them few.
"""
from __future__ import annotations

import glob
import os
import types
import sys
import re
from typing import List, NamedTuple, Optional

import pytest
import torch

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
SKIP = re.compile(r"<!--\s*snippet:\s*skip\s*\((?P<why>[^)]+)\)\s*-->")
MAX_SKIPS = 3


class Snippet(NamedTuple):
    page: str      # relative to the checkout's root
    line: int      # 1-based line of the opening fence
    code: str
    skip: Optional[str]

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> List[str]:
    found = [os.path.join(ROOT, "README.md")]
    found += sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    return found


def extract(path: str) -> List[Snippet]:
    """The ```python blocks of one Markdown file, with the skip marker written before each."""
    lines = open(path, encoding="utf-8").read().splitlines()
    rel = os.path.relpath(path, ROOT)
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start, body = i, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise AssertionError(f"{rel}:{start + 1}: a ```python block is never closed")
            prev = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            marker = SKIP.search(prev)
            out.append(Snippet(rel, start + 1, "\n".join(body) + "\n",
                               marker.group("why") if marker else None))
        i += 1
    return out


SNIPPETS = [s for p in pages() for s in extract(p)]


def test_snippets_are_found():
    assert any(s.page == "README.md" for s in SNIPPETS)
    assert len({s.page for s in SNIPPETS}) >= 5, sorted({s.page for s in SNIPPETS})


def test_skips_are_few_and_say_why():
    skipped = [s for s in SNIPPETS if s.skip]
    assert len(skipped) <= MAX_SKIPS, [(s.id, s.skip) for s in skipped]
    assert all(len(s.skip.split()) >= 2 for s in skipped), [(s.id, s.skip) for s in skipped]


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.id for s in SNIPPETS])
def test_snippet_runs(snippet: Snippet, tmp_path, monkeypatch):
    if snippet.skip:
        pytest.skip(f"{snippet.id}: {snippet.skip}")
    monkeypatch.chdir(tmp_path)
    code = compile(snippet.code, os.path.join(ROOT, snippet.page) + f" (block at line {snippet.line})",
                   "exec")
    # the snippet runs as a module of its own, importable by name (torch 2.11's Dynamo imports
    # the module a custom op's function was defined in)
    module = types.ModuleType("__docs_snippet__")
    monkeypatch.setitem(sys.modules, "__docs_snippet__", module)
    try:
        exec(code, module.__dict__)
    finally:
        torch._dynamo.reset()
