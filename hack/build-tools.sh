#!/usr/bin/env bash
# Builds the kube-apiserver, etcd, kube-controller-manager, kube-proxy, kube-scheduler,
# kubelet and kubectl that the integration tests run against, from the tools module in
# hack/tools, into hack/tools/bin.
# The build is skipped when the binaries there were built from the same go.sum with the
# same Go version.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/hack/tools"
bin="$tools/bin"

k8s_version=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$tools/go.mod")
stamp="$(go env GOVERSION) $(sha256sum "$tools/go.sum" | cut -d' ' -f1)"

# The Kubernetes programs, built from k8s.io/kubernetes/cmd/<name>.
kube=(kube-apiserver kube-controller-manager kube-proxy kube-scheduler kubelet kubectl)

up_to_date=true
for b in etcd "${kube[@]}"; do
	[[ -x "$bin/$b" ]] || up_to_date=false
done
if $up_to_date && [[ -f "$bin/.stamp" && "$(cat "$bin/.stamp")" == "$stamp" ]]; then
	echo "tools: etcd and ${kube[*]} $k8s_version in hack/tools/bin are up to date"
	exit 0
fi

major=${k8s_version#v}; major=${major%%.*}
minor=${k8s_version#v*.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"

mkdir -p "$bin"
rm -f "$bin/.stamp"
cd "$tools"
# Measured with empty build caches: 63 minutes on 2 cores shared with other jobs (load
# about 10; 33 CPU-minutes), of which kube-controller-manager and kube-proxy took 9, as
# they share most packages with kube-apiserver. etcd and kube-apiserver alone took 8
# minutes on 2 idle cores, so expect about 10 there.
echo "tools: building etcd (a cold build of all seven took 15 minutes on 2 idle cores, up to an hour on a busy machine)"
CGO_ENABLED=0 go build -trimpath -o "$bin/etcd" go.etcd.io/etcd/server/v3
for b in "${kube[@]}"; do
	echo "tools: building $b $k8s_version"
	CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/$b" "k8s.io/kubernetes/cmd/$b"
done
echo "$stamp" >"$bin/.stamp"
echo "tools: built etcd and ${kube[*]} into hack/tools/bin"
