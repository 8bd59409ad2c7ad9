"""`kgen lint --explain`: how lint reads each training workload, as one info finding per pod template
(the kind's facts, the pods, each training container's launcher and why it counts as training), so a
user can see why a rule did or did not apply."""

from __future__ import annotations

from collections.abc import Iterator

from kgen.findings import Severity
from kgen.launch.argv import Launch
from kgen.lint.model import Workload, explicit_hostname, workloads
from kgen.lint.registry import Context, rule


@rule(
    "KG137",
    Severity.INFO,
    "With --explain: how lint reads a training workload (pods in the world, DNS wiring, rank sources, and "
    "for each training container the launcher recognised through shells and wrappers, or why it counts as "
    "training without one).",
    'Nothing to fix: it explains which rules apply (docs/lint.md, "What lint understands").',
    scope="stream",
)
def explain(docs: list, ctx: Context) -> Iterator:
    if not ctx.explain:
        return
    unit = f"; apply unit: {ctx.unit}" if ctx.unit else ""  # a run of several units names the one seen
    for w in workloads(docs):
        yield w.doc, w.tpl.path or ("metadata", "name"), describe(w) + unit


def describe(w: Workload) -> str:
    role = f" {w.tpl.role!r}" if w.tpl.role else ""
    pods = "? pods" if w.nodes is None else f"{w.nodes} pod{'' if w.nodes == 1 else 's'}"
    parts = [f"training workload: {w.kind} {w.name!r}{role}, {pods} in the world"]
    if w.user_wired and not w.facts.dns_name:
        field = "subdomain" if w.facts.dns == "subdomain" else "serviceName"
        wiring = f"none (no {field}: the pods get no DNS names)"
    elif w.user_wired:
        host = explicit_hostname(w)
        wiring = (f"hostname {host} + " if host else "") + f"{w.facts.dns} {w.facts.dns_name} + your headless Service"
    else:
        wiring = "made by the controller" if w.facts.dns == "managed" else "none"
    if w.facts.master_hosts:
        wiring += f", pod 0 = {w.facts.master_hosts[0]}"
    parts.append(f"DNS: {wiring}")
    if w.tpl.rank_sources:
        parts.append("rank from: " + ", ".join(sorted(w.tpl.rank_sources)))
    if w.tpl.injected_env:
        parts.append("controller sets: " + ", ".join(sorted(w.tpl.injected_env)))
    for c, _path, scripted, why in w.containers:
        launches = [launch for launch in scripted.launches if launch.training]
        if launches:
            text = "; ".join(
                f"{launch.form}{_where(launch)}"
                + (
                    f" {', '.join(f'{k}={v}' for k, v in launch.flags.items() if v is not None)}"
                    if launch.flags
                    else ""
                )
                for launch in launches
            )
        elif scripted.no_command and w.tpl.partial:
            text = f"the runtime's command (not in this object: unknown launcher; {why})"
        elif scripted.no_command:
            text = f"the image's ENTRYPOINT (unknown launcher; {why})"
        else:
            text = f"unknown launcher ({why})"
        parts.append(f"container {c.get('name')!r}: {text}")
    return "; ".join(parts)


def _where(launch: Launch) -> str:
    if launch.origin:
        return f" (in {launch.origin})"
    return " (in a shell script)" if launch.script else ""
