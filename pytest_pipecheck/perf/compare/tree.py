"""REV and its tree: resolve REV to a commit, write its tree (with its submodules), and read it back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import CompareError

if TYPE_CHECKING:  # pragma: no cover
    pass

_INFO = "revision.json"  # next to the tree: REV as given and the commit it resolved to


@dataclass(frozen=True)
class Revision:
    """REV as given, the commit it names, and the repository's top directory."""

    rev: str
    sha: str
    toplevel: str

    @property
    def label(self) -> str:
        short = self.sha[:10]
        return self.rev if self.rev.startswith(short) or self.sha.startswith(self.rev) else f"{self.rev} ({short})"


def _git(args: list[str], cwd: str, timeout: float = 120.0) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)


def _said(proc: subprocess.CompletedProcess[bytes]) -> str:
    text = (proc.stderr or proc.stdout or b"").decode(errors="replace").strip()
    return text.splitlines()[-1] if text else f"exit status {proc.returncode}"


def resolve(rootdir: str, rev: str) -> Revision:
    """REV as a commit of the repository that holds ``rootdir``; :class:`CompareError` says what is wrong."""
    if shutil.which("git") is None:
        raise CompareError("git is not on PATH: compare mode reads REV's tree with git")
    try:
        top = _git(["rev-parse", "--show-toplevel"], rootdir)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CompareError(f"cannot run git in {rootdir}: {exc}") from None
    if top.returncode != 0:
        raise CompareError(f"the rootdir {rootdir} is not inside a git repository ({_said(top)})")
    toplevel = top.stdout.decode().strip()
    if rev.startswith("-"):
        raise CompareError(f"{rev!r} is not a revision")
    found = _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"], toplevel)
    if found.returncode != 0:
        shallow = _git(["rev-parse", "--is-shallow-repository"], toplevel).stdout.decode().strip() == "true"
        hint = ("; the clone is shallow: fetch the history REV needs (git fetch --unshallow, or a deeper "
                "--depth)") if shallow else ""
        raise CompareError(f"{rev!r} does not name a commit in {toplevel}{hint}")
    return Revision(rev, found.stdout.decode().strip(), toplevel)


def _safe_members(tar: tarfile.TarFile, dest: str) -> Iterator[tarfile.TarInfo]:
    """The archive's members that stay inside ``dest`` (git writes none other; this is the check that says so)."""
    root = os.path.realpath(dest)
    for member in tar.getmembers():
        target = os.path.realpath(os.path.join(dest, member.name))
        if not (target == root or target.startswith(root + os.sep)) or member.isdev():
            raise CompareError(f"git archive wrote a member outside the tree: {member.name!r}")
        yield member


def _archive_into(git: list[str], sha: str, prefix: str, tree: str, tmp: str, where: str) -> None:
    """``git archive`` of ``sha`` (in the repository ``git`` names: ``-C DIR`` or ``--git-dir=DIR``), its
    members under ``prefix``, extracted into ``tree``."""
    archive = os.path.join(tmp, "part.tar")
    with open(archive, "wb") as fh:
        args = ["git", *git, "archive", "--format=tar", *([f"--prefix={prefix}"] if prefix else []), sha]
        proc = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.PIPE, timeout=600)
    if proc.returncode != 0:
        raise CompareError(f"git archive {sha[:10]} failed in {where}: "
                           f"{(proc.stderr or b'').decode(errors='replace').strip()}")
    with tarfile.open(archive) as tar:
        members = list(_safe_members(tar, tree))
        tar.extractall(tree, members=members)
    os.unlink(archive)


def _gitlinks(git: list[str], sha: str) -> list[tuple[str, str]]:
    """The submodules a commit records: (path, commit) of every gitlink in its tree."""
    proc = subprocess.run(["git", *git, "ls-tree", "-r", "-z", sha], stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=120)
    if proc.returncode != 0:
        raise CompareError(f"git ls-tree {sha[:10]} failed: {_said(proc)}")
    links = []
    for entry in proc.stdout.split(b"\0"):
        head, _, path = entry.partition(b"\t")
        parts = head.split()
        if len(parts) == 3 and parts[1] == b"commit":
            links.append((path.decode(errors="surrogateescape"), parts[2].decode()))
    return links


