#!/usr/bin/python3
"""Regenerates the status and tests columns of docs/FEATURES.md from the tests.

Usage: scripts/features.py [--check]

Every Rust test function (`#[test] fn name`) under transport/, device/, tests/,
pci/ and fuzz/ is collected; a feature ID in its name (`op_09_...` or `wf06_...`
for OP-09 and WF-06, several per name allowed) makes it one of that row's
tests. Each table row of docs/FEATURES.md then gets:

  status  `tested` when at least one test names the row, else `no test`; a
          hand-written `partial: why` is kept while the row has a test (a
          partial row is a tested one that leaves part of the row out);
  tests   the row's tests, by file.

The ID, behaviour (with its hand-written notes) and tier columns and all text
outside the tables are kept as they are. The script refuses (exit 1, file not
written) when a test name carries an ID the checklist does not have, or a
hand-written note cites a test (`xx_nn_...`, `xxnn_...`, or such a prefix with
`*`) that does not exist: a row cannot claim a test that is not there.

--check: writes nothing; exit 1 when the file is not what the script would
write (run by the fmt stage of scripts/test.sh).
"""

import fnmatch
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FEATURES = os.path.join(ROOT, "docs", "FEATURES.md")
SOURCES = ["transport", "device", "tests", "pci", "fuzz"]
SKIP_DIRS = {"target", "vendor", "corpus", "artifacts", ".git"}

PREFIXES = "wf|op|or|rl|pv|qs|mp|cq|sr|ae|ad"
# An ID in a test name: its prefix, an optional underscore, two digits, each
# end at an underscore or the name's end.
NAME_ID = re.compile(r"(?:^|_)(%s)_?(\d{2})(?=_|$)" % PREFIXES)
TEST_FN = re.compile(
    r"#\[test\]\s*(?:(?://[^\n]*|#\[[^\]]*\])\s*)*(?:pub(?:\([a-z]+\))?\s+)?fn\s+([A-Za-z0-9_]+)"
)
# A test name cited in a hand-written note: a backticked name carrying an ID.
CITED = re.compile(r"`([a-z][a-z0-9_]*\*?)`")
ROW = re.compile(r"^\| ([A-Z]{2}-\d{2}) \|")
OLD_HEADER = "| ID | behaviour | tier |"
HEADER = "| ID | behaviour | tier | status | tests |"
SEPARATOR = "|---|---|---|---|---|"


def collect_tests():
    """{test name: [files]} over the sources (paths relative to the root)."""
    tests = {}
    for top in SOURCES:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for f in sorted(filenames):
                if not f.endswith(".rs"):
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
                rel = os.path.relpath(path, ROOT)
                for name in TEST_FN.findall(text):
                    tests.setdefault(name, []).append(rel)
    return tests


def ids_of(name):
    return ["%s-%s" % (p.upper(), n) for p, n in NAME_ID.findall(name)]


def split_row(line):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 3:
        return cells[0], cells[1], cells[2], ""
    if len(cells) == 5:
        return cells[0], cells[1], cells[2], cells[3]
    raise ValueError("a row of 3 or 5 cells: %s" % line)


def tests_cell(names, tests):
    by_file = {}
    for n in names:
        for f in tests[n]:
            by_file.setdefault(f, []).append(n)
    parts = []
    for f in sorted(by_file):
        parts.append("`%s`: %s" % (f, ", ".join("`%s`" % n for n in sorted(by_file[f]))))
    return "; ".join(parts)


def render(text, tests, errors):
    rows = {m.group(1) for m in map(ROW.match, text.splitlines()) if m}
    by_id = {}
    for name in sorted(tests):
        for i in ids_of(name):
            if i not in rows:
                errors.append("test %s (%s) names %s, which the checklist does not have"
                              % (name, ", ".join(tests[name]), i))
            by_id.setdefault(i, []).append(name)
    out = []
    lines = text.splitlines()
    k = 0
    while k < len(lines):
        line = lines[k]
        if line in (OLD_HEADER, HEADER):
            out.append(HEADER)
            out.append(SEPARATOR)
            k += 2  # the header's separator line
            continue
        m = ROW.match(line)
        if not m:
            out.append(line)
            k += 1
            continue
        fid, behaviour, tier, status = split_row(line)
        for cite in CITED.findall(behaviour):
            if not NAME_ID.search(cite.rstrip("*")):
                continue  # not a test name (a key, a VM test)
            if not fnmatch.filter(tests, cite):
                errors.append("%s cites `%s`, which no test is" % (fid, cite))
        names = by_id.get(fid, [])
        if not names:
            status = "no test"
        elif not status.startswith("partial"):
            status = "tested"
        out.append("| %s | %s | %s | %s | %s |"
                   % (fid, behaviour, tier, status, tests_cell(names, tests)))
        k += 1
    return "\n".join(out) + "\n"


def main(argv):
    check = argv[1:] == ["--check"]
    if argv[1:] and not check:
        print("usage: scripts/features.py [--check]", file=sys.stderr)
        return 2
    with open(FEATURES, encoding="utf-8") as fh:
        text = fh.read()
    errors = []
    new = render(text, collect_tests(), errors)
    for e in errors:
        print("features.py: %s" % e, file=sys.stderr)
    if errors:
        return 1
    if check:
        if new != text:
            print("features.py: docs/FEATURES.md is not what scripts/features.py writes; "
                  "run it and commit the result", file=sys.stderr)
            return 1
        return 0
    if new != text:
        with open(FEATURES, "w", encoding="utf-8") as fh:
            fh.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
