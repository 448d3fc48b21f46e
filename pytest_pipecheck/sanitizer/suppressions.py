"""Validate compute-sanitizer suppression files and read the reason written for each record.

compute-sanitizer's suppressions are XML in the same schema as its ``--xml --save`` output: a
``<ComputeSanitizerOutput>`` root holding ``<record>`` elements (typically produced by a run with
``--xml --save`` and then trimmed to the fields that must match). pipecheck asks that each record be
preceded by an XML comment giving the reason it is a false positive; the reasons are shown in the
run's output so every suppression stays reviewed.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from ..results import PipecheckError

__all__ = ["Suppression", "SuppressionError", "load_suppressions"]


class SuppressionError(PipecheckError):
    """A suppression file that does not exist or does not parse; the message names the file."""


@dataclass(frozen=True)
class Suppression:
    kind: str
    what: str
    reason: str


def load_suppressions(path: str, source: str = "configuration") -> list[Suppression]:
    """Parse ``path``; raise SuppressionError naming the file and ``source`` when it is invalid."""
    where = f"suppressions file {path!r} (from {source})"
    if not os.path.isfile(path):
        raise SuppressionError(f"{where} does not exist")
    try:
        parser = ET.XMLParser(target=ET.TreeBuilder(insert_comments=True))
        with open(path, "rb") as fh:
            root = ET.parse(fh, parser=parser).getroot()
    except (ET.ParseError, OSError) as exc:
        raise SuppressionError(f"{where} is not valid XML: {exc}") from None
    if root.tag != "ComputeSanitizerOutput":
        raise SuppressionError(f"{where} must have a <ComputeSanitizerOutput> root element, not <{root.tag}>")
    out: list[Suppression] = []
    reason = ""
    for child in root:
        if child.tag is ET.Comment:
            reason = (child.text or "").strip()
            continue
        if child.tag != "record":
            raise SuppressionError(f"{where}: unexpected element <{child.tag}>; only <record> is allowed")
        kind = (child.findtext("kind") or "").strip()
        if not kind:
            raise SuppressionError(f"{where}: record {len(out) + 1} has no <kind>")
        what = (child.findtext("what/text") or child.findtext("where/func") or "").strip()
        out.append(Suppression(kind, what, reason or "(no reason given)"))
        reason = ""
    if not out:
        raise SuppressionError(f"{where} holds no <record>")
    return out
