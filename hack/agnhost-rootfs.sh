#!/usr/bin/env bash
# Assembles in directory DIR the userland of the agnhost image that `make conformance-images`
# builds (hack/image build -rootfs): what Kubernetes' [Feature:LoadBalancer] specs run in
# an agnhost container besides /agnhost, taken from this machine's Debian packages, since
# nothing may be pulled from a registry:
#
#   /bin/sh       dash (package dash): kubectl exec runs `/bin/sh -x -c CMD`
#   /usr/bin/curl curl (package curl): the specs' HTTP requests from a pod
#   /usr/bin/nc   OpenBSD's netcat (package netcat-openbsd): their TCP and UDP probes,
#                 `nc -v -t -w 2`, `nc -w 1 -u`, with OpenBSD's options
#   /usr/bin/wget GNU wget (package wget): the source ranges spec's `wget -T 5 -qO- ADDR`
#
# and every shared library they load and the dynamic loader (their ldd closure), at the
# paths where ldd finds them; a symbolic link stays one, beside what it points to. Files
# keep the packages' modes. DIR is replaced as a whole, so a run leaves nothing of the last.
# hack/install-deps.sh test installs the packages.
#
#   hack/agnhost-rootfs.sh DIR
#
# The shell is dash rather than busybox-static: dash is Debian's /bin/sh, the shell the
# specs' commands are written for, it needs only libc and the loader, which curl brings
# anyway, and it is only a shell. busybox would bring some 300 programs the specs never
# name, among them a second nc that is not OpenBSD's.
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
out=$(realpath -m -- "$1")
[[ $out != / ]] || { echo "agnhost-rootfs: refusing to replace /" >&2; exit 2; }
# Directories get 0755 whatever the caller's umask: their modes go into the image.
umask 022

# Each is "path in the image|path on this machine", as the packages install them.
programs=(
	"/bin/dash|/bin/dash"
	"/usr/bin/curl|/usr/bin/curl"
	"/usr/bin/nc|/bin/nc.openbsd"
	"/usr/bin/wget|/usr/bin/wget"
)

mkdir -p "$(dirname "$out")"
tree=$(mktemp -d "$out.new.XXXXXX")
trap 'rm -rf "$tree"' EXIT
chmod 755 "$tree"

# put copies the file at $1 on this machine to $2 in the tree. A symbolic link is copied as
# a link, and what it points to as well, at the place the link names in the image.
put() {
	local src=$1 dst
	dst=$(realpath -m -s -- "$2")
	mkdir -p "$tree$(dirname "$dst")"
	if [[ -L $src ]]; then
		local target
		target=$(readlink -- "$src")
		ln -sfn -- "$target" "$tree$dst"
		case $target in
		/*) put "$target" "$target" ;;
		*) put "$(dirname "$src")/$target" "$(dirname "$dst")/$target" ;;
		esac
	else
		cp --preserve=mode -- "$src" "$tree$dst"
	fi
}

# libraries prints the shared libraries and the loader that ldd finds for the program at
# $1, one path a line. ldd lists them all, those of the libraries included.
libraries() {
	local deps line
	deps=$(ldd "$1") || { echo "agnhost-rootfs: ldd $1 failed: is it a dynamically linked program?" >&2; return 1; }
	while read -r line; do
		case $line in
		*"not found"*)
			echo "agnhost-rootfs: $1 needs a library this machine lacks: $line" >&2
			return 1
			;;
		*" => /"*) line=${line#* => } && echo "${line% (*}" ;;
		/*) echo "${line% (*}" ;;
		# linux-vdso.so.1: the kernel's, no file.
		esac
	done <<<"$deps"
}

for p in "${programs[@]}"; do
	dst=${p%%|*} src=${p#*|}
	[[ -x $src ]] || { echo "agnhost-rootfs: $src is missing: run hack/install-deps.sh test as root" >&2; exit 1; }
	put "$src" "$dst"
	libs=$(libraries "$src")
	while read -r lib; do
		put "$lib" "$lib"
	done <<<"$libs"
done
ln -s dash "$tree/bin/sh"

rm -rf "$out"
mv "$tree" "$out"
trap - EXIT
echo "agnhost-rootfs: $(find "$out" -type f | wc -l) files, $(find "$out" -type l | wc -l) links in $out"
