#!/usr/bin/env bash
# Runs every Go fuzz target of the module, one after another, each for
# FUZZTIME. The targets are listed by the toolchain (go test -list '^Fuzz')
# in the packages whose test files declare one, so a new target is picked
# up without editing anything, and no other package's TestMain (the
# root-only tiers under test/ set up a cluster there) runs just to list.
#
#   test/tools/fuzz.sh                    (make fuzz)
#   FUZZTIME=2m test/tools/fuzz.sh        (GO, FUZZTIME, FUZZMINIMIZETIME, FUZZFLAGS)
#
# `make test` runs the seeds alone (f.Add and testdata/fuzz/). A failing
# input is written to the package's testdata/fuzz/<Target>/: keep it there
# as a regression seed once the bug is fixed. New interesting inputs go to
# Go's fuzz cache ($(go env GOCACHE)/fuzz), so a later run starts from them.
# Exit status 1 when any target failed; every target runs regardless.
set -euo pipefail

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}
# Go minimizes every new interesting input for up to 60s by default, which
# stalls a short run on the large seeds (the 30 KB annotations); failing
# inputs are minimized within the same bound.
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-5s}
FUZZFLAGS=${FUZZFLAGS:-}
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

log() { echo "fuzz: $*" >&2; }

# Packages with a test file that declares a fuzz target.
pkgs=()
while read -r pkg files; do
	# shellcheck disable=SC2086 # files is a list
	if [ -n "$files" ] && grep -qs '^func Fuzz' $files; then
		pkgs+=("$pkg")
	fi
done < <($GO list -f '{{$d := .Dir}}{{.ImportPath}}{{range .TestGoFiles}} {{$d}}/{{.}}{{end}}{{range .XTestGoFiles}} {{$d}}/{{.}}{{end}}' ./...)
if [ ${#pkgs[@]} -eq 0 ]; then
	log "no fuzz targets"
	exit 0
fi

# "package target" lines: go test -list prints a package's names, then its
# "ok <package>" line.
listing=$($GO test -list '^Fuzz' "${pkgs[@]}")
targets=$(awk '/^Fuzz/ { names[n++] = $1; next } /^ok/ { for (i = 0; i < n; i++) print $2, names[i]; n = 0 }' <<<"$listing")

failed=()
while read -r pkg name; do
	log "$pkg $name for $FUZZTIME"
	# shellcheck disable=SC2086 # FUZZFLAGS is a list
	if ! $GO test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" $FUZZFLAGS "$pkg"; then
		failed+=("$pkg $name")
	fi
done <<<"$targets"

log "$(wc -l <<<"$targets") targets, ${#failed[@]} failed"
for f in "${failed[@]}"; do
	log "FAILED: $f"
done
[ ${#failed[@]} -eq 0 ]
