"""Image references that parse but never pull: a placeholder left in (``your-registry/train:v1``) and a
local build's unqualified name pulled from Docker Hub (``medical-training:latest`` with ``imagePullPolicy:
Always``). KG041 reports references the kubelet cannot parse at all; these rules read the ones it can.

How the kubelet's runtime reads a reference (distribution/reference's normalisation, as containerd and
CRI-O do): a first component without ``.`` or ``:`` (and not ``localhost``) is no registry host, so the
image is on Docker Hub (``docker.io``); a name of one component is in Docker Hub's ``library/``
namespace, where only Docker's official images live.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from kgen import k8s
from kgen.findings import Severity
from kgen.lint import kinds
from kgen.lint.registry import Context, rule

E, W = Severity.ERROR, Severity.WARNING

# A path component that is a documentation placeholder: "your-registry", "your_project", "yourrepo",
# "myregistry" (Azure's and others' samples), AWS's sample account id, "<...>" is KG041's (does not parse).
_PLACEHOLDER = re.compile(
    r"^(?:your[-_.].*|your(?:registry|repo|repository|image|project|org|organization|account|docker|dockerhub"
    r"|name|user|username|company|team|namespace|domain|bucket|cluster|tag|version)"
    r"|my-?registry|my-?repo(?:sitory)?|my-?docker-?repo|registry\.example\.(?:com|org)|example\.(?:com|org)"
    r"|aws[-_]account[-_]id|account[-_]id|123456789012|project[-_]id|changeme|change[-_]me|replace[-_]?me"
    r"|placeholder|xxx+)$",
    re.IGNORECASE,
)
# Docker Hub's official images (docker.io/library/...): an unqualified one-component name outside this list
# names nothing Docker Hub serves. Kept to the images people run in training and tooling pods.
OFFICIAL = frozenset(
    """
    adminer aerospike almalinux alpine amazoncorretto amazonlinux arangodb archlinux backdrop bash bonita buildpack-deps
    busybox caddy cassandra chronograf cirros clearlinux clojure composer consul couchbase couchdb crate dart debian
    docker drupal eclipse-mosquitto eclipse-temurin elasticsearch elixir emqx erlang fedora flink fluentd gcc gazebo
    ghost golang gradle groovy haproxy haskell hello-world httpd hylang ibmjava influxdb irssi jetty jruby julia
    kapacitor kibana kong krakend lightstreamer liquibase logstash mageia mariadb matomo maven mediawiki memcached mongo
    mongo-express mono mysql nats neo4j neurodebian nextcloud nginx node notary odoo open-liberty openjdk oraclelinux
    orientdb perl photon php php-zendserver phpmyadmin plone postfixadmin postgres pypy python r-base rabbitmq redis
    redmine registry rethinkdb rocket.chat rockylinux ros ruby rust sapmachine satosa silverpeas solr sonarqube spark
    storm swift swipl telegraf tomcat tomee traefik ubuntu varnish vault websphere-liberty wordpress xwiki yourls znc
    zookeeper centos ibm-semeru-runtimes unit percona friendica hitch joomla monica nats-streaming api-firewall
    """.split()
)


def _is_placeholder(component: str) -> bool:
    return bool(_PLACEHOLDER.match(component))


@lru_cache(maxsize=4096)
def split_image(image: str) -> tuple[str, list[str], str]:
    """(registry host or "", path components, tag) of a reference that parses (digest dropped)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    tag = ""
    if ":" in last:
        tag = last.split(":", 1)[1]
        name = name[: len(name) - len(tag) - 1]
    parts = name.split("/")
    host = ""
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        host = parts.pop(0)
    return host, parts, tag


@lru_cache(maxsize=4096)
def placeholder(image: str) -> str | None:
    """The placeholder component of a reference that parses, or None."""
    host, parts, _tag = split_image(image)
    return next((p for p in [host.split(".")[0] if host else "", host, *parts] if p and _is_placeholder(p)), None)


def _containers(doc: Any) -> list[tuple[dict, tuple]]:
    found = [cp for spec, base in kinds.pod_specs(doc) for cp in k8s.containers(spec, base)]
    found += [cp for t in kinds.templates(doc) if t.containers is not None for cp in t.containers]  # TrainJob
    return found


def _images(doc: Any) -> list[tuple[dict, tuple, str]]:
    """(container, path, image) of every container whose image parses (once per document: two rules ask)."""
    memo = doc.memo
    got = memo.get("kg_images")
    if got is None:
        got = memo["kg_images"] = [
            (c, path, image)
            for c, path in _containers(doc)
            for image in [c.get("image")]
            if isinstance(image, str) and image and k8s.is_image_reference(image)
        ]
    return got


