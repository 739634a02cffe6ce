#!/usr/bin/env bash
# Builds the helm binary that the chart's tests run (helm lint, helm template), from the
# tools module in hack/helm, into hack/tools/bin. The build is skipped when the binary there
# was built from the same go.sum with the same Go version.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/stamp.sh
source "$root/hack/lib/stamp.sh"
module="$root/hack/helm"
bin="$root/hack/tools/bin"

helm_version=$(awk '$1 == "helm.sh/helm/v4" { print $2; exit }' "$module/go.mod")
stamp=$(stamp_of "$module")

if up_to_date "$bin/.helm-stamp" "$stamp" "$bin/helm"; then
	echo "tools: helm $helm_version in hack/tools/bin is up to date"
	exit 0
fi

mkdir -p "$bin"
rm -f "$bin/.helm-stamp"
cd "$module"
echo "tools: building helm $helm_version (a cold build takes about 5 minutes on 2 idle cores)"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version" -o "$bin/helm" helm.sh/helm/v4/cmd/helm
echo "$stamp" >"$bin/.helm-stamp"
echo "tools: built hack/tools/bin/helm"
