#!/usr/bin/env bash
# Builds containerd, containerd-shim-runc-v2 and ctr, the container runtime of the kubelets
# that the install test runs (test/harness/node), from the tools module in hack/containerd, into
# hack/tools/bin. Static, without the snapshotters that need cgo. The build is skipped when
# the binaries there were built from the same go.sum with the same Go version.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/stamp.sh
source "$root/hack/lib/stamp.sh"
module="$root/hack/containerd"
bin="$root/hack/tools/bin"

version=$(awk '$1 == "github.com/containerd/containerd/v2" { print $2; exit }' "$module/go.mod")
stamp=$(stamp_of "$module")
progs=(containerd containerd-shim-runc-v2 ctr)

if up_to_date "$bin/.containerd-stamp" "$stamp" "${progs[@]/#/$bin/}"; then
	echo "tools: ${progs[*]} $version in hack/tools/bin are up to date"
	exit 0
fi

mkdir -p "$bin"
rm -f "$bin/.containerd-stamp"
cd "$module"
pkg=github.com/containerd/containerd/v2/version
for b in "${progs[@]}"; do
	echo "tools: building $b $version (a cold build of all three takes about a minute on 2 idle cores)"
	CGO_ENABLED=0 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
		-ldflags "-s -w -X $pkg.Version=$version -X $pkg.Package=github.com/containerd/containerd/v2" \
		-o "$bin/$b" "github.com/containerd/containerd/v2/cmd/$b"
done
echo "$stamp" >"$bin/.containerd-stamp"
echo "tools: built ${progs[*]} into hack/tools/bin"
