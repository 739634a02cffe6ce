#!/usr/bin/env bash
# Builds the golangci-lint that make lint runs, from the tools module in
# hack/golangci-lint, into hack/tools/bin. The build is skipped when the binary there was
# built from the same go.sum with the same Go version.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/stamp.sh
source "$root/hack/lib/stamp.sh"
module="$root/hack/golangci-lint"
bin="$root/hack/tools/bin"

version=$(awk '$1 == "github.com/golangci/golangci-lint/v2" { print $2; exit }' "$module/go.mod")
stamp=$(stamp_of "$module")

if up_to_date "$bin/.golangci-lint-stamp" "$stamp" "$bin/golangci-lint"; then
	echo "tools: golangci-lint $version in hack/tools/bin is up to date"
	exit 0
fi

mkdir -p "$bin"
rm -f "$bin/.golangci-lint-stamp"
cd "$module"
echo "tools: building golangci-lint $version (a cold build takes about 2 minutes on 2 idle cores)"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$bin/golangci-lint" github.com/golangci/golangci-lint/v2/cmd/golangci-lint
echo "$stamp" >"$bin/.golangci-lint-stamp"
echo "tools: built hack/tools/bin/golangci-lint"
