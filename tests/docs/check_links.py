#!/usr/bin/env python3
"""Checks that README.md and docs/ point only at things that exist.

- Every relative Markdown link ([text](path), [text](path#anchor), [ref]: path)
  resolves to a file or folder of the project; an anchor must be a heading of
  the target page (GitHub's slug rules).
- Every project path written in backticks (`gateway/calls/generate_call.cc`,
  `engine/kv/`) whose first folder is a top-level folder of the project
  exists, so the life of a request keeps naming real files as code moves.
Links to other sites (http:, https:, mailto:) are not fetched: tests are
hermetic. Usage: check_links.py PROJECT_ROOT. Exits 1 on any broken link.
"""
import os
import re
import sys

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|^\s*\[[^\]]+\]:\s*(\S+)", re.M)
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
PATHLIKE = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.*-]+)*/?$")


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"`|\*\*|__|\[|\]\([^)]*\)", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    with open(path, encoding="utf-8") as f:
        text = FENCE.sub("", f.read())
    seen, out = {}, set()
    for h in HEADING.findall(text):
        s = slug(h)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def pages(root):
    yield os.path.join(root, "README.md")
    for dirpath, _, files in os.walk(os.path.join(root, "docs")):
        for name in sorted(files):
            if name.endswith(".md"):
                yield os.path.join(dirpath, name)


def check_page(root, page, top_folders):
    problems = []
    with open(page, encoding="utf-8") as f:
        text = f.read()
    rel = os.path.relpath(page, root)
    for m in list(LINK.finditer(text)) + list(IMAGE.finditer(text)):
        target = next(g for g in m.groups() if g)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # another site: not fetched
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        line = text.count("\n", 0, m.start()) + 1
        if not os.path.exists(dest):
            problems.append(f"{rel}:{line}: link to {target}: no such file")
        elif not os.path.realpath(dest).startswith(os.path.realpath(root) + os.sep):
            problems.append(f"{rel}:{line}: link to {target}: outside the project")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            problems.append(f"{rel}:{line}: link to {target}: no heading #{anchor}")
    for m in CODE_SPAN.finditer(FENCE.sub(lambda f: "\n" * f.group(0).count("\n"), text)):
        token = m.group(1).strip()
        if "/" not in token or "*" in token or not PATHLIKE.match(token):
            continue
        if token.split("/", 1)[0] not in top_folders:
            continue
        if not os.path.exists(os.path.join(root, token)):
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{rel}:{line}: `{token}` names no file or folder of the project")
    return problems


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    top_folders = {d for d in os.listdir(root)
                   if os.path.isdir(os.path.join(root, d)) and not d.startswith((".", "build"))}
    problems, checked = [], 0
    for page in pages(root):
        if os.path.exists(page):
            checked += 1
            problems += check_page(root, page, top_folders)
    for p in problems:
        print(p)
    print(f"{checked} pages checked, {len(problems)} broken links")
    return 1 if problems or checked < 2 else 0


if __name__ == "__main__":
    sys.exit(main())
