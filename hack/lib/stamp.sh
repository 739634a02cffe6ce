# Sourced by the hack/build-*.sh scripts. A tool built from a tools module is built again
# only when the module's go.sum or the Go version changed since its last build, which its
# stamp file in hack/tools/bin records.

# stamp_of prints the stamp of a build from the tools module in directory $1.
stamp_of() {
	echo "$(go env GOVERSION) $(sha256sum "$1/go.sum" | cut -d' ' -f1)"
}

# up_to_date reports whether the stamp file $1 holds the stamp $2 and every program named
# after them exists.
up_to_date() {
	local file=$1 stamp=$2
	shift 2
	local p
	for p in "$@"; do
		[[ -x $p ]] || return 1
	done
	[[ -f $file && "$(cat "$file")" == "$stamp" ]]
}
