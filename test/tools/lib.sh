# Shared by the tool installers (sourced): Debian packages, waiting for
# another apt/dpkg instead of failing. Callers define log().

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
	log "apt-get install ${missing[*]}"
	apt_get update -qq >/dev/null
	apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
