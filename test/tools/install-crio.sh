#!/usr/bin/env bash
# Installs the pinned CRI-O the tests run as a second runtime and prints its
# directory (CRIO_BIN_DIR=DIR). Same cache pattern as install.sh: built into
# ${NRI_CNI_TOOLS:-$HOME/.cache/nri-cni/tools}/crio-<version>, stamped, linked
# into .tools/. A warm run only checks the stamps.
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

CRIO_VERSION=${CRIO_VERSION:-v1.36.3}
TOOLS_DIR=${NRI_CNI_TOOLS:-${HOME:-/root}/.cache/nri-cni/tools}
REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LOCAL_DIR="$REPO_DIR/.tools"
DIR="$TOOLS_DIR/crio-$CRIO_VERSION"
# No gpgme (cgo) and no btrfs headers: the signature policy of the tests
# accepts anything and the storage is overlay.
CRIO_TAGS="containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs btrfs_noversion"

log() { echo "install-crio: $*" >&2; }
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"


# build_crio: the wrapper module and crio, unless stamped.
build_crio() {
	[[ -f "$DIR/.stamp-crio" ]] && return 0
	local mod="$DIR/src"
	mkdir -p "$mod"
	log "building crio $CRIO_VERSION (wrapper module $mod; minutes when cold)"
	local start=$SECONDS
	(
		cd "$mod"
		[[ -f go.mod ]] || go mod init nri-cni.local/crio-tools >/dev/null 2>&1
		cat >tools.go <<-'EOF'
			//go:build tools

			// Package tools pins CRI-O for the nri-cni test suite.
			package tools

			import _ "github.com/cri-o/cri-o/cmd/crio"
		EOF
		export GOFLAGS=-buildvcs=false
		go get "github.com/cri-o/cri-o@$CRIO_VERSION"
		go mod tidy
		go build -trimpath -tags "$CRIO_TAGS" -o "$DIR/crio.tmp" github.com/cri-o/cri-o/cmd/crio
		mv "$DIR/crio.tmp" "$DIR/crio"
	)
	touch "$DIR/.stamp-crio"
	log "crio done in $((SECONDS - start))s"
}

# build_pinns: statically linked from the module's pinns/src, unless stamped.
build_pinns() {
	[[ -f "$DIR/.stamp-pinns" ]] && return 0
	local src
	src=$(cd "$DIR/src" && go list -m -f '{{.Dir}}' github.com/cri-o/cri-o)/pinns/src
	log "building pinns from $src"
	gcc -std=c99 -Os -static -o "$DIR/pinns.tmp" "$src"/*.c
	mv "$DIR/pinns.tmp" "$DIR/pinns"
	touch "$DIR/.stamp-pinns"
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
	build_crio
	build_pinns
	mkdir -p "$LOCAL_DIR"
	ln -sfn "$DIR" "$LOCAL_DIR/crio-$CRIO_VERSION"
	echo "CRIO_BIN_DIR=$LOCAL_DIR/crio-$CRIO_VERSION"
}

main "$@"
