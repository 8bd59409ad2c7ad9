#!/usr/bin/env bash
# Builds the control plane tests/k8s runs against, from source through the Go module proxy:
#   kube-apiserver, kube-controller-manager, kube-scheduler  (k8s.io/kubernetes, kubernetes/go.mod here)
#   etcd                                                     (go.etcd.io/etcd/server/v3, etcd/go.mod here)
#   jobset-controller + its CRDs and webhook configuration   (sigs.k8s.io/jobset, jobset/go.mod here)
#   kueue (controller) + its CRDs and webhook configuration  (sigs.k8s.io/kueue)
# into a cache keyed by the versions, the Go toolchain and these files:
#   ${KGEN_CONTROLPLANE_CACHE:-~/.cache/kgen-controlplane}/<key>/{bin,crds}
# A second run with the same key builds nothing. Prints the bin folder's path as its last line.
# Each part is built on its own and stamped when done: a part that fails (say the proxy stops serving it)
# leaves the others usable; the tests skip (or, in CI, fail) naming what is absent.
# Cold: about 25 min on 2 busy cores (mostly kube-apiserver); warm: well under a second.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

K8S_VERSION=v1.37.2
ETCD_VERSION=v3.6.13       # must match etcd/go.mod
JOBSET_VERSION=v0.12.0     # the newest release the proxy serves (v0.12.1+ answer 403); must match jobset/go.mod
KUEUE_VERSION=v0.17.0

export GOFLAGS="${GOFLAGS:--buildvcs=false}"
# The Kubernetes tree names Go 1.26 (go.mod `go 1.26.0`, .go-version 1.26.10); a local 1.26.x builds it.
# (A build with a newer Go minor than the tree's broke the API server's OpenAPI v3 handler once.)
# KGEN_GOTOOLCHAIN=go1.26.10 fetches that exact toolchain through the proxy instead.
export GOTOOLCHAIN="${KGEN_GOTOOLCHAIN:-local}"
command -v go >/dev/null || { echo "build.sh: no Go toolchain on PATH (Go >= 1.26 builds the control plane)" >&2; exit 3; }
gov="$(go env GOVERSION)"
case "$gov" in go1.2[6-9]*|go1.[3-9]*) ;; *) echo "build.sh: $gov is too old: Kubernetes $K8S_VERSION needs Go >= 1.26" >&2; exit 3;; esac

key="$( { echo "$K8S_VERSION $ETCD_VERSION $JOBSET_VERSION $KUEUE_VERSION $gov $(go env GOARCH)"
          cat "$here/kubernetes/go.mod" "$here/etcd/go.mod"; } | sha256sum | cut -c1-16)"
root="${KGEN_CONTROLPLANE_CACHE:-$HOME/.cache/kgen-controlplane}/k8s-${K8S_VERSION}-${key}"
bin="$root/bin"
mkdir -p "$bin" "$root/crds/jobset" "$root/crds/kueue" "$root/src"
ldflags="-s -w"
log() { echo "build.sh: $(date -u +%H:%M:%S) $*" >&2; }

part() {  # part NAME COMMAND...: runs COMMAND unless NAME is stamped done
  local name=$1; shift
  if [ -e "$root/done.$name" ]; then return 0; fi
  local t0=$SECONDS
  log "building $name"
  if "$@"; then
    touch "$root/done.$name"; log "$name built in $((SECONDS - t0)) s"
  else
    log "$name FAILED after $((SECONDS - t0)) s"; failed="$failed $name"
  fi
}

build_kubernetes() {
  local src="$root/src/kubernetes"
  mkdir -p "$src" && cp "$here/kubernetes/go.mod" "$src/go.mod"
  local v=k8s.io/component-base/version minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  (cd "$src" && go build -mod=mod -trimpath \
    -ldflags="$ldflags -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean" \
    -o "$bin/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler)
}

build_etcd() {
  local src="$root/src/etcd"
  mkdir -p "$src" && cp "$here/etcd/go.mod" "$src/go.mod"
  (cd "$src" && go build -mod=mod -trimpath -ldflags="$ldflags" -o "$bin/etcd" go.etcd.io/etcd/server/v3)
}

module_dir() {  # module_dir MODULE VERSION: downloads it, prints its folder in the module cache
  go mod download -json "$1@$2" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

build_jobset() {
  local dir; dir="$(module_dir sigs.k8s.io/jobset "$JOBSET_VERSION")" && [ -n "$dir" ] || return 1
  local src="$root/src/jobset"
  mkdir -p "$src" && cp "$here/jobset/go.mod" "$src/go.mod"
  cp "$dir"/config/components/crd/bases/*.yaml "$root/crds/jobset/" &&
    (cd "$src" && go build -mod=mod -trimpath -ldflags="$ldflags" -o "$bin/jobset-controller" sigs.k8s.io/jobset)
}

build_kueue() {
  local dir; dir="$(module_dir sigs.k8s.io/kueue "$KUEUE_VERSION")" && [ -n "$dir" ] || return 1
  cp "$dir"/config/components/crd/bases/*.yaml "$root/crds/kueue/" &&
    GOBIN="$bin" go install -trimpath -ldflags="$ldflags" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
}

copy_manifests() {  # the CRDs and the webhook configurations (service-based; the fixture points them at loopback)
  local dir
  dir="$(module_dir sigs.k8s.io/jobset "$JOBSET_VERSION")" && [ -n "$dir" ] || return 1
  cp "$dir"/config/components/crd/bases/*.yaml "$root/crds/jobset/" &&
    cp "$dir/config/components/webhook/manifests.yaml" "$root/crds/jobset-webhooks.yaml" || return 1
  dir="$(module_dir sigs.k8s.io/kueue "$KUEUE_VERSION")" && [ -n "$dir" ] || return 1
  cp "$dir"/config/components/crd/bases/*.yaml "$root/crds/kueue/" &&
    cp "$dir/config/components/webhook/manifests.yaml" "$root/crds/kueue-webhooks.yaml"
}

failed=""
t_all=$SECONDS
part kubernetes build_kubernetes
part etcd build_etcd
part jobset build_jobset
part kueue build_kueue
part manifests copy_manifests
chmod -R u+w "$root/crds"
log "done in $((SECONDS - t_all)) s; key $key${failed:+; FAILED:$failed}"
echo "$bin"
[ -z "$failed" ]
