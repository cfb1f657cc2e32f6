"""The manual pages (man/): the tools' pages, rlpipe-records(5) and the
overview rlpipe(7).

  - every page renders with groff -man -ww without a warning, and its .TH
    names the page as its file does;
  - every page has NAME, DESCRIPTION and SEE ALSO; a tool's page SYNOPSIS,
    OPTIONS and EXIT STATUS; rlpipe(7) the sections of an overview;
  - every page's SEE ALSO names rlpipe(7) (but its own), and every rlpipe
    page a page names exists in man/;
  - rlpipe(7) has a paragraph for every tool in tools/, and documents in
    ENVIRONMENT every variable that lib/ and tools/ read (getenv, and the
    launchers' variables they look up by table), and no variable they do not;
  - make install installs the pages of every section there is in man/.
(That --help and a tool's page list the same options: tests/lib.sh
help_matches_man, run by the tools' *_usage.sh tests.)
"""
import glob
import os
import re
import shutil
import subprocess

from rltest import ROOT, case, finish

MAN = os.path.join(ROOT, "man")
PAGES = sorted(p for p in glob.glob(os.path.join(MAN, "*.[1-8]")))
OVERVIEW = os.path.join(MAN, "rlpipe.7")
TOOLS = sorted(os.path.basename(t) for t in glob.glob(os.path.join(ROOT, "tools", "rl-*")))
OVERVIEW_SECTIONS = ["NAME", "DESCRIPTION", "TOOLS", "RECORDS", "PIPELINES", "WEIGHT PUSHES", "SCALE-OUT",
                     "ENVIRONMENT", "FILES", "SEE ALSO"]


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def sections(text):
    """The .SH headings of a page, in order, without quotes."""
    return [m.group(1).strip().strip('"') for m in re.finditer(r"^\.SH\s+(.*)$", text, re.M)]


def section(text, name):
    """The source lines of one .SH section (up to the next .SH)."""
    m = re.search(r"^\.SH\s+\"?" + re.escape(name) + r"\"?\s*$(.*?)(?=^\.SH\s|\Z)", text, re.M | re.S)
    return m.group(1) if m else ""


def name_of(path):
    """("rl-cat", "1") for man/rl-cat.1."""
    base = os.path.basename(path)
    return base.rsplit(".", 1)[0], base.rsplit(".", 1)[1]


def plain(roff):
    """The words of roff source: escapes of hyphens and fonts undone."""
    return re.sub(r"\\f[BIRP]", "", roff.replace("\\-", "-"))


@case
def every_page_renders_without_warnings():
    if not shutil.which("groff"):
        print("SKIP every_page_renders_without_warnings: groff is not installed (Debian: groff)")
        return
    assert OVERVIEW in PAGES, "man/rlpipe.7 is missing"
    bad = []
    for page in PAGES:
        r = subprocess.run(["groff", "-man", "-ww", "-z", page], capture_output=True, text=True)
        if r.returncode != 0 or r.stderr.strip():
            bad.append(f"{os.path.basename(page)}: rc {r.returncode}: {r.stderr.strip()[:300]}")
    assert not bad, "; ".join(bad)


@case
def every_page_names_itself_in_its_title():
    bad = []
    for page in PAGES:
        name, sec = name_of(page)
        m = re.search(r"^\.TH\s+(\S+)\s+(\S+)", read(page), re.M)
        if not m or m.group(1) != name.upper() or m.group(2) != sec:
            bad.append(f"{os.path.basename(page)}: {m.group(0) if m else 'no .TH'}")
    assert not bad, bad


@case
def every_page_has_the_sections_of_its_kind():
    missing = []
    for page in PAGES:
        name, sec = name_of(page)
        want = ["NAME", "DESCRIPTION", "SEE ALSO"]
        if sec == "1":
            want += ["SYNOPSIS", "OPTIONS", "EXIT STATUS"]
        if page == OVERVIEW:
            want = OVERVIEW_SECTIONS
        have = sections(read(page))
        missing += [f"{name}({sec}): {s}" for s in want if s not in have]
        if page == OVERVIEW:
            order = [s for s in have if s in OVERVIEW_SECTIONS]
            assert order == OVERVIEW_SECTIONS, f"rlpipe(7) sections out of order: {order}"
    assert not missing, missing


