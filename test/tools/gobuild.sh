#!/usr/bin/env bash
# Builds one of this repository's commands for a make target (make demo,
# make demo-k8s) the way the installers build the tools: one line when it
# starts, progress lines while it compiles, one when it is done, and the go
# tool's own output ("go: downloading …") in OUT.log, whose end is printed
# if the build fails.
#
#   test/tools/gobuild.sh OUT PKG WHAT COLD
#
# COLD is the expected time with an empty Go build cache, shown at the start.
#
# CGO_ENABLED=0, like the installers' go installs and the harness's builds
# of nri-cni: a cold first run then compiles the shared dependencies (the
# standard library, x/sys, grpc …) once, not once per configuration.
set -euo pipefail

log() { echo "build: $*" >&2; }
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

main() {
	local out=$1 pkg=$2 what=$3 cold=$4 start=$SECONDS
	cd "$REPO_DIR"
	mkdir -p "$(dirname "$out")"
	log "$what ($pkg) … go build (cold, $cold)"
	CGO_ENABLED=0 quietly "$what" "$out.log" "${GO:-go}" build -v -o "$out" "$pkg"
	log "$what done in $(human $((SECONDS - start)))"
}

main "$@"
