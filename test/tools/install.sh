#!/usr/bin/env bash
# Installs the pinned real components a command needs, and nothing else, and
# prints their directories (KEY=DIR lines on stdout). Builds go to a cache
# outside the clone (default $HOME/.cache/nri-cni/tools, keyed by version, so
# a fresh clone on the same machine does not rebuild); the project-local tool
# dir .tools/ (ignored by git) links to them, and that is what the tests use.
# Idempotent: a component whose stamp exists is not rebuilt ("cached").
#
#   test/tools/install.sh [--for WHAT] COMPONENT...
#
# Components (each command asks for its own; see the Makefile):
#   apt      Debian packages: iproute2 iptables jq busybox-static   (root only;
#            busybox's udhcpd is the DHCP server of the dhcp plugin's tests)
#   cni      CNI plugins (bridge, host-local, loopback, portmap, tuning, bandwidth,
#            dhcp, firewall)
#   runtime  containerd, containerd-shim-runc-v2, ctr, and runc
#   crio     CRI-O, pinns, conmon (install-crio.sh)
#   k8s      Kubernetes, etcd, crictl, runc with seccomp (install-k8s.sh all)
#   k8s-apiserver  a second kube-apiserver alone, K8S_APISERVER_VERSION (v1.34.4: the
#            admission tests of the oldest supported Kubernetes; install-k8s.sh apiserver)
#   helm     helm (the chart tests)
#   nft      Debian's nftables (the nft binary): make bench only, for the knftables
#            arm of BenchmarkApply (./nft/); nri-cni itself never runs nft
# and sets of them:
#   demo     apt cni runtime                 (make demo; what the Go harness's containerd needs)
#   demo-k8s demo + k8s                      (make demo-k8s)
#   all      apt cni runtime crio k8s k8s-apiserver helm   (make test, make tools; the default)
#
# --for WHAT names the command that asked ("make demo"): the first line then
# says what is installed and why, before any build starts.
#
# Everything comes from the Go module proxy (pinned) or Debian's packages.
set -euo pipefail

log() { echo "install: $*" >&2; }
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

APT_PACKAGES=(iproute2 iptables jq busybox-static)

# goinstall DIR PKG@VERSION...: go install the packages into DIR (-v: the
# progress line names the package being compiled).
goinstall() {
	local dir=$1
	shift
	mkdir -p "$dir"
	GOBIN="$dir" CGO_ENABLED=${CGO_ENABLED:-0} GOFLAGS=-buildvcs=false go install -v "$@"
}

install_cni() {
	local name="cni-plugins-$CNI_PLUGINS_VERSION" v=$CNI_PLUGINS_VERSION
	local p=github.com/containernetworking/plugins/plugins
	component "$TOOLS_DIR/$name/.stamp" "$name" "CNI plugins $v" "~30s" \
		goinstall "$TOOLS_DIR/$name" "$p/main/bridge@$v" "$p/ipam/host-local@$v" "$p/main/loopback@$v" \
		"$p/meta/portmap@$v" "$p/meta/tuning@$v" "$p/meta/bandwidth@$v"
	# The plugins that need the host (pluginRoot tests), into the same dir
	# with a stamp of their own: a cache built before them gets them added,
	# and the binaries above are never rewritten under a running test.
	component "$TOOLS_DIR/$name/.stamp-host" "$name-host" "CNI plugins $v (dhcp, firewall)" "~20s" \
		goinstall "$TOOLS_DIR/$name" "$p/ipam/dhcp@$v" "$p/meta/firewall@$v"
	echo "CNI_BIN_DIR=$(local_link "$name")"
}

