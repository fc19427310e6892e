#!/usr/bin/env bash
# Installs the pinned real components the tests need and prints their
# directories (KEY=DIR lines). Builds go to a cache outside the clone
# (default $HOME/.cache/nri-cni/tools, keyed by version, so a fresh clone on
# the same machine does not rebuild); the project-local tool dir .tools/
# (ignored by git) links to them, and that is what the tests use.
# Idempotent: a tool whose stamp exists is not rebuilt.
#
#   test/tools/install.sh [cni|runtime|apt|crio|k8s|all]   (default: all = apt, cni, runtime, crio)
#
# Everything comes from the Go module proxy (pinned) or Debian's packages.
set -euo pipefail

CNI_PLUGINS_VERSION=${CNI_PLUGINS_VERSION:-v1.9.1}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
RUNC_VERSION=${RUNC_VERSION:-v1.5.2}
TOOLS_DIR=${NRI_CNI_TOOLS:-${HOME:-/root}/.cache/nri-cni/tools}
REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LOCAL_DIR="$REPO_DIR/.tools"

log() { echo "install: $*" >&2; }

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

# How long install_apt waits for another apt/dpkg to release its locks.
APT_LOCK_TIMEOUT=${APT_LOCK_TIMEOUT:-600}

# apt_lock_holder: prints "LOCKFILE (pid PID)" for the first apt/dpkg lock
# another process holds, and fails if none is held. apt takes fcntl locks,
# which flock(1) cannot see, so this reads /proc/locks (device and inode).
apt_lock_holder() {
	local f dev ino key pid
	for f in /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock; do
		read -r dev ino < <(stat -c '%d %i' "$f" 2>/dev/null) || continue
		key=$(printf '%02x:%02x:%s' $(((dev >> 8) & 0xfff)) $(((dev & 0xff) | ((dev >> 12) & 0xfff00))) "$ino")
		# Holders only: a waiter's line has "->" as its second field.
		pid=$(awk -v key="$key" '$2 != "->" && $6 == key { print $5; exit }' /proc/locks)
		if [[ $pid ]]; then
			echo "$f (pid $pid)"
			return 0
		fi
	done
	return 1
}

# apt_get ARGS...: apt-get that waits up to APT_LOCK_TIMEOUT for a lock held
# by another apt instead of failing, and says that it waits. The install
# waits through apt's own DPkg::Lock::Timeout; `apt-get update` ignores that
# option for its lists lock (apt 2.6), hence the probe and the retry.
apt_get() {
	local deadline=$((SECONDS + APT_LOCK_TIMEOUT)) said="" holder rc
	while :; do
		if holder=$(apt_lock_holder); then
			if [[ -z $said ]]; then
				log "waiting for the dpkg lock (another apt is running: $holder; up to ${APT_LOCK_TIMEOUT}s)"
				said=1
			fi
			if ((SECONDS >= deadline)); then
				log "gave up after ${APT_LOCK_TIMEOUT}s: $holder still holds the lock (APT_LOCK_TIMEOUT)"
				return 1
			fi
			sleep 2
			continue
		fi
		rc=0
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$APT_LOCK_TIMEOUT" "$@" || rc=$?
		# Failed because another apt took a lock in between: wait and retry.
		if ((rc != 0)) && apt_lock_holder >/dev/null && ((SECONDS < deadline)); then
			continue
		fi
		return "$rc"
	done
}

install_apt() {
	local missing=()
	command -v ip >/dev/null || missing+=(iproute2)
	command -v iptables >/dev/null || missing+=(iptables)
	command -v jq >/dev/null || missing+=(jq)
	[[ -x /bin/busybox ]] || missing+=(busybox-static)
	if ((${#missing[@]})); then
		if [[ $(id -u) -ne 0 ]]; then
			log "not root: cannot apt-get install ${missing[*]}"
			return 0
		fi
		log "apt-get install ${missing[*]}"
		apt_get update -qq >/dev/null
		apt_get install -y -qq "${missing[@]}" >/dev/null
	fi
}

case "${1:-all}" in
cni) install_cni ;;
runtime) install_runtime ;;
apt) install_apt ;;
k8s) bash "$REPO_DIR/test/tools/install-k8s.sh" all ;;
crio) bash "$REPO_DIR/test/tools/install-crio.sh" ;;
all) install_apt; install_cni; install_runtime; bash "$REPO_DIR/test/tools/install-crio.sh"; bash "$REPO_DIR/test/tools/install-k8s.sh" all ;;
*) echo "usage: $0 [cni|runtime|apt|crio|all]" >&2; exit 2 ;;
esac
