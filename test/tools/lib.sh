# Shared by the tool installers (sourced): the cache, one line per component
# on the terminal (the go tool's output goes to a log in the cache), and
# Debian packages, waiting for another apt/dpkg instead of failing.
# Callers define log() (their prefix) before sourcing it.

# set -e also inside $(...): a failed step in a helper whose output is
# captured must fail the install.
shopt -s inherit_errexit

# The pinned versions, each overridable from the environment
# (CONTAINERD_VERSION=v2.2.9 make e2e, K8S_VERSION=v1.34.4 make e2e-k8s).
CNI_PLUGINS_VERSION=${CNI_PLUGINS_VERSION:-v1.9.1}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
RUNC_VERSION=${RUNC_VERSION:-v1.5.2}
CRIO_VERSION=${CRIO_VERSION:-v1.36.3}
K8S_VERSION=${K8S_VERSION:-v1.37.2}
# A second kube-apiserver, built alone: the admission tests of the oldest
# supported Kubernetes run against it (test/kubeapi, TestBase134*).
K8S_APISERVER_VERSION=${K8S_APISERVER_VERSION:-v1.34.4}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
CRICTL_VERSION=${CRICTL_VERSION:-v1.36.0}
HELM_VERSION=${HELM_VERSION:-v3.22.0}

# The cache (outside the clone, shared by clones on the machine) and the
# clone's .tools/ links into it.
TOOLS_DIR=${NRI_CNI_TOOLS:-${HOME:-/root}/.cache/nri-cni/tools}
REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LOCAL_DIR="$REPO_DIR/.tools"

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

# apt_update_install PKG...: apt-get update, then install PKG (quietly's
# command: its output goes to the log).
apt_update_install() {
	apt_get update -qq
	apt_get install -y -qq --no-install-recommends "$@"
}

