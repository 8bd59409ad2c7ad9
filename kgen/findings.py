"""Findings: what schema validation and lint rules report. Data, not exceptions."""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Finding(NamedTuple):
    rule_id: str  # "KG012"; JSON-schema errors are KG010 (see docs/lint.md for every id)
    severity: Severity
    message: str  # one line, says how to fix it
    file: str
    line: int = 0
    column: int = 0
    path: str = ""  # field path, e.g. spec.template.spec.containers[0].env[3].value
    kind: str = ""
    name: str = ""
    unit: str = ""  # kgen lint: the apply unit it came from ("envs/prod/"; kgen.lint.units); not in text()

    def text(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}" if self.line else self.file
        field = f" [{self.path}]" if self.path else ""
        return f"{where}: {self.rule_id} {self.severity.value}: {self.message}{field}"
