#!/usr/bin/env bash
# Installs the pinned parts of a real single-node Kubernetes for the cluster
# harness (test/cluster) and prints their directories (KEY=DIR lines):
#
#   K8S_BIN_DIR           kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl
#   K8S_VERSION           their version (K8S_VERSION in the environment picks it: v1.37.2, the
#                         default and what CI runs, or v1.34.4, the oldest supported)
#   APISERVER_BIN_DIR     (apiserver, not part of all) kube-apiserver alone, at
#   APISERVER_VERSION     K8S_APISERVER_VERSION (v1.34.4, the oldest supported: the admission
#                         tests of deploy/base-1.34 and deploy/base-1.34-nomap run against it;
#                         the five commands' build when that is K8S_VERSION's and built)
#   ETCD_BIN_DIR          etcd
#   CRICTL_BIN_DIR        crictl
#   RUNC_SECCOMP_BIN_DIR  runc built with libseccomp (the kubelet always asks for RuntimeDefault)
#
# Same cache as test/tools/install.sh: ${NRI_CNI_TOOLS:-$HOME/.cache/nri-cni/tools}/<name>-<version>
# with a stamp file, linked into .tools/. The wrapper modules (`go install` of
# k8s.io/kubernetes is refused because of its replace directives) live in the
# cache too, under .wrappers/, never in the clone. Idempotent; a cold build
# takes ~10+ minutes on 2 cores, a warm run a second. `install.sh k8s` runs it
# (all), `install.sh k8s-apiserver` the second kube-apiserver (~5-8 min cold).
#
#   test/tools/install-k8s.sh [k8s|apiserver|etcd|crictl|runc|all]   (default: all)
set -euo pipefail

# LOG_PREFIX: install.sh, which runs this, has its lines say "install:".
log() { echo "${LOG_PREFIX:-install-k8s}: $*" >&2; }
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

WRAP_DIR="$TOOLS_DIR/.wrappers"
export GOFLAGS=-buildvcs=false

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

