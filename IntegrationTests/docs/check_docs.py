#!/usr/bin/env python3
"""Checks the documentation and the citations of it, for IntegrationTests/suites/docs.sh.

Prints TAP-like lines ("ok - …", "not ok - …"). Run from the repository's root:
  python3 IntegrationTests/docs/check_docs.py

- Every citation `page §N` / `page §N.N` in a tracked file names a numbered heading
  ("## N. …" / "### N.N …") of docs/reference/<page>.md; `docs/…md#anchor` paths exist.
- No citation of the old contract (the word SPEC before a section number, its file name)
  and no path outside the repository (the folder beside the clone) anywhere.
- Every Markdown link of README.md, CHANGELOG.md and docs/ resolves (file and anchor);
  every docs page is linked from README.md; README.md is at most 10 KB; pages are 2-14 KB.
- Every message quoted in a troubleshooting symptom is still in Sources/.
"""
import os
import re
import subprocess
import sys

failed = 0


def ok(desc):
    print(f"ok - {desc}")


def not_ok(desc):
    global failed
    failed += 1
    print(f"not ok - {desc}")


def tracked_text_files():
    out = subprocess.run(["git", "ls-files", "-z"], capture_output=True, check=True).stdout
    for path in out.decode().split("\0"):
        if not path or not os.path.isfile(path):
            continue
        if re.search(r"(^|/)(corpus|regressions)/", path):
            continue
        try:
            yield path, open(path, encoding="utf-8").read()
        except UnicodeDecodeError:
            continue


def github_anchor(heading):
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def headings(path):
    numbers, anchors = set(), set()
    for line in open(path, encoding="utf-8"):
        m = re.match(r"#{2,4} (.*)", line)
        if not m:
            continue
        anchors.add(github_anchor(m.group(1)))
        n = re.match(r"(\d+(?:\.\d+)*)\.?\s", m.group(1))
        if n:
            numbers.add(n.group(1))
    return numbers, anchors


reference = {f[:-3] for f in os.listdir("docs/reference") if f.endswith(".md")}
sections = {page: headings(f"docs/reference/{page}.md")[0] for page in reference}

# 1. Citations.
# A citation may break across a comment's lines: "protocol-bluetooth\n    /// §2".
CONTINUATION = re.compile(r"[ \t]*\n[ \t]*(?:///|//|#|\*)?[ \t]*(?=§)")
CITATION = re.compile(r"([a-z][a-z0-9-]*) §(\d+(?:\.\d+)*)")
DOCPATH = re.compile(r"(?<![\w/.-])docs/((?:operating|reference|development)/[a-z0-9-]+\.md|README\.md)(?:#([a-z0-9-]+))?")
# Built from pieces so that this file does not match itself.
OLD = re.compile(r"\b" + "SP" + r"EC(?:[ \t]*\n?[ \t]*(?:///|//|#)?[ \t]*(?:section[ \t]+)?)\d|" + "SP" + r"EC\.md|\.\./" + "shared")
cited = bad = 0
old_hits = []
for path, text in tracked_text_files():
    joined = CONTINUATION.sub(" ", text)
    for m in CITATION.finditer(joined):
        page, number = m.group(1), m.group(2)
        if page not in reference:
            if "-" in page and page not in ("issue",):
                not_ok(f"{path}: '{m.group(0)}' cites a page docs/reference/{page}.md that does not exist")
                bad += 1
            continue
        cited += 1
        if number not in sections[page]:
            not_ok(f"{path}: '{m.group(0)}': docs/reference/{page}.md has no section {number}")
            bad += 1
    for m in DOCPATH.finditer(text):
        target = "docs/" + m.group(1)
        if not os.path.isfile(target):
            not_ok(f"{path}: cites {target}, which does not exist")
            bad += 1
        elif m.group(2) and m.group(2) not in headings(target)[1]:
            not_ok(f"{path}: cites {target}#{m.group(2)}, which has no such heading")
            bad += 1
    for m in OLD.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        old_hits.append(f"{path}:{line}")
if bad == 0:
    ok(f"every one of {cited} citations 'page §N' names an existing section of docs/reference")
if old_hits:
    not_ok("the old contract or a file outside the repository is cited at " + ", ".join(old_hits[:20]) +
           " (run spec-citations.sh, or cite a docs/reference section)")
else:
    ok("no citation of the old contract and no path outside the repository")

# 2. Links and sizes.
pages = sorted(os.path.join(d, f) for d, _, fs in os.walk("docs") for f in fs if f.endswith(".md"))
broken = []
for path in ["README.md", "CHANGELOG.md"] + pages:
    text = open(path, encoding="utf-8").read()
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        if not os.path.exists(full):
            broken.append(f"{path}: {target}")
        elif anchor and full.endswith(".md") and anchor not in headings(full)[1]:
            broken.append(f"{path}: {target} (no such heading)")
if broken:
    not_ok("broken links: " + "; ".join(broken[:20]))
else:
    ok(f"every link of README.md, CHANGELOG.md and {len(pages)} docs pages resolves")

readme = open("README.md", encoding="utf-8").read()
unlinked = [p for p in pages if "(" + p + ")" not in readme and p != "docs/README.md"]
if unlinked or "(docs/README.md)" not in readme:
    not_ok("docs pages not linked from README.md: " + ", ".join(unlinked or ["docs/README.md"]))
else:
    ok("every docs page is linked from README.md")
size = len(readme.encode())
(ok if size <= 10240 else not_ok)(f"README.md is {size} bytes (at most 10240)")
odd = [f"{p} ({os.path.getsize(p)} B)" for p in pages if p != "docs/README.md" and not 2048 <= os.path.getsize(p) <= 14336]
(not_ok if odd else ok)("docs pages between 2 and 14 KB" + (": " + ", ".join(odd) if odd else ""))

# 3. Troubleshooting: every message an entry quotes (`…` in its bold symptom) is one a
# source still emits; each piece between "…" is looked for in Sources/.
sources = "".join(text for path, text in tracked_text_files() if path.startswith("Sources/"))
missing = []
trouble = open("docs/operating/troubleshooting.md", encoding="utf-8").read()
quoted = 0
for symptom in re.findall(r"^- \*\*(.+?)\*\*", trouble, re.M | re.S):
    for message in re.findall(r"`([^`]+)`", symptom):
        for piece in message.split("…"):
            piece = piece.strip(" .():")
            if len(piece) < 6:
                continue
            quoted += 1
            if piece not in sources:
                missing.append(piece)
if missing:
    not_ok("docs/operating/troubleshooting.md quotes messages no source emits: " + "; ".join(missing))
else:
    ok(f"the {quoted} message pieces quoted in troubleshooting.md are all in Sources/")

sys.exit(1 if failed else 0)
