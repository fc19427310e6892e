#!/usr/bin/env bash
# Installs the pinned real components the tests need and prints their
# directories (KEY=DIR lines). Builds go to a cache outside the clone
# (default $HOME/.cache/nri-cni/tools, keyed by version, so a fresh clone on
# the same machine does not rebuild); the project-local tool dir .tools/
# (ignored by git) links to them, and that is what the tests use.
# Idempotent: a tool whose stamp exists is not rebuilt.
#
#   test/tools/install.sh [cni|runtime|apt|crio|k8s|helm|all]   (default: all = apt, cni, runtime, crio, k8s, helm)
#
# Everything comes from the Go module proxy (pinned) or Debian's packages.
set -euo pipefail

CNI_PLUGINS_VERSION=${CNI_PLUGINS_VERSION:-v1.9.1}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
RUNC_VERSION=${RUNC_VERSION:-v1.5.2}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
TOOLS_DIR=${NRI_CNI_TOOLS:-${HOME:-/root}/.cache/nri-cni/tools}
REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LOCAL_DIR="$REPO_DIR/.tools"

log() { echo "install: $*" >&2; }
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# local NAME: link the cached tool dir NAME into .tools/ and print the link.
local_link() {
	mkdir -p "$LOCAL_DIR"
	ln -sfn "$TOOLS_DIR/$1" "$LOCAL_DIR/$1"
	echo "$LOCAL_DIR/$1"
}

# goinstall DIR STAMP PKG... : go install the packages into DIR unless STAMP exists.
goinstall() {
	local dir=$1 stamp=$2; shift 2
	if [[ -f "$dir/.$stamp" ]]; then return 0; fi
	mkdir -p "$dir"
	log "go install $* -> $dir"
	local start=$SECONDS
	GOBIN="$dir" CGO_ENABLED=${CGO_ENABLED:-0} GOFLAGS=-buildvcs=false go install "$@"
	touch "$dir/.$stamp"
	log "done in $((SECONDS - start))s"
}

install_cni() {
	local dir="$TOOLS_DIR/cni-plugins-$CNI_PLUGINS_VERSION"
	local p=github.com/containernetworking/plugins/plugins
	goinstall "$dir" stamp \
		"$p/main/bridge@$CNI_PLUGINS_VERSION" \
		"$p/ipam/host-local@$CNI_PLUGINS_VERSION" \
		"$p/main/loopback@$CNI_PLUGINS_VERSION" \
		"$p/meta/portmap@$CNI_PLUGINS_VERSION" \
		"$p/meta/tuning@$CNI_PLUGINS_VERSION" \
		"$p/meta/bandwidth@$CNI_PLUGINS_VERSION"
	echo "CNI_BIN_DIR=$(local_link "cni-plugins-$CNI_PLUGINS_VERSION")"
}

install_runtime() {
	local cdir="$TOOLS_DIR/containerd-$CONTAINERD_VERSION"
	local c=github.com/containerd/containerd/v2/cmd
	goinstall "$cdir" stamp \
		"$c/containerd@$CONTAINERD_VERSION" \
		"$c/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
		"$c/ctr@$CONTAINERD_VERSION"
	local rdir="$TOOLS_DIR/runc-$RUNC_VERSION"
	# runc's libcontainer needs cgo (nsenter, userns); built without the
	# libseccomp tag, so containers here run with seccomp unconfined.
	CGO_ENABLED=1 goinstall "$rdir" stamp "github.com/opencontainers/runc@$RUNC_VERSION"
	echo "CONTAINERD_BIN_DIR=$(local_link "containerd-$CONTAINERD_VERSION")"
	echo "RUNC_BIN_DIR=$(local_link "runc-$RUNC_VERSION")"
}

# helm: the chart tests (test/kubeapi) lint, template and install deploy/helm/nri-cni.
install_helm() {
	local dir="$TOOLS_DIR/helm-$HELM_VERSION"
	goinstall "$dir" stamp "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
	echo "HELM_BIN_DIR=$(local_link "helm-$HELM_VERSION")"
}

install_apt() {
	apt_install iproute2 iptables jq busybox-static
}

case "${1:-all}" in
cni) install_cni ;;
runtime) install_runtime ;;
apt) install_apt ;;
k8s) bash "$REPO_DIR/test/tools/install-k8s.sh" all ;;
helm) install_helm ;;
crio) bash "$REPO_DIR/test/tools/install-crio.sh" ;;
all) install_apt; install_cni; install_runtime; bash "$REPO_DIR/test/tools/install-crio.sh"; bash "$REPO_DIR/test/tools/install-k8s.sh" all; install_helm ;;
*) echo "usage: $0 [cni|runtime|apt|crio|k8s|helm|all]" >&2; exit 2 ;;
esac