install_runtime() {
	local cname="containerd-$CONTAINERD_VERSION" rname="runc-$RUNC_VERSION"
	local c=github.com/containerd/containerd/v2/cmd v=$CONTAINERD_VERSION
	component "$TOOLS_DIR/$cname/.stamp" "$cname" "containerd $v" "~1.5 min" \
		goinstall "$TOOLS_DIR/$cname" "$c/containerd@$v" "$c/containerd-shim-runc-v2@$v" "$c/ctr@$v"
	# runc's libcontainer needs cgo (nsenter, userns), hence a C compiler;
	# built without the libseccomp tag, so containers here run with seccomp
	# unconfined.
	[[ -f "$TOOLS_DIR/$rname/.stamp" ]] || apt_install gcc libc6-dev
	CGO_ENABLED=1 component "$TOOLS_DIR/$rname/.stamp" "$rname" "runc $RUNC_VERSION" "~30s" \
		goinstall "$TOOLS_DIR/$rname" "github.com/opencontainers/runc@$RUNC_VERSION"
	echo "CONTAINERD_BIN_DIR=$(local_link "$cname")"
	echo "RUNC_BIN_DIR=$(local_link "$rname")"
}

# helm: the chart tests (test/kubeapi) lint, template and install deploy/helm/nri-cni.
install_helm() {
	local name="helm-$HELM_VERSION"
	component "$TOOLS_DIR/$name/.stamp" "$name" "helm $HELM_VERSION" "~2 min" \
		goinstall "$TOOLS_DIR/$name" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
	echo "HELM_BIN_DIR=$(local_link "$name")"
}

# nft: bench-only; nri-cni programs nftables over netlink and needs no binary.
install_nft() {
	apt_install nftables
}

install_apt() {
	apt_install "${APT_PACKAGES[@]}"
}

# describe COMPONENT: what it installs, for the first line.
describe() {
	case $1 in
	apt) echo "Debian's ${APT_PACKAGES[*]}" ;;
	cni) echo "CNI plugins $CNI_PLUGINS_VERSION" ;;
	runtime) echo "containerd $CONTAINERD_VERSION, runc $RUNC_VERSION" ;;
	crio) echo "CRI-O $CRIO_VERSION" ;;
	k8s) echo "Kubernetes $K8S_VERSION (with etcd $ETCD_VERSION, crictl $CRICTL_VERSION, runc with seccomp)" ;;
	k8s-apiserver) echo "kube-apiserver $K8S_APISERVER_VERSION" ;;
	helm) echo "helm $HELM_VERSION" ;;
	nft) echo "Debian's nftables (bench only)" ;;
	esac
}

# expand ARG...: the components the arguments name (sets expanded), each
# once, in the order given.
expand() {
	local a c list=" "
	for a in "$@"; do
		case $a in
		demo) a="apt cni runtime" ;;
		demo-k8s) a="apt cni runtime k8s" ;;
		all) a="apt cni runtime crio k8s k8s-apiserver helm" ;;
		apt | cni | runtime | crio | k8s | k8s-apiserver | helm | nft) ;;
		*)
			echo "usage: $0 [--for WHAT] [apt|cni|runtime|crio|k8s|k8s-apiserver|helm|nft|demo|demo-k8s|all]..." >&2
			return 2
			;;
		esac
		for c in $a; do
			[[ $list == *" $c "* ]] || list+="$c "
		done
	done
	echo "$list"
}

main() {
	local why=""
	if [[ ${1:-} == --for ]]; then
		why=$2
		shift 2
	fi
	local comps c what=()
	comps=$(expand "${@:-all}") || exit 2
	mkdir -p "$TOOLS_DIR"
	if [[ -n $why ]]; then
		# Said in the order a reader cares about, not the install order.
		for c in runtime cni crio k8s k8s-apiserver helm nft apt; do
			if [[ " $comps " == *" $c "* ]]; then what+=("$(describe "$c")"); fi
		done
		local line=${what[0]} i
		for ((i = 1; i < ${#what[@]}; i++)); do line+=", ${what[i]}"; done
		log "$why needs $line"
		log "(cached in $TOOLS_DIR: a first run builds them from source, later runs take seconds)"
	fi
	for c in $comps; do
		case $c in
		apt) install_apt ;;
		cni) install_cni ;;
		runtime) install_runtime ;;
		crio) LOG_PREFIX=install bash "$REPO_DIR/test/tools/install-crio.sh" ;;
		k8s) LOG_PREFIX=install bash "$REPO_DIR/test/tools/install-k8s.sh" all ;;
		k8s-apiserver) LOG_PREFIX=install bash "$REPO_DIR/test/tools/install-k8s.sh" apiserver ;;
		helm) install_helm ;;
		nft) install_nft ;;
		esac
	done
}

main "$@"
