#!/usr/bin/env bash
# Installs, from Debian's packages, every system program that `make demo` (install-deps.sh
# demo) or `make test` (install-deps.sh test) runs, and checks each is then on PATH. It is
# idempotent: with everything there it only checks, in well under a second. As root it
# installs what is missing; otherwise it names what is missing and the command that
# installs it, and exits 1. The Go programs (the control plane, helm, containerd) are
# built by make, not here.
#
#   hack/install-deps.sh demo|test [--check]
#
# --check only reports: exit 0 when nothing is missing, 1 otherwise.
set -euo pipefail

usage() {
	echo "usage: $0 demo|test [--check]" >&2
	exit 2
}
[[ $# -ge 1 ]] || usage
what=$1
check_only=false
case "${2:-}" in
"") ;;
--check) check_only=true ;;
*) usage ;;
esac

# Each need is "program|Debian package|why". A program with a slash is a file that must be
# executable; any other is looked up on PATH.
demo=(
	"ip|iproute2|network namespaces for the nodes, the bridge and the client"
	"nft|nftables|kube-proxy's nftables mode on each node"
)
test=(
	"${demo[@]}"
	"cc|gcc|go test -race (cgo)"
	"git|git|the version stamped into builds and images"
	"runuser|util-linux|the demo's test runs it as an unprivileged user"
	"nsenter|util-linux|processes inside the node namespaces"
	"ping|iputils-ping|the network namespace harness's own test"
	"sha256sum|coreutils|the release's SHA256SUMS"
	"openssl|openssl|the verdict key pair of docs/install.md's Install, run by the install test"
	"iptables-restore|iptables|kube-proxy's iptables mode (test/harness/kubeproxy)"
	"ip6tables-restore|iptables|kube-proxy's iptables mode, IPv6"
	"podman|podman|TestImages runs both programs from their images"
	"runc|runc|podman's and the install test's container runtime"
	"/usr/lib/cni/bridge|containernetworking-plugins|the install test's pod network"
	"/usr/lib/cni/host-local|containernetworking-plugins|the install test's pod addresses"
	"/usr/lib/cni/loopback|containernetworking-plugins|the install test's pods' loopback"
	"/usr/bin/chromium|chromium|the status page is loaded in a real browser"
	"promtool|prometheus|the chart's alert rules (only promtool is taken, not the server)"
	"/bin/dash|dash|/bin/sh of make conformance-images' agnhost image (hack/agnhost-rootfs.sh)"
	"/usr/bin/curl|curl|curl of make conformance-images' agnhost image, which the e2e specs run in pods"
	"/bin/nc.openbsd|netcat-openbsd|nc of make conformance-images' agnhost image, which the e2e specs run in pods"
	"/usr/bin/wget|wget|wget of make conformance-images' agnhost image, which the e2e specs run in pods"
)
case "$what" in
demo) needs=("${demo[@]}") ;;
test) needs=("${test[@]}") ;;
*) usage ;;
esac

have() {
	if [[ $1 == */* ]]; then
		[[ -x $1 ]]
	else
		command -v "$1" >/dev/null 2>&1
	fi
}

# missing prints the needs that are not met, one a line.
missing() {
	local need
	for need in "${needs[@]}"; do
		have "${need%%|*}" || echo "$need"
	done
}

mapfile -t lacking < <(missing)
if [[ ${#lacking[@]} -eq 0 ]]; then
	exit 0
fi

packages=()
for need in "${lacking[@]}"; do
	IFS='|' read -r prog pkg why <<<"$need"
	echo "make $what: $prog is missing (Debian package $pkg): $why" >&2
	[[ " ${packages[*]} " == *" $pkg "* ]] || packages+=("$pkg")
done
if $check_only; then
	exit 1
fi
if [[ $(id -u) != 0 ]]; then
	echo "make $what: install them first, as root: sudo $0 $what" >&2
	echo "  (it runs apt-get update and apt-get install -y ${packages[*]}; of prometheus it keeps only promtool)" >&2
	exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "make $what: there is no apt-get here to install ${packages[*]}: install them with this system's package manager" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-deps: apt-get install ${packages[*]}" >&2
apt-get update -q >&2
apt=()
for pkg in "${packages[@]}"; do
	[[ $pkg == prometheus ]] || apt+=("$pkg")
done
if [[ ${#apt[@]} -gt 0 ]]; then
	apt-get install -y -q "${apt[@]}" >&2
fi
if [[ " ${packages[*]} " == *" prometheus "* ]]; then
	# Only promtool: the package would also install and start a Prometheus server.
	deb=$(mktemp -d)
	trap 'rm -rf "$deb"' EXIT
	(cd "$deb" && apt-get download -q prometheus >&2)
	dpkg-deb --fsys-tarfile "$deb"/prometheus_*.deb | tar -xO ./usr/bin/promtool >/usr/local/bin/promtool.new
	chmod 755 /usr/local/bin/promtool.new
	mv /usr/local/bin/promtool.new /usr/local/bin/promtool
fi

# A package that is installed but whose program is still not found (a PATH without
# /usr/sbin, say) would otherwise fail much later, in the middle of a test.
mapfile -t lacking < <(missing)
if [[ ${#lacking[@]} -gt 0 ]]; then
	for need in "${lacking[@]}"; do
		IFS='|' read -r prog pkg why <<<"$need"
		echo "make $what: $prog is still not found after installing $pkg; is its directory on PATH ($PATH)?" >&2
	done
	exit 1
fi
echo "install-deps: installed ${packages[*]}" >&2
