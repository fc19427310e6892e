#!/usr/bin/env bash
# Installs the pinned parts of a real single-node Kubernetes for the cluster
# harness (test/cluster) and prints their directories (KEY=DIR lines):
#
#   K8S_BIN_DIR           kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl
#   K8S_VERSION           their version (K8S_VERSION in the environment picks it: v1.37.2, the
#                         default and what CI runs, or v1.34.4, the oldest supported)
#   ETCD_BIN_DIR          etcd
#   CRICTL_BIN_DIR        crictl
#   RUNC_SECCOMP_BIN_DIR  runc built with libseccomp (the kubelet always asks for RuntimeDefault)
#
# Same cache as test/tools/install.sh: ${NRI_CNI_TOOLS:-$HOME/.cache/nri-cni/tools}/<name>-<version>
# with a stamp file, linked into .tools/. The wrapper modules (`go install` of
# k8s.io/kubernetes is refused because of its replace directives) live in the
# cache too, under .wrappers/, never in the clone. Idempotent; a cold build
# takes ~10+ minutes on 2 cores, a warm run a second.
#
#   test/tools/install-k8s.sh [k8s|etcd|crictl|runc|all]   (default: all)
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
CRICTL_VERSION=${CRICTL_VERSION:-v1.36.0}
RUNC_VERSION=${RUNC_VERSION:-v1.5.2}
TOOLS_DIR=${NRI_CNI_TOOLS:-${HOME:-/root}/.cache/nri-cni/tools}
WRAP_DIR="$TOOLS_DIR/.wrappers"
REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LOCAL_DIR="$REPO_DIR/.tools"
export GOFLAGS=-buildvcs=false

log() { echo "install-k8s: $*" >&2; }
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# local_link NAME: link the cached tool dir NAME into .tools/ and print the link.
local_link() {
	mkdir -p "$LOCAL_DIR"
	ln -sfn "$TOOLS_DIR/$1" "$LOCAL_DIR/$1"
	echo "$LOCAL_DIR/$1"
}

# wrapper NAME MODULE@VERSION PKG... : (re)create the wrapper module NAME in the
# cache: requires MODULE@VERSION, tools.go imports PKG..., plus the replace
# lines read on stdin (one "old=new" per line). Prints its directory.
wrapper() {
	local name=$1 modver=$2; shift 2
	local dir="$WRAP_DIR/$name"
	rm -rf "$dir"
	mkdir -p "$dir"
	(
		cd "$dir"
		go mod init "nri-cni.local/tools/${name%%-v*}" >/dev/null 2>&1
		{
			echo '//go:build tools'
			echo
			echo '// Package tools pins the commands this wrapper module builds.'
			echo 'package tools'
			echo
			echo 'import ('
			local p
			for p in "$@"; do echo "	_ \"$p\""; done
			echo ')'
		} >tools.go
		go mod edit -require "$modver"
		local r
		while IFS= read -r r; do
			[[ -n "$r" ]] && go mod edit -replace "$r"
		done
		go mod tidy >&2
	)
	echo "$dir"
}

