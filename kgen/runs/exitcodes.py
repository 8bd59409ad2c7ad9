"""What a kgen trainer container's exit code means: the one table to extend.

``role`` drives the root-cause search (kgen.runs.verdict):
- ``cause``: the failure may be where a run went wrong (a crash, a kill, a config error);
- ``victim``: a fail-stop reaction to another rank's failure; never the root cause;
- ``stopped``: stopped from outside (SIGTERM; 6: stopped by user, the whole group); a cause only when
  nothing else explains it (an eviction, a deleted pod, a user's stop), a consequence when the Job
  controller was already failing the Job.
"""

from __future__ import annotations

from typing import NamedTuple


class ExitMeaning(NamedTuple):
    code: int
    meaning: str
    role: str  # cause | victim | stopped | ok


# kgen's own codes come from entrypoint/kgen_entrypoint.py (EXIT_* constants); the others are
# torchrun's and the kernel's (128+N after signal N).
TABLE: dict[int, ExitMeaning] = {
    m.code: m
    for m in (
        ExitMeaning(0, "completed", "ok"),
        ExitMeaning(1, "the training script failed (torchrun exit 1)", "cause"),
        ExitMeaning(2, "bad kgen configuration or usage (entrypoint exit 2)", "cause"),
        ExitMeaning(3, "node 0 never became reachable (KGEN_MASTER_WAIT_TIMEOUT)", "cause"),
        ExitMeaning(4, "the group never formed: some ranks did not connect (KGEN_RDZV_TIMEOUT)", "cause"),
        # 5 and 76 come with in-place re-formation (KGEN_MAX_REFORMATIONS > 0)
        ExitMeaning(5, "the run failed as a whole (re-formation limit, another node's failure)", "victim"),
        ExitMeaning(6, "stopped by user (Ctrl-C on a node, kgen_entrypoint.py --stop, or kgen stop)", "stopped"),
        # 70 (EX_SOFTWARE): kgen's own code failed on that node; torchrun itself exits 1 for any worker's error
        ExitMeaning(70, "kgen entrypoint internal error: a bug in kgen, not the training script (report it)", "cause"),
        ExitMeaning(75, "fail-stop: a peer died, froze or was cut off", "victim"),
        ExitMeaning(76, "dropped from the group: this node froze or was cut off", "cause"),
        # 77: the hang watchdog (hang.timeout): node 0's log has the report (kgen.runs.stacks.hang_record)
        ExitMeaning(77, "hang: no rank made progress for hang.timeout (the report names ranks and frames)", "cause"),
        # 78: the health gate (health.gate fail): node 0's log names the node (kgen.runs.health)
        ExitMeaning(78, "the health gate failed before training (health.gate fail; the node is named)", "cause"),
        ExitMeaning(130, "interrupted (SIGINT)", "stopped"),
        ExitMeaning(134, "aborted (SIGABRT)", "cause"),
        ExitMeaning(137, "killed (SIGKILL)", "cause"),
        ExitMeaning(139, "segmentation fault (SIGSEGV)", "cause"),
        ExitMeaning(143, "stopped by SIGTERM", "stopped"),
    )
}

SIGNALS = {1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}


def meaning(code: int | None, reason: str = "") -> ExitMeaning:
    """The meaning of ``code``; ``reason`` is the container state's reason (e.g. OOMKilled)."""
    if code is None:
        return ExitMeaning(-1, "no exit code", "stopped")
    if reason == "OOMKilled":
        return ExitMeaning(code, "OOMKilled (out of memory)", "cause")
    if code in TABLE:
        return TABLE[code]
    if code > 128:
        sig = SIGNALS.get(code - 128, f"signal {code - 128}")
        return ExitMeaning(code, f"killed by {sig}", "cause")
    return ExitMeaning(code, f"the training script failed (exit {code})", "cause")


def is_victim(code: int | None) -> bool:
    return code is not None and meaning(code).role == "victim"