@rule(
    "KG181",
    E,
    "An image reference that parses but is a documentation placeholder (your-registry/train:v1, "
    "your-docker-image, myregistry.azurecr.io/..., 123456789012.dkr.ecr...): no registry serves it, so the "
    "pull fails (ErrImagePull, ImagePullBackOff) and the pods never start.",
    "Set image to the image you built and pushed, e.g. ghcr.io/org/train:1.4 (render templates before applying).",
    templates_only=True,
)
def placeholder_image(doc: Any, ctx: Context) -> Iterator:
    for _c, path, image in _images(doc):
        hit = placeholder(image)
        if hit is not None:
            yield (
                path + ("image",),
                f"image {image!r} is a placeholder ({hit!r}): no registry serves it, so the pods never start "
                "(ErrImagePull); set the image you pushed",
            )


def _local_names(doc: Any) -> Iterator[tuple[dict, tuple, str, str, str]]:
    """(container, path, image, name, tag) of the images named by one component that is no Docker Hub
    official image: a local build's name, which docker.io/library/ does not serve."""
    for c, path, image in _images(doc):
        if "/" in image:
            continue  # a registry or a namespace: not Docker Hub's library
        host, parts, tag = split_image(image)
        if host or len(parts) != 1 or parts[0] in OFFICIAL or _is_placeholder(parts[0]):
            continue
        yield c, path, image, parts[0], tag


def pull_policy(c: dict, tag: str, digest: bool) -> tuple[str, bool]:
    """(the container's effective imagePullPolicy, whether it is written): the API server's default is
    Always for :latest or no tag (without a digest), IfNotPresent otherwise."""
    policy = c.get("imagePullPolicy")
    if isinstance(policy, str) and policy:
        return policy, True
    return ("Always" if not digest and tag in ("", "latest") else "IfNotPresent"), False


@rule(
    "KG182",
    E,
    "A one-component image name that is not a Docker Hub official image (medical-training:latest, a local "
    "build) pulled with imagePullPolicy: Always (written, or the default for :latest and no tag): the runtime "
    "pulls docker.io/library/<name>, which does not exist, so the pods never start; an image loaded into the "
    "nodes (kind load, docker build on the node) is never used.",
    "Push the image to a registry and use its full name (ghcr.io/org/medical-training:1.0), or, for an image "
    "loaded into the nodes, set imagePullPolicy: IfNotPresent (or Never) and a version tag.",
    templates_only=True,
)
def unqualified_pulled_always(doc: Any, ctx: Context) -> Iterator:
    for c, path, image, name, tag in _local_names(doc):
        policy, written = pull_policy(c, tag, "@" in image)
        if policy != "Always":
            continue
        default = f"the default imagePullPolicy for {':' + tag if tag else 'no tag'} (Always)"
        why = "imagePullPolicy: Always" if written else default
        yield (
            path + (("imagePullPolicy",) if written else ("image",)),
            f"image {image!r} has no registry and is not a Docker Hub official image; with {why} the runtime "
            f"pulls docker.io/library/{name}, which does not exist, and the pods never start",
        )


@rule(
    "KG207",
    W,
    "A one-component image name that is not a Docker Hub official image (llmtrain:dev, a local build) with "
    "imagePullPolicy IfNotPresent or Never (written, or the default for a version tag): the pods start only on "
    "nodes the image was loaded into by hand (kind load, minikube, docker build on the node); on any other "
    "node the pull of docker.io/library/<name> fails (ErrImagePull, or ErrImageNeverPull). Reported for "
    "workloads of several pods, which need it on every node they land on (one pod on a one-node dev cluster "
    "is KG182's advice).",
    "Push the image to a registry the nodes pull from and use its full name (ghcr.io/org/llmtrain:1.0).",
    templates_only=True,
)
def unqualified_local_image(doc: Any, ctx: Context) -> Iterator:
    facts = kinds.facts(doc)
    if facts is None or facts.nodes is None or facts.nodes <= 1:
        return
    for c, path, image, name, tag in _local_names(doc):
        policy, written = pull_policy(c, tag, "@" in image)
        if policy not in ("IfNotPresent", "Never"):
            continue
        how = f"imagePullPolicy: {policy}" if written else "the default imagePullPolicy for a version tag"
        yield (
            path + ("image",),
            f"image {image!r} has no registry and is not a Docker Hub official image: with {how} the "
            f"{facts.nodes} pods run only on nodes it was loaded into by hand; elsewhere the pull of "
            f"docker.io/library/{name} fails and the pod never starts; push it to a registry and use its full name",
        )
