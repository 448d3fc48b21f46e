"""``python -m pytest_pipecheck <subcommand>`` (also the ``pipecheck`` console script)."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
