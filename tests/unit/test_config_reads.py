"""Library code reads configuration one way: ``config.get("section.option")`` — the dotted path
the pipeline table declares (``grep`` finds every reader of an option); the pipeline's own
bookkeeping (which stages run, which options take effect) uses ``config.peek(path)``, which is
not a read. ``option.raw`` and ``_raw`` stay inside ``configs/``."""
import os
import re

import torchair_dist

ROOT = os.path.dirname(torchair_dist.__file__)
ALLOWED: dict = {}


def test_library_code_reads_options_through_get():
    found = {}
    for dirpath, _, files in os.walk(ROOT):
        rel_dir = os.path.relpath(dirpath, ROOT)
        if rel_dir.split(os.sep)[0] == "configs":
            continue
        for f in files:
            if not f.endswith(".py"):
                continue
            rel = os.path.normpath(os.path.join(rel_dir, f))
            hits = [n for n, line in enumerate(open(os.path.join(dirpath, f)), 1)
                    if re.search(r"\.(_raw|raw)\b", line) and not line.lstrip().startswith("#")]
            if len(hits) > ALLOWED.get(rel, 0):
                found[rel] = hits
    assert not found, f"read options with config.get(path), not .raw: {found}"
