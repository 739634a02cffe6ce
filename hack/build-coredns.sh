#!/usr/bin/env bash
# Builds CoreDNS, the cluster DNS of the conformance test's cluster (Kubernetes' specs
# reach Services by name), from the tools module in hack/coredns, into hack/tools/bin.
# Static. The build is skipped when the binary there was built from the same go.sum with
# the same Go version.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/stamp.sh
source "$root/hack/lib/stamp.sh"
module="$root/hack/coredns"
bin="$root/hack/tools/bin"

version=$(cd "$module" && go list -m -f '{{.Version}}' github.com/coredns/coredns)
stamp=$(stamp_of "$module")

if up_to_date "$bin/.coredns-stamp" "$stamp" "$bin/coredns"; then
	echo "tools: coredns $version in hack/tools/bin is up to date"
	exit 0
fi

mkdir -p "$bin"
rm -f "$bin/.coredns-stamp"
cd "$module"
echo "tools: building coredns $version (a cold build takes about 2 minutes on 2 cores)"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/coredns" github.com/coredns/coredns
echo "$stamp" >"$bin/.coredns-stamp"
echo "tools: built coredns into hack/tools/bin"
