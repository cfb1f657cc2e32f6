"""The project's files speak of the project: what it does, how to use it,
what it measured. Words about how the work on it was organised (sessions,
numbered issues, "the issue's aims", "the aims") appear in no tracked file;
what a thing is, not where it came from.

  - every tracked file (`git ls-files`; where git or the checkout is missing,
    the files of the tree that .gitignore does not ignore), but this one, is
    free of the phrases PATTERN matches, and a failure names file:line and
    the words;
  - the checker flags each kind of phrase and passes code that only contains
    the letters (start_new_session=True, ZSTD_reset_session_only).
"""
import fnmatch
import os
import re
import subprocess

from rltest import ROOT, case, finish

PATTERN = re.compile(
    r"\bsessions?\b|\bissues?\s*#?\d+\b|\bissue'?s'?\s+aims?\b|\bthe\s+aims?\b"
    r"|\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth)\s+sessions?\b",
    re.IGNORECASE)
SELF = "tests/py/test_words.py"


def offences(text):
    """[(line number, [the words matched, in order])] of the lines of text that match."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        words = [m.group(0) for m in PATTERN.finditer(line)]
        if words:
            found.append((n, words))
    return found


def ignore_rules(root):
    """.gitignore's patterns as (anchored at the root, a folder only, glob)."""
    rules = []
    try:
        with open(os.path.join(root, ".gitignore")) as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines + [".git"]:
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        folder = line.endswith("/")
        glob = line.strip("/")
        rules.append(("/" in glob or line.startswith("/"), folder, glob))
    return rules


def ignored(rel, is_dir, rules):
    for anchored, folder, glob in rules:
        if folder and not is_dir:
            continue
        if fnmatch.fnmatchcase(rel if anchored else os.path.basename(rel), glob):
            return True
    return False


def walked_files(root):
    """Files under root, relative to it, leaving out what .gitignore ignores
    (build outputs, .deps, experiments' out/)."""
    rules = ignore_rules(root)
    out = []
    for top, dirs, files in os.walk(root):
        rel_top = os.path.relpath(top, root)
        rel_top = "" if rel_top == "." else rel_top + "/"
        dirs[:] = sorted(d for d in dirs if not ignored(rel_top + d, True, rules))
        out += [rel_top + f for f in sorted(files) if not ignored(rel_top + f, False, rules)]
    return out


def project_files(root):
    """The tracked files that exist, relative to root."""
    try:
        r = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True)
        names = [n for n in r.stdout.decode("utf-8", "surrogateescape").split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = walked_files(root)
    return [n for n in names if os.path.isfile(os.path.join(root, n))]


def text_of(path):
    """The file's text, or None for a binary file (a NUL in its first 8 KiB)."""
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", "replace")


@case
def no_file_speaks_of_how_the_work_was_organised():
    bad = []
    for rel in project_files(ROOT):
        if rel == SELF:
            continue
        text = text_of(os.path.join(ROOT, rel))
        if text is None:
            continue
        bad += [f"{rel}:{n}: {', '.join(repr(w) for w in words)}" for n, words in offences(text)]
    assert not bad, f"{len(bad)} lines: " + "; ".join(bad)


@case
def the_checker_flags_each_kind_of_phrase_and_passes_code():
    flagged = {
        "a session": "as measured in this session",
        "sessions": "Sessions ended there",
        "a numbered issue": "exact against transformers (issue 17, item 2)",
        "an issue by #": "see Issue #6",
        "issues numbered": "issues 3 and 4",
        "the issue's aims": "Against the issue's aims: 1.2x",
        "the issues' aim": "The issues' aim held",
        "the aims": "short of the aims",
        "the aim": "(the aim was 1.5x)",
        "an ordinal session": "the seventh session measured it",
        "ordinal sessions": "Third  Sessions",
    }
    missed = [kind for kind, text in flagged.items() if not offences(text)]
    assert not missed, f"not flagged: {missed}"
    clean = ("subprocess.Popen(cmd, start_new_session=True)\n"
             "ZSTD_DCtx_reset(d, ZSTD_reset_session_only);\n"
             "rl-learn issues a warning; a tissue 17 mm wide\n"
             "the aimed-for rate; aims of 1.5x; sessionid = 3\n")
    assert offences(clean) == [], offences(clean)
    assert offences("ok\nissue 19 here, the aims there\n") == [(2, ["issue 19", "the aims"])]


@case
def without_git_the_tree_is_walked_leaving_out_build_outputs():
    rules = ignore_rules(ROOT)
    assert ignored("build", True, rules) and ignored("build-nc", True, rules) and ignored(".deps", True, rules)
    assert ignored("experiments/demo/out", True, rules) and ignored("tests/py/__pycache__", True, rules)
    assert not ignored("tests/py/test_words.py", False, rules) and not ignored("lib/records", True, rules)
    walked = set(walked_files(ROOT))
    missing = [n for n in project_files(ROOT) if n not in walked]
    assert not missing, f"tracked files the walk does not find: {missing[:10]}"
    assert not [n for n in walked if n.startswith(("build/", "bin/", ".deps/", ".git/"))]


finish()
