"""Every repository path the code, the docs and the settings cite exists (issue #59: docs that
agree with the code).

The text scanned is the repository's own files (`git ls-files`, tracked or new and not
ignored): Python, Markdown, YAML, TOML, the Makefile, shell scripts and templates, and any file
whose first line is a `#!`. Binary files are skipped.

A citation is:
- a token that starts with a top-level directory of the repository (`tests/`, `docs/`,
  `deploy/`, `bench/`, `examples/`, `activities/`, `workflows/`, `cli/`, ...), not preceded by
  a word character, `.`, `/`, `-`, `~`, `$` or `@` (so URLs, absolute paths and `$(VAR)/...`
  are not), with a leading `./` or `../` dropped;
- `sim/...`, the simulator's package, which lives at `simulator/sim/...`;
- in Markdown, a link's relative target, taken from the linking file's directory.

A citation ends at the first character no path has here (a space, a quote, a backtick, `:`,
`)`, `#`, ...), so `path:12`, `path::test_name` and `path#anchor` cite the path; a trailing `.`
or `,` is the sentence's. `{a,b}` names each alternative. A `*` is a glob: it must match
something. A token with a placeholder (`<name>`, `{name}` without a comma) or an ellipsis (`…`,
`...`) names no file, so it is not a citation. A module named without its `.py`, or followed by
one of its attributes (`activities/bootstrap.CA_HASH_TTL`), cites the module's file. A path
after a commit (`git show <commit>:<path>`) cites the file as it was in that commit: it must be
there (unless the commit is missing from a shallow clone).

Exempt, each for its reason:
- CHANGELOG.md and docs/benchmarks-history.md: histories, which record what was there when they
  were written; a later change moves or removes files and must not rewrite what was recorded.
- This file: its docstring and examples describe what a citation looks like.
"""

from __future__ import annotations