# apt_install PKG...: installs the packages that are missing (as root;
# otherwise says so and returns 0), waiting for another apt's locks.
apt_install() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	((${#missing[@]})) || return 0
	if [[ $(id -u) -ne 0 ]]; then
		log "not root: cannot apt-get install ${missing[*]}"
		return 0
	fi
	local start=$SECONDS
	say_pending "Debian packages ${missing[*]} … apt-get install"
	quietly "Debian packages ${missing[*]}" "$LOG_DIR/apt.log" apt_update_install "${missing[@]}"
	say_final "Debian packages ${missing[*]} done in $(human $((SECONDS - start)))"
}

# --- The cache and what the terminal shows --------------------------------
#
# A component is built once into TOOLS_DIR (keyed by version, stamped when
# complete) and linked into the clone's .tools/. It says when its build
# starts (with the expected cold time), every PROGRESS_EVERY seconds how long
# it has taken and what it compiles, and when it is done. On a terminal these
# replace each other: one line per component, ending as "… done in 2m09s".
# Elsewhere (CI logs, the Go harness reading the output) each is a line of
# its own. Everything the go tool and apt print ("go: downloading …",
# compiler output, debconf) goes to TOOLS_DIR/.logs/<component>.log, whose
# tail is printed if the step fails. INSTALL_QUIET=1 (the Go harness sets it)
# leaves out the "cached" lines.

PROGRESS_EVERY=${PROGRESS_EVERY:-30}
LOG_DIR="$TOOLS_DIR/.logs"

# On a terminal (stderr), a component's lines replace each other.
LINES_REPLACE=""
[[ -t 2 ]] && LINES_REPLACE=1

# say_pending MSG: a line the component's next one replaces on a terminal
# (printed without its newline there); a plain log line elsewhere.
say_pending() {
	if [[ $LINES_REPLACE ]]; then
		printf '\r\033[K' >&2
		log "$*" 2>&1 | tr -d '\n' >&2
	else
		log "$*"
	fi
}

# say_final MSG: the component's last line (replacing a pending one).
say_final() {
	[[ $LINES_REPLACE ]] && printf '\r\033[K' >&2
	log "$*"
}

# human SECONDS: "42s" or "2m30s".
human() {
	if (($1 < 60)); then echo "${1}s"; else printf '%dm%02ds\n' $(($1 / 60)) $(($1 % 60)); fi
}

# local_link NAME: link the cached tool dir NAME into .tools/ and print the link.
local_link() {
	mkdir -p "$LOCAL_DIR"
	ln -sfn "$TOOLS_DIR/$1" "$LOCAL_DIR/$1"
	echo "$LOCAL_DIR/$1"
}

# progress LABEL LOG: every PROGRESS_EVERY seconds, says that LABEL is still
# building and what the go tool did last (the last line of LOG: with -v it
# names the package being compiled). Runs until killed, or until the
# installer ($$) is gone, so it never outlives an interrupted install.
progress() {
	local label=$1 logf=$2 t=0 last nap
	# The sleep dies with the ticker and holds none of its output: a caller
	# reading the installer's output to EOF (the Go harness) must not wait
	# for a leftover sleep.
	trap 'kill "$nap" 2>/dev/null; exit 0' TERM
	while :; do
		sleep "$PROGRESS_EVERY" >/dev/null 2>&1 &
		nap=$!
		wait "$nap"
		kill -0 $$ 2>/dev/null || exit 0
		t=$((t + PROGRESS_EVERY))
		last=$(tail -n 1 "$logf" 2>/dev/null | cut -c1-80)
		say_pending "still building $label… $(human "$t")${last:+ ($last)}"
	done
}

# quietly LABEL LOG CMD...: runs CMD with its output in LOG, a progress
# line every PROGRESS_EVERY seconds meanwhile; on failure says so and prints
# the end of LOG.
quietly() {
	local label=$1 logf=$2 start=$SECONDS ticker rc=0
	shift 2
	mkdir -p "$(dirname "$logf")"
	progress "$label" "$logf" &
	ticker=$!
	# A background job, not "CMD || rc=$?": in a || list bash ignores set -e
	# inside CMD, and a failed step of a build function would go unnoticed.
	# (For the same reason quietly and component must not be called from an
	# if, || or && themselves: a failure exits the installer.)
	"$@" >"$logf" 2>&1 &
	wait $! || rc=$?
	kill "$ticker" 2>/dev/null || true
	wait "$ticker" 2>/dev/null || true
	if ((rc != 0)); then
		say_final "$label FAILED after $(human $((SECONDS - start))); the end of $logf:"
		tail -n 25 "$logf" | sed 's/^/    /' >&2
	fi
	return "$rc"
}

# component STAMP NAME LABEL COLD BUILD [ARGS...]: makes sure the cached
# component whose stamp file is STAMP exists. If the stamp is there it says
# "LABEL cached"; otherwise it runs BUILD ARGS... quietly (its output in
# LOG_DIR/NAME.log) and touches the stamp. COLD is the expected cold build
# time on a 2-core machine, shown when the build starts. One build per
# component at a time: a second installer (another test binary, another
# engineer on the same cache) waits for the first and then finds it cached.
component() {
	local stamp=$1 name=$2 label=$3 cold=$4
	shift 4
	if [[ -f "$stamp" ]]; then
		[[ ${INSTALL_QUIET:-} == 1 ]] || log "$label cached"
		return 0
	fi
	# The lock lives outside the component's dir: builders may empty that.
	mkdir -p "$(dirname "$stamp")" "$TOOLS_DIR/.locks"
	local lock start=$SECONDS
	exec {lock}>"$TOOLS_DIR/.locks/$name.lock"
	if ! flock -n "$lock"; then
		log "$label: waiting for another installer building it"
		flock "$lock"
	fi
	if [[ -f "$stamp" ]]; then
		log "$label cached (built by another installer meanwhile)"
	else
		say_pending "$label … building (cold, $cold)"
		quietly "$label" "$LOG_DIR/$name.log" "$@"
		touch "$stamp"
		say_final "$label done in $(human $((SECONDS - start)))"
	fi
	exec {lock}>&-
}
