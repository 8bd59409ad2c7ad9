"""LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): ``replicas`` groups of ``size`` pods, a leader
(``leaderTemplate``, else the worker template) and ``size - 1`` workers; pods get
LWS_LEADER_ADDRESS (``<lws>-<group>.<lws>.<ns>``), LWS_GROUP_SIZE and LWS_WORKER_INDEX, through a
headless Service named after the LWS; pods restart (restartPolicy Always), and with
``RecreateGroupOnPodRestart`` a failed pod recreates its whole group."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kgen.lint.kinds.base import LWS_INDEX, Adapter, Facts, Template, as_int, get, unknown_fields

INJECTED = frozenset({"LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX", "LWS_GROUP_INDEX"})
SPEC_KEYS = {"replicas", "leaderWorkerTemplate", "rolloutStrategy", "startupPolicy", "networkConfig"}
NETWORK_KEYS = {"subdomainPolicy", "publishNotReadyAddresses"}
LWT_KEYS = {
    "leaderTemplate",
    "workerTemplate",
    "size",
    "restartPolicy",
    "subGroupPolicy",
    "resizePolicy",
    "volumeClaimTemplates",
}


def _size(doc: Any) -> int | None:
    size = get(doc.data, "spec", "leaderWorkerTemplate", "size")
    if size is None:
        return 1
    return as_int(size)


class LWSAdapter(Adapter):
    kind = "LeaderWorkerSet"
    groups = ("leaderworkerset.x-k8s.io",)

    def templates(self, doc: Any) -> list[Template]:
        lwt = get(doc.data, "spec", "leaderWorkerTemplate")
        if not isinstance(lwt, dict):
            return []
        size = _size(doc)
        out = []
        base = ("spec", "leaderWorkerTemplate")
        leader, worker = lwt.get("leaderTemplate"), lwt.get("workerTemplate")
        if isinstance(leader, dict):
            out.append(
                Template(
                    leader,
                    base + ("leaderTemplate",),
                    1,
                    role="leader",
                    injected_env=INJECTED,
                    rank_sources=frozenset({LWS_INDEX}),
                )
            )
        if isinstance(worker, dict):
            pods = None if size is None else (size - 1 if isinstance(leader, dict) else size)
            out.append(
                Template(
                    worker,
                    base + ("workerTemplate",),
                    pods,
                    role="worker",
                    injected_env=INJECTED,
                    rank_sources=frozenset({LWS_INDEX}),
                )
            )
        return out

    def facts(self, doc: Any) -> Facts:
        facts = Facts(
            "LeaderWorkerSet", _size(doc), "leaderWorkerTemplate.size", dns="managed", runs_to_completion=False
        )
        facts.master_hosts = (f"{doc.name}-0.{doc.name}", f"{doc.name}-0")
        facts.service_like = doc.name
        facts.pod_identity = {"leaderworkerset.sigs.k8s.io/name": doc.name}
        facts.pod0_index = {
            "leaderworkerset.sigs.k8s.io/group-index": "0",
            "leaderworkerset.sigs.k8s.io/worker-index": "0",
        }
        return facts

    def structure(self, doc: Any, ctx: Any) -> Iterator[tuple[tuple, str]]:
        spec = doc.data.get("spec")
        if not isinstance(spec, dict):
            yield ("spec",), "spec must be a mapping with leaderWorkerTemplate"
            return
        yield from unknown_fields(
            spec, SPEC_KEYS, ("spec",), "unknown field spec.{key} (LeaderWorkerSet has {allowed})"
        )
        lwt = spec.get("leaderWorkerTemplate")
        if not isinstance(lwt, dict):
            yield ("spec",), "leaderWorkerTemplate is required"
            return
        yield from unknown_fields(
            lwt, LWT_KEYS, ("spec", "leaderWorkerTemplate"), "unknown field leaderWorkerTemplate.{key}"
        )
        if not isinstance(get(lwt, "workerTemplate", "spec"), dict):
            yield ("spec", "leaderWorkerTemplate"), "workerTemplate (a pod template) is required"
        size = lwt.get("size")
        if size is not None and (as_int(size) is None or size < 1):
            yield ("spec", "leaderWorkerTemplate", "size"), f"size must be an integer >= 1, got {size!r}"
        rp = lwt.get("restartPolicy")
        if rp is not None and rp not in ("RecreateGroupOnPodRestart", "None", "Default", "RecreateGroupAfterStart"):
            yield (
                ("spec", "leaderWorkerTemplate", "restartPolicy"),
                f"restartPolicy {rp!r} must be RecreateGroupOnPodRestart or None",
            )
        sp = spec.get("startupPolicy")
        if sp is not None and sp not in ("LeaderCreated", "LeaderReady"):
            yield ("spec", "startupPolicy"), f"startupPolicy {sp!r} must be LeaderCreated or LeaderReady"
        net = spec.get("networkConfig")
        if net is not None and not isinstance(net, dict):
            yield ("spec", "networkConfig"), "networkConfig must be a mapping (subdomainPolicy)"
        elif isinstance(net, dict):
            # NetworkConfig has only subdomainPolicy (publishNotReadyAddresses: the group-restart KEP); the
            # leader Service's ports of some docs examples are no field: the API server rejects the object.
            yield from unknown_fields(
                net, NETWORK_KEYS, ("spec", "networkConfig"), "unknown field networkConfig.{key} ({allowed})"
            )
            policy = net.get("subdomainPolicy")
            if policy is not None and policy not in ("Shared", "UniquePerReplica"):
                yield (
                    ("spec", "networkConfig", "subdomainPolicy"),
                    f"subdomainPolicy {policy!r} must be Shared or UniquePerReplica",
                )


ADAPTERS = [LWSAdapter()]
