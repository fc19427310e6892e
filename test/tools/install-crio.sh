#!/usr/bin/env bash
# Installs the pinned CRI-O the tests run as a second runtime and prints its
# directory (CRIO_BIN_DIR=DIR). Same cache pattern as install.sh: built into
# ${NRI_CNI_TOOLS:-$HOME/.cache/nri-cni/tools}/crio-<version>, stamped, linked
# into .tools/. A warm run only checks the stamps. `install.sh crio` runs it.
#
#   test/tools/install-crio.sh
#
# The directory holds:
#   crio    built from a small wrapper module requiring github.com/cri-o/cri-o
#           (go install refuses the module: its go.mod has replace directives)
#   pinns   CRI-O's namespace pinner, C, linked statically from the module source
#   conmon  a link to Debian's conmon (CRI-O's container monitor)
# and Debian's podman is installed to load the offline pause image into
# CRI-O's private storage.
set -euo pipefail

# LOG_PREFIX: install.sh, which runs this, has its lines say "install:".
log() { echo "${LOG_PREFIX:-install-crio}: $*" >&2; }
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR="$TOOLS_DIR/crio-$CRIO_VERSION"
# No gpgme (cgo) and no btrfs headers: the signature policy of the tests
# accepts anything and the storage is overlay.
CRIO_TAGS="containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs btrfs_noversion"

# build_crio: the wrapper module (in the cache, never in the clone) and crio.
build_crio() {
	local mod="$DIR/src"
	mkdir -p "$mod"
	cd "$mod"
	[[ -f go.mod ]] || go mod init nri-cni.local/crio-tools
	cat >tools.go <<-'EOF'
		//go:build tools

		// Package tools pins CRI-O for the nri-cni test suite.
		package tools

		import _ "github.com/cri-o/cri-o/cmd/crio"
	EOF
	export GOFLAGS=-buildvcs=false
	go get "github.com/cri-o/cri-o@$CRIO_VERSION"
	go mod tidy
	go build -v -trimpath -tags "$CRIO_TAGS" -o "$DIR/crio.tmp" github.com/cri-o/cri-o/cmd/crio
	mv "$DIR/crio.tmp" "$DIR/crio"
}

# build_pinns: statically linked from the module's pinns/src.
build_pinns() {
	local src
	src=$(cd "$DIR/src" && go list -m -f '{{.Dir}}' github.com/cri-o/cri-o)/pinns/src
	gcc -std=c99 -Os -static -o "$DIR/pinns.tmp" "$src"/*.c
	mv "$DIR/pinns.tmp" "$DIR/pinns"
}

main() {
	mkdir -p "$DIR"
	if [[ ! -f "$DIR/.stamp-apt" ]]; then
		apt_install conmon podman
		if command -v conmon >/dev/null && command -v podman >/dev/null; then
			ln -sfn "$(command -v conmon)" "$DIR/conmon"
			touch "$DIR/.stamp-apt"
		fi
	fi
	component "$DIR/.stamp-crio" "crio-$CRIO_VERSION" "CRI-O $CRIO_VERSION" "~3-8 min" build_crio
	component "$DIR/.stamp-pinns" "crio-$CRIO_VERSION-pinns" "CRI-O's pinns" "~5s" build_pinns
	mkdir -p "$LOCAL_DIR"
	ln -sfn "$DIR" "$LOCAL_DIR/crio-$CRIO_VERSION"
	echo "CRIO_BIN_DIR=$LOCAL_DIR/crio-$CRIO_VERSION"
}

main "$@"
