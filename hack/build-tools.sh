#!/usr/bin/env bash
# Builds the kube-apiserver and etcd that the integration tests run against, from the
# tools module in hack/tools, into hack/tools/bin. The build is skipped when the
# binaries there were built from the same go.sum with the same Go version.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/hack/tools"
bin="$tools/bin"

k8s_version=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$tools/go.mod")
stamp="$(go env GOVERSION) $(sha256sum "$tools/go.sum" | cut -d' ' -f1)"

if [[ -x "$bin/kube-apiserver" && -x "$bin/etcd" && -f "$bin/.stamp" && "$(cat "$bin/.stamp")" == "$stamp" ]]; then
	echo "tools: kube-apiserver $k8s_version and etcd in hack/tools/bin are up to date"
	exit 0
fi

major=${k8s_version#v}; major=${major%%.*}
minor=${k8s_version#v*.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"

mkdir -p "$bin"
rm -f "$bin/.stamp"
cd "$tools"
echo "tools: building etcd (a cold build of both takes about 8 minutes on 2 cores)"
CGO_ENABLED=0 go build -trimpath -o "$bin/etcd" go.etcd.io/etcd/server/v3
echo "tools: building kube-apiserver $k8s_version"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
echo "$stamp" >"$bin/.stamp"
echo "tools: built hack/tools/bin/kube-apiserver and hack/tools/bin/etcd"
