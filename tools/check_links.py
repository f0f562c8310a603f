#!/usr/bin/env python3
"""check_links.py [ROOT]: every markdown link to a file of the repository resolves.

For each *.md under ROOT (default: the repository this script is in; build*
and hidden folders skipped), every link [text](target) and image
![text](target) outside fenced code blocks whose target is not a URL must
name a file or folder that exists, relative to the page; a #fragment on a
markdown page must be one of its headings' anchors (GitHub's rule: lower
case, punctuation dropped, spaces to hyphens, repeats numbered -1, -2, ...).
Prints one line per broken link and exits 1 if there is any, else 0.
"""
import os
import re
import sys

LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def slug(text):
    text = re.sub(r"`", "", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def lines_outside_code(path):
    fenced = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if not fenced:
                yield n, line


def anchors(path, cache={}):
    if path not in cache:
        seen, out = {}, set()
        for _, line in lines_outside_code(path):
            m = HEADING.match(line)
            if not m:
                continue
            s = slug(m.group(2))
            k = seen.get(s, 0)
            seen[s] = k + 1
            out.add(s if k == 0 else "%s-%d" % (s, k))
        cache[path] = out
    return cache[path]


def pages(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and not x.startswith("build"))
        for f in sorted(files):
            if f.endswith(".md"):
                yield os.path.join(d, f)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    bad = 0
    for page in pages(root):
        for n, line in lines_outside_code(page):
            line = re.sub(r"`[^`]*`", "", line)  # code spans are not links
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:, ...
                    continue
                path, _, frag = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                where = "%s:%d" % (os.path.relpath(page, root), n)
                if not dest.startswith(root + os.sep) and dest != root:
                    print("%s: %s points outside the repository" % (where, target))
                    bad += 1
                elif not os.path.exists(dest):
                    print("%s: %s does not exist" % (where, target))
                    bad += 1
                elif frag and dest.endswith(".md") and frag not in anchors(dest):
                    print("%s: %s has no heading #%s" % (where, os.path.relpath(dest, root), frag))
                    bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