# build_kube OUT VERSION CMD...: Kubernetes VERSION's commands CMD (under
# k8s.io/kubernetes/cmd/) into OUT, from the wrapper module NAME-VERSION
# (NAME: kubernetes for the five, else the one command).
build_kube() {
	local out=$1 version=$2 minor staging wdir replaces name=kubernetes
	shift 2
	local cmds=("$@")
	((${#cmds[@]} > 1)) || name=${cmds[0]}
	mkdir -p "$WRAP_DIR"
	# v1.37.2 -> v0.37.2: the staging modules' tags.
	staging="v0.${version#v1.}"
	minor=${version#v1.}
	minor=${minor%%.*}
	replaces=$(staging_replaces k8s.io/kubernetes "$version" "$staging")
	echo "$(wc -l <<<"$replaces") staging modules replaced at $staging"
	local pkgs=("${cmds[@]/#/k8s.io/kubernetes/cmd/}")
	wdir=$(wrapper "$name-$version" "k8s.io/kubernetes@$version" "${pkgs[@]}" <<<"$replaces")
	rm -rf "$out"
	mkdir -p "$out"
	local v=k8s.io/component-base/version cv=k8s.io/client-go/pkg/version ld="-s -w" x
	for x in "$v" "$cv"; do
		ld+=" -X $x.gitVersion=$version -X $x.gitMajor=1 -X $x.gitMinor=$minor -X $x.gitTreeState=clean"
	done
	cd "$wdir"
	CGO_ENABLED=0 go build -v -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ld" -o "$out/" "${pkgs[@]}"
}

# build_k8s OUT: the five commands of Kubernetes K8S_VERSION into OUT.
build_k8s() {
	build_kube "$1" "$K8S_VERSION" kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl
}

# build_apiserver OUT: kube-apiserver K8S_APISERVER_VERSION alone into OUT.
build_apiserver() {
	build_kube "$1" "$K8S_APISERVER_VERSION" kube-apiserver
}

build_etcd() {
	local out=$1 wdir
	wdir=$(wrapper "etcd-$ETCD_VERSION" "go.etcd.io/etcd/server/v3@$ETCD_VERSION" go.etcd.io/etcd/server/v3 </dev/null)
	rm -rf "$out"
	mkdir -p "$out"
	cd "$wdir"
	CGO_ENABLED=0 go build -v -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3
}

build_crictl() {
	local out=$1 wdir
	wdir=$(wrapper "crictl-$CRICTL_VERSION" "sigs.k8s.io/cri-tools@$CRICTL_VERSION" sigs.k8s.io/cri-tools/cmd/crictl </dev/null)
	rm -rf "$out"
	mkdir -p "$out"
	cd "$wdir"
	CGO_ENABLED=0 go build -v -trimpath -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
		-o "$out/crictl" sigs.k8s.io/cri-tools/cmd/crictl
}

build_runc_seccomp() {
	local out=$1
	rm -rf "$out"
	mkdir -p "$out"
	GOBIN="$out" CGO_ENABLED=1 go install -v -trimpath -tags "seccomp urfave_cli_no_docs netgo osusergo" \
		-buildmode=pie -ldflags "-s -w -extldflags -static-pie" \
		"github.com/opencontainers/runc@$RUNC_VERSION"
	grep -q '^libseccomp:' <<<"$("$out/runc" --version)" || { echo "runc has no seccomp support"; return 1; }
}

# ensure NAME LABEL COLD BUILD: the cached tool NAME (TOOLS_DIR/NAME, stamp
# .stamp), built by BUILD TOOLS_DIR/NAME unless stamped.
ensure() {
	component "$TOOLS_DIR/$1/.stamp" "$1" "$2" "$3" "$4" "$TOOLS_DIR/$1"
}

install_k8s() {
	ensure "kubernetes-$K8S_VERSION" "Kubernetes $K8S_VERSION" "~10-15 min" build_k8s
	echo "K8S_BIN_DIR=$(local_link "kubernetes-$K8S_VERSION")"
	echo "K8S_VERSION=$K8S_VERSION"
}

# The second kube-apiserver: the five commands' build when it is that
# version and built already, else its own (kube-apiserver-VERSION).
install_apiserver() {
	local v=$K8S_APISERVER_VERSION name="kube-apiserver-$K8S_APISERVER_VERSION"
	if [[ -f "$TOOLS_DIR/kubernetes-$v/.stamp" ]]; then
		name="kubernetes-$v"
	else
		ensure "$name" "kube-apiserver $v (alone)" "~5-8 min" build_apiserver
	fi
	echo "APISERVER_BIN_DIR=$(local_link "$name")"
	echo "APISERVER_VERSION=$v"
}

install_etcd() {
	ensure "etcd-$ETCD_VERSION" "etcd $ETCD_VERSION" "~1.5 min" build_etcd
	echo "ETCD_BIN_DIR=$(local_link "etcd-$ETCD_VERSION")"
}

install_crictl() {
	ensure "crictl-$CRICTL_VERSION" "crictl $CRICTL_VERSION" "~1 min" build_crictl
	echo "CRICTL_BIN_DIR=$(local_link "crictl-$CRICTL_VERSION")"
}

# runc with seccomp: the kubelet always asks for RuntimeDefault.
install_runc_seccomp() {
	local name="runc-$RUNC_VERSION-seccomp"
	[[ -f "$TOOLS_DIR/$name/.stamp" ]] || apt_install libseccomp-dev gcc libc6-dev pkg-config
	ensure "$name" "runc $RUNC_VERSION with seccomp" "~1 min" build_runc_seccomp
	echo "RUNC_SECCOMP_BIN_DIR=$(local_link "$name")"
}

mkdir -p "$TOOLS_DIR"
case "${1:-all}" in
k8s) install_k8s ;;
apiserver) install_apiserver ;;
etcd) install_etcd ;;
crictl) install_crictl ;;
runc) install_runc_seccomp ;;
all) install_runc_seccomp; install_etcd; install_crictl; install_k8s ;;
*) echo "usage: $0 [k8s|apiserver|etcd|crictl|runc|all]" >&2; exit 2 ;;
esac
