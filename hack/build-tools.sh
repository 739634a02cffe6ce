#!/usr/bin/env bash
# Builds the programs of the test control plane from the tools module in hack/tools into
# hack/tools/bin: the ones named as arguments, or all of etcd, kube-apiserver,
# kube-controller-manager, kube-proxy, kube-scheduler, kubelet and kubectl, and for the
# conformance test e2e.test (Kubernetes' own network specs, hack/tools/e2e), ginkgo, and
# agnhost, the program of the image those specs run. `make demo` builds only the four it
# runs.
# A program is not built again while it was built from the same go.sum with the same Go
# version (its stamp file, hack/tools/bin/.<name>.stamp, says which).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/stamp.sh
source "$root/hack/lib/stamp.sh"
tools="$root/hack/tools"
bin="$tools/bin"

all=(etcd kube-apiserver kube-controller-manager kube-proxy kube-scheduler kubelet kubectl)
conformance=(e2e.test ginkgo agnhost)
if [[ $# -gt 0 ]]; then
	want=("$@")
else
	want=("${all[@]}" "${conformance[@]}")
fi
for b in "${want[@]}"; do
	[[ " ${all[*]} ${conformance[*]} " == *" $b "* ]] || { echo "tools: unknown program $b; known: ${all[*]} ${conformance[*]}" >&2; exit 2; }
done

k8s_version=$(cd "$tools" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
stamp=$(stamp_of "$tools")
# e2e.test is built from the suite file of hack/tools/e2e as well as from go.sum.
e2e_stamp="$stamp $(cat "$tools"/e2e/*.go | sha256sum | cut -d' ' -f1)"
stamp_for() { if [[ $1 == e2e.test ]]; then echo "$e2e_stamp"; else echo "$stamp"; fi; }

build=()
for b in "${want[@]}"; do
	up_to_date "$bin/.$b.stamp" "$(stamp_for "$b")" "$bin/$b" || build+=("$b")
done
if [[ ${#build[@]} -eq 0 ]]; then
	echo "tools: ${want[*]} ($k8s_version) in hack/tools/bin are up to date"
	exit 0
fi

major=${k8s_version#v}; major=${major%%.*}
minor=${k8s_version#v*.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"

mkdir -p "$bin"
cd "$tools"
# The Kubernetes programs share most packages with kube-apiserver, so the first costs the
# most; docs/development.md (`make tools`: the test control plane) gives the measured cold times.
for b in "${build[@]}"; do
	rm -f "$bin/.$b.stamp"
	if [[ $b == etcd ]]; then
		echo "tools: building etcd"
		CGO_ENABLED=0 go build -trimpath -o "$bin/etcd" go.etcd.io/etcd/server/v3
	elif [[ $b == e2e.test ]]; then
		echo "tools: building e2e.test $k8s_version (the network specs)"
		CGO_ENABLED=0 go test -c -trimpath -ldflags "$ldflags" -o "$bin/e2e.test" ./e2e
	elif [[ $b == ginkgo ]]; then
		echo "tools: building ginkgo"
		CGO_ENABLED=0 go build -trimpath -o "$bin/ginkgo" github.com/onsi/ginkgo/v2/ginkgo
	elif [[ $b == agnhost ]]; then
		echo "tools: building agnhost $k8s_version"
		CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/agnhost" k8s.io/kubernetes/test/images/agnhost
	else
		echo "tools: building $b $k8s_version"
		CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/$b" "k8s.io/kubernetes/cmd/$b"
	fi
	stamp_for "$b" >"$bin/.$b.stamp"
done
echo "tools: built ${build[*]} into hack/tools/bin"
