"""sbatch rules about what #SBATCH directives must hold as written: the cluster's names a script must be given (a
partition, account, QOS, reservation or constraint left as a template's placeholder: ``{ partition }``,
``<account>``, ``your-partition``, a value marked ``# CHANGE-ME``; sbatch asks the controller for it and refuses
the job, "invalid partition specified", "Invalid account or account/partition combination"), and no shell
expansion (sbatch reads directives as text: ``--nodes=${NNODES}`` is refused). Read by ``kgen.lint.sbatch``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from kgen.findings import Severity
from kgen.lint.registry import rule
from kgen.lint.sbatch import SbatchScript

KINDS = ("sbatch",)
Found = Iterator[tuple[int, str]]

# Directives that name something of one cluster (a placeholder there is refused by the controller).
_SITE = ("partition", "account", "qos", "reservation", "constraint", "clusters", "cluster-constraint")
_PLACEHOLDER_VALUE = re.compile(
    r"^(?:xyz(?:[-_].*)?|your[-_.]?\w.*|my[-_]?(?:partition|account|project|qos)|changeme|change[-_]me|xxx+"
    r"|placeholder|replace[-_]?me|todo|fixme|tbd)$",
    re.IGNORECASE,
)
_TEMPLATE_MARK = re.compile(r"<[^<>]*>|\{[^{}]*\}")
_CHANGE_ME = re.compile(r"#.*\b(?:CHANGE[-_ ]?ME|FIXME|TODO|EDIT[-_ ]?ME|REPLACE[-_ ]?ME)\b", re.IGNORECASE)


def _why(name: str, value: str | None, text: str) -> str | None:
    body = text.split("#SBATCH", 1)[1]
    code = body.split("#", 1)[0]
    if _TEMPLATE_MARK.search(code):
        return f"{_TEMPLATE_MARK.search(code).group(0)!r} is a template's placeholder"  # type: ignore[union-attr]
    if value and _PLACEHOLDER_VALUE.match(value.strip()):
        return f"{value.strip()!r} is a placeholder"
    if value and _CHANGE_ME.search(body):
        return f"{value.strip()!r} is marked to be changed ({_CHANGE_ME.search(body).group(0).lstrip('# ')!r})"  # type: ignore[union-attr]
    return None


@rule(
    "KG193",
    Severity.ERROR,
    "An #SBATCH partition, account, QOS, reservation or constraint left as a template's placeholder "
    "({ partition }, <account>, your-partition, xyz-cluster, a value marked # CHANGE-ME): sbatch asks the "
    "controller for it and refuses the job (invalid partition specified; invalid account or account/partition "
    "combination), so nothing runs.",
    "Write your cluster's value (sinfo lists the partitions, sacctmgr show assoc user=$USER the accounts), or "
    "delete the line to use the default.",
    kinds=KINDS,
    scope="sbatch",
)
def site_placeholder(s: SbatchScript) -> Found:
    for d in s.directives:
        if d.name not in _SITE:
            continue
        why = _why(d.name, d.value, d.text)
        if why:
            yield d.line, f"#SBATCH --{d.name}: {why}; sbatch refuses the job. Write your cluster's {d.name}"


# ---------------------------------------------------------------------------------------------- KG184
# Directives whose value only names or labels (a literal ${VAR} there is odd, not refused).
_LABELS = {"job-name", "comment", "mail-user", "mail-type", "wckey"}


@rule(
    "KG184",
    Severity.ERROR,
    "An #SBATCH directive holds a shell expansion (--nodes=${NNODES}, --time=$TIME, --output=${LOG}/x): sbatch "
    "reads directives as text and expands no variables, so it refuses the job (invalid node count, time or "
    "partition) or uses the literal text (an output folder named '${LOG}' that does not exist, so the job fails).",
    "Write the value (#SBATCH --nodes=4), or pass it on the command line, where the shell expands it: "
    'sbatch --nodes="$NNODES" job.sbatch (the %j, %x, %u patterns work in --output).',
    kinds=KINDS,
    scope="sbatch",
)
def directive_expansion(s: SbatchScript) -> Found:
    for d in s.directives:
        if d.name in _LABELS or d.value is None:
            continue
        m = re.search(r"\$(?:\{[^}]*\}?|\(|[A-Za-z_]\w*)", d.value)
        if m:
            yield (
                d.line,
                f"#SBATCH --{d.name}={d.value}: sbatch does not expand {m.group(0)} in a directive, so the job is "
                "refused or gets the literal text",
            )