import posixpath
import re
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS_FILE = Path(__file__).resolve().relative_to(ROOT).as_posix()
HISTORIES = frozenset({"CHANGELOG.md", "docs/benchmarks-history.md"})
TEXT_SUFFIXES = frozenset({".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".tmpl"})
TEXT_NAMES = frozenset({"Makefile"})
# Extensions a cited file may have; anything else after a module's name is an attribute.
FILE_EXTENSIONS = frozenset(
    {"py", "md", "json", "yaml", "yml", "toml", "sh", "tmpl", "txt", "gz", "mod", "sum", "schema"}
)
# A path's characters, or a `{a,b}` group of alternatives.
PATH_CHARS = r"(?:[\w.*/…<>-]|\{[^{}\s]*\})"
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")
EXTERNAL_LINK = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#|/)")
SIMULATOR_PACKAGE = "sim"


def git_files() -> list[str]:
    """The repository's files: tracked, or new and not ignored, and present in the work tree."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the repository's files are what git lists")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    return sorted({f for f in listed if f and ((ROOT / f).exists() or (ROOT / f).is_symlink())})


@cache
def repository() -> tuple[frozenset[str], frozenset[str]]:
    """The repository's files and the directories that hold them."""
    files = frozenset(git_files())
    directories = frozenset(
        parent.as_posix()
        for f in files
        for parent in PurePosixPath(f).parents
        if parent != PurePosixPath(".")
    )
    return files, directories


def is_scanned(path: str) -> bool:
    """Whether the file is text that may cite paths, and not exempt."""
    if path in HISTORIES or path == THIS_FILE:
        return False
    name = PurePosixPath(path).name
    if PurePosixPath(path).suffix in TEXT_SUFFIXES or name in TEXT_NAMES:
        return True
    if not (ROOT / path).is_file():
        return False
    with (ROOT / path).open("rb") as head:
        return head.read(2) == b"#!"


def text_of(path: str) -> str | None:
    """The file's text, or None for a binary file (or a directory: a symlink to one)."""
    if not (ROOT / path).is_file():
        return None
    data = (ROOT / path).read_bytes()
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace")


def citation_pattern(top_level: frozenset[str]) -> re.Pattern[str]:
    """A path under one of the top-level directories, after an optional `<commit>:`."""
    prefixes = "|".join(re.escape(name) for name in sorted(top_level | {SIMULATOR_PACKAGE}))
    return re.compile(
        rf"(?<![\w./~$@-])(?:([0-9a-f]{{7,40}}):)?(?:\.\.?/)*((?:{prefixes})/{PATH_CHARS}*)"
    )


def cleaned(token: str) -> str | None:
    """The path a token cites, or None when it names no file (a placeholder, an ellipsis)."""
    if "…" in token or "..." in token or "<" in token or ">" in token:
        return None
    token = token.rstrip(".,")
    if re.search(r"\{[^{},]*\}", token):  # `{name}`: an f-string's or a template's field
        return None
    if token.startswith(f"{SIMULATOR_PACKAGE}/"):
        token = f"simulator/{token}"
    return token


def alternatives(path: str) -> list[str]:
    """`a/{b,c}.py` is `a/b.py` and `a/c.py`."""
    group = re.search(r"\{([^{}]*)\}", path)
    if group is None:
        return [path]
    return [
        expanded
        for choice in group.group(1).split(",")
        for expanded in alternatives(path[: group.start()] + choice + path[group.end() :])
    ]


def glob_pattern(path: str) -> re.Pattern[str]:
    """`*` within a directory, `**` across directories."""
    parts = re.split(r"(\*\*|\*)", path)
    wildcards = {"**": ".*", "*": "[^/]*"}
    return re.compile("".join(wildcards.get(part, re.escape(part)) for part in parts))


def in_history(commit: str, path: str) -> bool:
    """Whether the commit has the path (a shallow clone without the commit cannot tell)."""
    git = ["git", "-C", str(ROOT), "cat-file", "-e"]
    if subprocess.run([*git, f"{commit}:{path}"], capture_output=True).returncode == 0:
        return True
    if subprocess.run([*git, f"{commit}^{{commit}}"], capture_output=True).returncode == 0:
        return False
    shallow = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
        capture_output=True,
        text=True,
    )
    return shallow.stdout.strip() == "true"


def exists(path: str) -> bool:
    """Whether the repository has the cited path (a `commit:path`: whether that commit had it)."""
    if ":" in path:
        commit, _, path = path.partition(":")
        return in_history(commit, path.rstrip("/"))
    files, directories = repository()
    path = path.rstrip("/")
    if path in ("", "."):  # the repository itself
        return True
    if "*" in path:
        pattern = glob_pattern(path)
        return any(pattern.fullmatch(known) for known in files | directories)
    if path in files or path in directories:
        return True
    target = (ROOT / path).resolve()  # through a symlinked directory
    if target.is_relative_to(ROOT) and target != ROOT:
        resolved = target.relative_to(ROOT).as_posix()
        if resolved in files or resolved in directories:
            return True
    # A module without its `.py`, or with one of its attributes after it.
    parent, _, name = path.rpartition("/")
    stem, _, rest = name.partition(".")
    if rest.split(".")[0] in FILE_EXTENSIONS:
        return False
    if rest and not rest.split(".")[0].isidentifier():
        return False
    return f"{parent}/{stem}.py" in files


def citations_in(path: str, text: str, pattern: re.Pattern[str]) -> Iterator[tuple[int, str]]:
    """(line, cited path) for every citation in one file's text."""
    folder = PurePosixPath(path).parent
    for number, line in enumerate(text.splitlines(), start=1):
        cited: list[str] = []
        if path.endswith(".md"):
            # A link's target is relative to the linking file, whatever it starts with.
            for link in MARKDOWN_LINK.finditer(line):
                target = link.group(1).split("#")[0]
                if target and not EXTERNAL_LINK.match(target) and "<" not in target:
                    cited.append(posixpath.normpath(f"{folder}/{target}"))
            line = MARKDOWN_LINK.sub("]()", line)
        for match in pattern.finditer(line):
            commit, token = match.groups()
            path_cited = cleaned(token)
            if path_cited is not None:
                at = f"{commit}:" if commit else ""
                cited.extend(at + each for each in alternatives(path_cited))
        yield from ((number, each) for each in dict.fromkeys(cited))


def dangling_citations() -> list[str]:
    """`file:line: cited path` for every citation of a path the repository does not have."""
    files, directories = repository()
    top_level = frozenset(d for d in directories if "/" not in d)
    pattern = citation_pattern(top_level)
    found: list[str] = []
    for path in sorted(files):
        if not is_scanned(path):
            continue
        text = text_of(path)
        if text is None:
            continue
        found.extend(
            f"{path}:{number}: {cited}"
            for number, cited in citations_in(path, text, pattern)
            if not exists(cited)
        )
    return found


def test_every_cited_path_exists() -> None:
    dangling = dangling_citations()
    assert not dangling, "cited paths that do not exist:\n" + "\n".join(dangling)


@pytest.mark.parametrize(
    ("line", "cited"),
    [
        (
            "see `tests/unit/test_cited_paths.py::test_every_cited_path_exists`.",
            ["tests/unit/test_cited_paths.py"],
        ),
        (
            "(docs/architecture.md:113), or is it in tests/unit?",
            ["docs/architecture.md", "tests/unit"],
        ),
        ("`sim/controlplane/cluster.py`", ["simulator/sim/controlplane/cluster.py"]),
        ("sim/clouds/{aws,gcp}.py", ["simulator/sim/clouds/aws.py", "simulator/sim/clouds/gcp.py"]),
        ("tests/replay/histories/*.json", ["tests/replay/histories/*.json"]),
        ("https://example.com/docs/x.md and /tmp/tests/x and $(BIN)/tests/x", []),
        ("tests/replay/histories/<name>.json, deploy/..., bench/…", []),
        ("f'tests/replay/histories/{name}.json'", []),
        (
            "`git show a147c42:tests/replay/histories/nodepool-lane-b-stale-clock.json`",
            ["a147c42:tests/replay/histories/nodepool-lane-b-stale-clock.json"],
        ),
    ],
)
def test_what_a_citation_is(line: str, cited: list[str]) -> None:
    pattern = citation_pattern(frozenset({"tests", "docs", "deploy", "bench"}))
    assert [path for _, path in citations_in("README.md", line, pattern)] == cited


@pytest.mark.parametrize(
    ("path", "line", "cited"),
    [
        (
            "README.md",
            "[the docs](docs/) and [rbac](docs/rbac.md#tenants)",
            ["docs", "docs/rbac.md"],
        ),
        (
            "docs/repro/README.md",
            "[x](../../tests/conftest.py) [y](../rbac.md)",
            ["tests/conftest.py", "docs/rbac.md"],
        ),
        ("docs/repro/README.md", "[x](../tests/conftest.py)", ["docs/tests/conftest.py"]),
        ("README.md", "[x](https://example.com/tests/x.py) [y](#setup)", []),
    ],
)
def test_a_markdown_link_is_relative_to_its_file(path: str, line: str, cited: list[str]) -> None:
    pattern = citation_pattern(frozenset({"tests", "docs"}))
    assert [each for _, each in citations_in(path, line, pattern)] == cited


@pytest.mark.parametrize(
    ("path", "found"),
    [
        ("tests/replay/histories/*.json", True),
        ("tests/replay/histories/*.yaml", False),
        ("activities/bootstrap.CA_HASH_TTL", True),
        ("cluster/node_identity", True),
        ("activities/bootstrap.json", False),
        ("simulator/sim/controlplane/crds/cloudburst.io_nodepools.yaml", True),
        ("tests/unit/", True),
        ("tests/unit/no_such_test.py", False),
        ("a147c42:tests/replay/histories/nodepool-lane-b-stale-clock.json", True),
        ("a147c42:tests/replay/histories/no-such-history.json", False),
    ],
)
def test_what_exists(path: str, found: bool) -> None:
    assert exists(path) is found