def _submodule_repo(git: list[str], work: str | None, sha: str, path: str) -> tuple[list[str], str | None] | None:
    """Where the submodule at ``path`` of the superproject (``git``, checked out at ``work`` or not) keeps its
    objects: its checkout in the working tree, else the superproject's ``modules/<name>``; None where neither."""
    if work is not None:
        sub = os.path.join(work, path)
        top = subprocess.run(["git", "-C", sub, "rev-parse", "--show-toplevel"], stdin=subprocess.DEVNULL,
                             capture_output=True, timeout=120) if os.path.isdir(sub) else None
        if top is not None and top.returncode == 0 and os.path.realpath(top.stdout.decode().strip()) == \
                os.path.realpath(sub):
            return ["-C", sub], sub
    names = subprocess.run(["git", *git, "config", "--blob", f"{sha}:.gitmodules", "--get-regexp",
                            r"^submodule\..*\.path$"], stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    for line in names.stdout.decode(errors="replace").splitlines():
        key, _, value = line.partition(" ")
        if value == path:
            name = key[len("submodule."):-len(".path")]
            found = subprocess.run(["git", *git, "rev-parse", "--path-format=absolute", "--git-path",
                                    f"modules/{name}"], stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
            gitdir = found.stdout.decode().strip()
            if found.returncode == 0 and os.path.isdir(gitdir):
                return [f"--git-dir={gitdir}"], None
    return None


def _add_submodules(git: list[str], work: str | None, sha: str, prefix: str, tree: str, tmp: str,
                    depth: int = 0) -> dict[str, str]:
    """Extract every submodule ``sha`` records, at the commit it records, into ``tree`` (``git archive``
    leaves submodules out), nested ones too. Returns what could not be: {path in the tree: why}.

    A submodule the working tree has no files of either (never initialised) is left out on both sides
    alike, so it is no gap; one whose repository is here but lacks REV's commit, or whose files the head
    has without a repository to read REV's from, is a gap: REV's tree is then not REV's.
    """
    gaps: dict[str, str] = {}
    if depth > 8:
        return {prefix.rstrip("/"): "submodules nested deeper than 8 levels"}
    for path, commit in _gitlinks(git, sha):
        shown = f"{prefix}{path}"
        repo = _submodule_repo(git, work, sha, path)
        head_files = work is not None and os.path.isdir(os.path.join(work, path)) and bool(
            os.listdir(os.path.join(work, path)))
        if repo is None:
            if head_files:
                gaps[shown] = (f"the submodule {shown}: the head has its files but no repository of it is here to "
                               f"read REV's commit {commit[:10]} from")
            continue
        sub_git, sub_work = repo
        has = subprocess.run(["git", *sub_git, "cat-file", "-e", f"{commit}^{{commit}}"], stdin=subprocess.DEVNULL,
                             capture_output=True, timeout=120)
        if has.returncode != 0:
            gaps[shown] = (f"the submodule {shown}: REV records its commit {commit[:10]}, which is not in its local "
                           f"repository (fetch it there: git -C {shown} fetch, or git submodule update --init)")
            continue
        _archive_into(sub_git, commit, f"{shown}/", tree, tmp, f"the submodule {shown}")
        gaps.update(_add_submodules(sub_git, sub_work, commit, f"{shown}/", tree, tmp, depth + 1))
    return gaps


def export_tree(revision: Revision) -> str:
    """Write REV's tree into a new temporary directory; returns the tree's path (``<tmp>/tree``).

    ``git archive`` reads the object store only: the repository's worktrees, index and refs are left as
    they are. Submodules, which an archive leaves out, are archived each at the commit REV records for it
    (:func:`_add_submodules`); those that cannot be are the tree's gaps (:func:`tree_gaps`). A copy of the
    running pytest_pipecheck package inside the tree is removed (the harness is the head's). Raises
    :class:`CompareError` when git cannot write the tree.
    """
    tmp = tempfile.mkdtemp(prefix="pipecheck-compare-")
    tree = os.path.join(tmp, "tree")
    os.mkdir(tree)
    try:
        top = ["-C", revision.toplevel]
        _archive_into(top, revision.sha, "", tree, tmp, revision.toplevel)
        gaps = _add_submodules(top, revision.toplevel, revision.sha, "", tree, tmp)
        _drop_own_package(revision.toplevel, tree)
        with open(os.path.join(tmp, _INFO), "w", encoding="utf-8") as fh:
            json.dump({"rev": revision.rev, "sha": revision.sha, "toplevel": revision.toplevel, "gaps": gaps}, fh)
    except (OSError, subprocess.TimeoutExpired, tarfile.TarError, CompareError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, CompareError):
            raise
        raise CompareError(f"cannot write REV's tree into {tmp}: {exc}") from None
    return tree


def _drop_own_package(toplevel: str, tree: str) -> None:
    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../pytest_pipecheck
    rel = os.path.relpath(own, toplevel)
    if not rel.startswith(os.pardir) and not os.path.isabs(rel):
        shutil.rmtree(os.path.join(tree, rel), ignore_errors=True)


def read_tree_info(tree: str) -> Revision:
    """The revision a tree made by :func:`export_tree` holds (for a child handed the tree)."""
    try:
        with open(os.path.join(os.path.dirname(tree), _INFO), encoding="utf-8") as fh:
            data = json.load(fh)
        return Revision(str(data["rev"]), str(data["sha"]), str(data["toplevel"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CompareError(f"the tree {tree} handed to this process is not one compare mode made: {exc}") from None


def tree_gaps(tree: str) -> dict[str, str]:
    """What REV's tree lacks of REV (submodules that could not be archived): {path: why}; empty when whole."""
    try:
        with open(os.path.join(os.path.dirname(tree), _INFO), encoding="utf-8") as fh:
            gaps = json.load(fh).get("gaps") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in gaps.items()} if isinstance(gaps, dict) else {}


@dataclass(frozen=True)
class Relocation:
    """Maps a path of the working tree to its counterpart in REV's tree (paths outside stay as they are)."""

    head: str
    rev: str

    def __call__(self, path: str) -> str:
        full = os.path.abspath(path)
        rel = os.path.relpath(full, self.head)
        if rel == os.curdir:
            return self.rev
        if rel.startswith(os.pardir + os.sep) or rel == os.pardir or os.path.isabs(rel):
            return path
        return os.path.join(self.rev, rel)

    def inside(self, path: str) -> bool:
        """Whether ``path`` lies in the working tree (so that it has a counterpart in REV's)."""
        rel = os.path.relpath(os.path.abspath(path), self.head)
        return not (rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.path.isabs(rel))
