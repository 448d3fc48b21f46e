"""What REV's process imports: a module from HEAD's checkout in REV's process is an error naming it."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

from .tree import Revision

if TYPE_CHECKING:  # pragma: no cover
    pass


class ForeignImports:
    """Finds the modules REV's process imported from the head's checkout outside REV's tree.

    REV's process inherits ``PYTHONPATH`` and the interpreter's path entries (a ``.pth`` of an editable
    install, a build directory), so a module REV's tree lacks (a file untracked at the head, build output,
    a submodule that could not be archived) is imported from the head's checkout instead of failing; its
    times would be the head's code's. Files under the head's checkout count unless they lie in REV's tree,
    in the head's pytest_pipecheck (the harness both processes share by design) or in the interpreter's own
    directories (a virtual environment inside the checkout).
    """

    def __init__(self, toplevel: str, tree: str) -> None:
        import site
        import sysconfig

        self.head = os.path.realpath(toplevel)
        own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the harness: .../pytest_pipecheck
        dirs = [tree, own, sys.prefix, sys.exec_prefix, sys.base_prefix, *sysconfig.get_paths().values()]
        with contextlib.suppress(AttributeError):  # site's functions are missing under some embedders
            dirs += [*site.getsitepackages(), site.getusersitepackages()]
        self.allowed = tuple(dict.fromkeys(os.path.realpath(d) for d in dirs if d))
        self.seen: dict[str, str | None] = {}  # module name -> its file when foreign, None when not

    @staticmethod
    def _under(path: str, root: str) -> bool:
        return path == root or path.startswith(root.rstrip(os.sep) + os.sep)

    def scan(self) -> dict[str, str]:
        """{module: file} of every foreign module imported so far (cumulative: a module stays imported)."""
        for name, module in list(sys.modules.items()):
            if name in self.seen:
                continue
            file = getattr(module, "__file__", None)
            path = os.path.realpath(file) if isinstance(file, str) else ""
            foreign = bool(path) and self._under(path, self.head) and not any(
                self._under(path, root) for root in self.allowed)
            self.seen[name] = path if foreign else None
        return {name: path for name, path in self.seen.items() if path is not None}


def _foreign(found: Any, revision: Revision) -> str:
    """The error of a check whose REV process imported the head's code (``found``: {module: file})."""
    items = sorted(dict(found).items()) if isinstance(found, dict) else []
    shown = ", ".join(f"{name} ({os.path.relpath(str(path), revision.toplevel)})" for name, path in items[:5])
    more = f" and {len(items) - 5} more" if len(items) > 5 else ""
    return (f"REV's process imported {shown}{more} from the head's checkout {revision.toplevel}, outside REV's tree: "
            f"REV's tree has no such module at {revision.sha[:10]} (untracked at the head, build output, a submodule, "
            "or a path on PYTHONPATH into the checkout), so REV's times would be the head's code's")
