"""The repository documents itself: every environment variable the project reads is in docs/env.md
under the one ``TETRACHIP_`` prefix, and the links of README.md and docs/*.md resolve to files of
the repository."""
import re
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
ENV_DOC = ROOT / "docs" / "env.md"
PREFIX = "TETRACHIP_"
# names owned by other tools (cocotb, Triton, make, Python, Amaranth's FPGA flow, pytest-xdist):
# the project reads or sets them but cannot rename them
THIRD_PARTY = {"SIM", "SIM_CMD_SUFFIX", "CXX", "TRITON_INTERPRET", "PATH", "PYTHONPATH", "MAKEFLAGS", "HOME",
               "PYTEST_XDIST_WORKER", "YOSYS", "NEXTPNR_ECP5", "ECPPACK", "AMARANTH_USE_YOSYS", "OPENFPGALOADER"}
# how code names an environment variable it reads (or sets for a tool it drives)
READS = [re.compile(p) for p in (
    r"environ\.(?:get|pop|setdefault)\(\s*['\"](\w+)['\"]",
    r"environ\[\s*['\"](\w+)['\"]\s*\]",
    r"['\"](\w+)['\"]\s+(?:not\s+)?in\s+(?:os\.)?environ\b",
    r"getenv\(\s*['\"](\w+)['\"]",
    r"(?:setenv|delenv)\(\s*['\"](\w+)['\"]",
    r"envvar\s*=\s*['\"](\w+)['\"]",
)]
PROJECT_NAME = re.compile(r"\b" + PREFIX + r"[A-Z0-9_]*[A-Z0-9]\b")     # "TETRACHIP_FUZZ_*" is a family, not a name
OLD_PREFIX = re.compile(r"\bTC_[A-Z][A-Z0-9_]*")
SKIP_DIRS = {"build", "out", "__pycache__", "node_modules"}
CODE_SUFFIXES = {".py", ".sh", ".toml", ".cfg", ".ini", ".yml", ".yaml", ".ipynb"}


def _project_files():
    """The repository's own files: no virtual environment, build output or hidden folder but .ci."""
    def walk(d: Path):
        for p in sorted(d.iterdir()):
            if p.is_dir():
                if (p.name.startswith(".") and p.name != ".ci") or p.name in SKIP_DIRS \
                        or p.name.endswith(".egg-info") or (p / "pyvenv.cfg").exists():
                    continue
                yield from walk(p)
            else:
                yield p
    return list(walk(ROOT))


FILES = _project_files()
CODE = [p for p in FILES if p.suffix in CODE_SUFFIXES or p.name == "Makefile" or p.parent.name == ".ci"]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def _where(files, pattern_fn) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for p in files:
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for name in pattern_fn(text):
            found.setdefault(name, set()).add(str(p.relative_to(ROOT)))
    return found


def _documented() -> set[str]:
    """Names in the first column of docs/env.md's tables (a cell may list several)."""
    names = set()
    for line in ENV_DOC.read_text().splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([A-Z][A-Z0-9_]*)`", line.split("|")[1]))
    return names


def _read_names(text: str):
    for rx in READS:
        yield from rx.findall(text)


def _make_variables(text: str):
    return re.findall(r"^(\w+)\s*\?=", text, re.M)


def test_every_variable_read_is_documented_and_prefixed():
    read = _where(CODE, _read_names)
    named = _where(CODE + [d for d in DOCS if d.exists() and d != ENV_DOC], PROJECT_NAME.findall)
    documented = _documented()
    assert read, "found no environment variable read: the patterns no longer match the code"
    unprefixed = {n: sorted(w) for n, w in read.items() if not n.startswith(PREFIX) and n not in THIRD_PARTY}
    assert not unprefixed, f"environment variables without the {PREFIX} prefix: {unprefixed}"
    missing = {n: sorted(w) for n, w in {**read, **named}.items() if n.startswith(PREFIX) and n not in documented}
    assert not missing, f"environment variables missing from docs/env.md: {missing}"


def test_env_doc_lists_no_variable_the_project_does_not_use():
    used = set(_where(CODE, PROJECT_NAME.findall))
    stale = {n for n in _documented() if n.startswith(PREFIX)} - used
    assert not stale, f"docs/env.md lists variables nothing reads: {sorted(stale)}"


def test_no_variable_keeps_the_old_prefix():
    old = _where(CODE + [d for d in DOCS if d.exists()], OLD_PREFIX.findall)
    assert not old, f"the TC_ prefix is now {PREFIX}: {old}"


def test_make_variables_are_documented():
    make = _where([ROOT / "Makefile"], _make_variables)
    missing = sorted(set(make) - _documented())
    assert not missing, f"Makefile variables missing from docs/env.md: {missing}"


# --- links -----------------------------------------------------------------------------------------
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|^\[[^\]]+\]:\s*(\S+)", re.M)
CODE_SPAN = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def _links(md: Path):
    text = CODE_SPAN.sub("", md.read_text(encoding="utf-8"))
    for m in LINK.finditer(text):
        yield m.group(1) or m.group(2)


def _anchors(md: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    out = set()
    for line in md.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            title = re.sub(r"[^\w\- ]", "", title.replace("`", ""))
            out.add(title.replace(" ", "-"))
    return out


def test_readme_and_docs_links_stay_inside_the_repository():
    bad = []
    for md in DOCS:
        if not md.exists():
            continue
        for target in _links(md):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):          # http(s):, mailto: ...: not a file
                continue
            path, _, anchor = unquote(target).partition("#")
            dest = (md.parent / path).resolve() if path else md
            where = f"{md.relative_to(ROOT)} -> {target}"
            if not dest.is_relative_to(ROOT):
                bad.append(f"{where}: outside the repository")
            elif not dest.exists():
                bad.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                bad.append(f"{where}: no heading #{anchor}")
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_readme_names_no_file_outside_the_repository():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "../" not in text, "README.md points outside the repository"


def test_no_file_names_a_document_outside_the_repository():
    """The repository documents itself: its architecture is docs/architecture.md."""
    outside = re.compile(r"\b(?:DESIGN|STYLE)\.md\b")
    found = _where(CODE + [d for d in DOCS if d.exists()], outside.findall)
    assert not found, f"documents outside the repository named in: {found}"
