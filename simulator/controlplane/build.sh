#!/usr/bin/env bash
# Build Kubernetes' control plane, KWOK and etcd from their Go modules into $1 (a directory).
#   simulator/controlplane/build.sh OUT_DIR
# The release is the one controlplane/kubernetes/go.mod requires (written by
# gen_kubernetes_gomod.py); it is stamped into each binary's version, as Kubernetes' own build
# does. Go's module and build caches make a second build a matter of linking.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"
mkdir -p "$out"
# The committed go.mod and go.sum are the whole truth: a build never rewrites them.
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false"
release="$(cd "$here/kubernetes" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
minor="$(echo "$release" | cut -d. -f2)"
# The release's date on the module proxy; its git commit is not in the module (left empty).
released="$(cd "$here/kubernetes" && go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)"
stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $pkg.gitVersion=$release -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  stamp+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit= -X $pkg.buildDate=$released"
done
(cd "$here/kubernetes" && go build -trimpath -ldflags "-s -w$stamp" -o "$out/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl sigs.k8s.io/kwok/cmd/kwok)
(cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3)
# KWOK's stages (v0.8.0 ships none built in): node-initialize, the lease, pod-complete and
# pod-delete; pod-ready is sim/controlplane/stages/pod-ready.yaml, KWOK's with one fix.
kwok_dir="$(cd "$here/kubernetes" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
mkdir -p "$out/kwok-stages"
for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
  pod/fast/pod-complete pod/fast/pod-delete; do
  install -m 0644 "$kwok_dir/kustomize/stage/$stage.yaml" "$out/kwok-stages/"
done
echo "$release" > "$out/RELEASE"