# staging_replaces MODULE VERSION STAGING_VERSION: one "m=m@STAGING_VERSION"
# line for every k8s.io module MODULE@VERSION's go.mod requires at v0.0.0
# (the staging modules, replaced by local paths upstream).
staging_replaces() {
	local gomod
	gomod=$(cd "$WRAP_DIR" && go mod download -json "$1@$2" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
	[[ -f "$gomod" ]] || { log "cannot read the go.mod of $1@$2"; return 1; }
	awk -v v="$3" '
		/^require[[:space:]]*\(/ { inreq = 1; next }
		inreq && /^\)/ { inreq = 0; next }
		{ line = $0; sub(/^require[[:space:]]+/, "", line); n = split(line, f, /[[:space:]]+/) }
		(inreq || /^require[[:space:]]+k8s\.io\//) {
			for (i = 1; i < n; i++) if (f[i] ~ /^k8s\.io\// && f[i+1] == "v0.0.0") print f[i] "=" f[i] "@" v
		}' "$gomod" | sort -u
}

# built NAME: the cached tool NAME is complete; finish NAME SECONDS: mark it so.
built() { [[ -f "$TOOLS_DIR/$1/.stamp" ]]; }
finish() { touch "$TOOLS_DIR/$1/.stamp"; log "$1 done in $2s"; }

install_k8s() {
	local name="kubernetes-$K8S_VERSION"
	if ! built "$name"; then
		local start=$SECONDS minor staging wdir out="$TOOLS_DIR/$name"
		log "building $name (cold: ~10 min on 2 cores)"
		mkdir -p "$WRAP_DIR"
		# v1.37.2 -> v0.37.2: the staging modules' tags.
		staging="v0.${K8S_VERSION#v1.}"
		minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
		local replaces
		replaces=$(staging_replaces k8s.io/kubernetes "$K8S_VERSION" "$staging")
		log "$(wc -l <<<"$replaces") staging modules replaced at $staging"
		local cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
		local pkgs=("${cmds[@]/#/k8s.io/kubernetes/cmd/}")
		wdir=$(wrapper "$name" "k8s.io/kubernetes@$K8S_VERSION" "${pkgs[@]}" <<<"$replaces")
		rm -rf "$out"
		mkdir -p "$out"
		local v=k8s.io/component-base/version cv=k8s.io/client-go/pkg/version ld="-s -w" x
		for x in "$v" "$cv"; do
			ld+=" -X $x.gitVersion=$K8S_VERSION -X $x.gitMajor=1 -X $x.gitMinor=$minor -X $x.gitTreeState=clean"
		done
		(cd "$wdir" && CGO_ENABLED=0 go build -trimpath -tags selinux,notest,grpcnotrace \
			-ldflags "$ld" -o "$out/" "${pkgs[@]}")
		finish "$name" $((SECONDS - start))
	fi
	echo "K8S_BIN_DIR=$(local_link "$name")"
	echo "K8S_VERSION=$K8S_VERSION"
}

install_etcd() {
	local name="etcd-$ETCD_VERSION"
	if ! built "$name"; then
		local start=$SECONDS wdir out="$TOOLS_DIR/$name"
		log "building $name"
		wdir=$(wrapper "$name" "go.etcd.io/etcd/server/v3@$ETCD_VERSION" go.etcd.io/etcd/server/v3 </dev/null)
		rm -rf "$out"
		mkdir -p "$out"
		(cd "$wdir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3)
		finish "$name" $((SECONDS - start))
	fi
	echo "ETCD_BIN_DIR=$(local_link "$name")"
}

install_crictl() {
	local name="crictl-$CRICTL_VERSION"
	if ! built "$name"; then
		local start=$SECONDS wdir out="$TOOLS_DIR/$name"
		log "building $name"
		wdir=$(wrapper "$name" "sigs.k8s.io/cri-tools@$CRICTL_VERSION" sigs.k8s.io/cri-tools/cmd/crictl </dev/null)
		rm -rf "$out"
		mkdir -p "$out"
		(cd "$wdir" && CGO_ENABLED=0 go build -trimpath \
			-ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
			-o "$out/crictl" sigs.k8s.io/cri-tools/cmd/crictl)
		finish "$name" $((SECONDS - start))
	fi
	echo "CRICTL_BIN_DIR=$(local_link "$name")"
}


install_runc_seccomp() {
	local name="runc-$RUNC_VERSION-seccomp"
	if ! built "$name"; then
		local start=$SECONDS out="$TOOLS_DIR/$name"
		apt_install libseccomp-dev gcc libc6-dev pkg-config
		log "building $name"
		rm -rf "$out"
		mkdir -p "$out"
		GOBIN="$out" CGO_ENABLED=1 go install -trimpath -tags "seccomp urfave_cli_no_docs netgo osusergo" \
			-buildmode=pie -ldflags "-s -w -extldflags -static-pie" \
			"github.com/opencontainers/runc@$RUNC_VERSION"
		"$out/runc" --version | grep -q '^libseccomp:' || { log "$name has no seccomp support"; return 1; }
		finish "$name" $((SECONDS - start))
	fi
	echo "RUNC_SECCOMP_BIN_DIR=$(local_link "$name")"
}

mkdir -p "$TOOLS_DIR"
# One installer at a time per cache (engineers share the machine).
exec 9>"$TOOLS_DIR/.install-k8s.lock"
if ! flock -n 9; then
	log "waiting for another install-k8s.sh on $TOOLS_DIR"
	flock 9
fi

case "${1:-all}" in
k8s) install_k8s ;;
etcd) install_etcd ;;
crictl) install_crictl ;;
runc) install_runc_seccomp ;;
all) install_runc_seccomp; install_etcd; install_crictl; install_k8s ;;
*) echo "usage: $0 [k8s|etcd|crictl|runc|all]" >&2; exit 2 ;;
esac