@case
def every_page_points_to_the_overview_and_to_pages_that_exist():
    have = {name_of(p) for p in PAGES}
    bad = []
    for page in PAGES:
        name, sec = name_of(page)
        refs = set(re.findall(r"^\.BR\s+(rl[a-z-]*)\s+\((\d)\)", section(read(page), "SEE ALSO"), re.M))
        if page != OVERVIEW and ("rlpipe", "7") not in refs:
            bad.append(f"{name}({sec}) SEE ALSO lacks rlpipe(7)")
        bad += [f"{name}({sec}) names {r}({s}), which man/ lacks" for r, s in refs if (r, s) not in have]
    assert not bad, bad


@case
def the_overview_has_a_paragraph_for_every_tool():
    tools = plain(section(read(OVERVIEW), "TOOLS"))
    have = {name_of(p)[0] for p in PAGES}
    missing = [t for t in TOOLS if not re.search(r"^\.BR\s+" + re.escape(t) + r"\s+\(1\)\s*$", tools, re.M)]
    assert TOOLS and not missing, f"tools without a paragraph in rlpipe(7) TOOLS: {missing}"
    assert not [t for t in TOOLS if t not in have], f"tools without a page: {[t for t in TOOLS if t not in have]}"


def variables_read():
    """The environment variables lib/ and tools/ read: getenv("NAME"), and the
    names of a `vars[] = {...}` table that a loop passes to getenv."""
    names = set()
    for path in glob.glob(os.path.join(ROOT, "lib", "**", "*.*"), recursive=True) + \
            glob.glob(os.path.join(ROOT, "tools", "**", "*.c"), recursive=True):
        if not path.endswith((".c", ".h", ".cu")):
            continue
        text = read(path)
        names |= set(re.findall(r'\bgetenv\(\s*"([A-Za-z_][A-Za-z0-9_]*)"\s*\)', text))
        if re.search(r"\bgetenv\(\s*vars\[", text):
            for table in re.findall(r"\bvars\[\]\s*=\s*\{([^}]*)\}", text):
                names |= set(re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)"', table))
    return names


@case
def the_overview_documents_every_environment_variable_read():
    env = plain(section(read(OVERVIEW), "ENVIRONMENT"))
    documented = set()
    for line in re.findall(r"^\.(?:B|BR)\s+(.*)$", env, re.M):
        documented |= set(re.findall(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b", line))
    read_ = variables_read()
    assert {"RLPIPE_THREADS", "RLPIPE_TF32"} <= read_, f"the scan of lib/ and tools/ found only {sorted(read_)}"
    undocumented = sorted(read_ - documented)
    assert not undocumented, f"read by the code, not in rlpipe(7) ENVIRONMENT: {undocumented}"
    stale = sorted(v for v in documented if v.startswith("RLPIPE_") and v not in read_)
    assert not stale, f"in rlpipe(7) ENVIRONMENT, read by no code: {stale}"
    # The tools' own pages name a subset, each also in the overview.
    for page in PAGES:
        for v in re.findall(r"\bRLPIPE_[A-Z0-9_]+\b", plain(section(read(page), "ENVIRONMENT"))):
            assert v in documented, f"{os.path.basename(page)} ENVIRONMENT names {v}, rlpipe(7) does not"


@case
def make_install_installs_every_section_of_pages():
    mk = read(os.path.join(ROOT, "Makefile"))
    body = re.search(r"^install:.*?(?=^\S|\Z)", mk, re.M | re.S)
    assert body, "the Makefile has no install target"
    missing = []
    for sec in sorted({name_of(p)[1] for p in PAGES}):
        if not re.search(r"install -m 644 man/\*\." + sec + r"\s+\S*/share/man/man" + sec + r"/", body.group(0)):
            missing.append(sec)
    assert not missing, f"make install leaves out the pages of sections {missing}"


finish()
