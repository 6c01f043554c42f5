#!/bin/sh
# Prints the version of the Stormgate source tree this script is in: what `make` stamps into the
# binaries (sidecar version, GET /version, stormgate_build_info) and tags the images with.
#
#   At a release (the commit that last changed VERSION, tagged vX.Y.Z):  X.Y.Z
#   Between releases, git describe's form:                              X.Y.Z-N-gHASH
#   With uncommitted changes to tracked files:                           ...-dirty
#
# VERSION holds the semantic version of the last release. No tag is needed: N counts the commits
# since the one that set VERSION, so a clone without tags (CI's) prints what one with them does.
# When the tag vX.Y.Z exists, git describe reads it (and `make release` checks that it sits on the
# commit that set VERSION, so both ways agree). A shallow clone that cannot see that commit prints
# X.Y.Z-gHASH; a tree without git (a source archive) prints VERSION as it is.
set -eu
cd "$(dirname "$0")/.."
v=$(tr -d ' \t\r\n' < VERSION)
if ! printf '%s\n' "$v" | grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$'; then
	echo "build/version.sh: VERSION holds \"$v\", not a semantic version X.Y.Z" >&2
	exit 1
fi
if ! git rev-parse --verify -q HEAD >/dev/null 2>&1; then
	echo "$v"
	exit 0
fi
dirty=
git update-index -q --refresh >/dev/null 2>&1 || true
git diff-index --quiet HEAD -- 2>/dev/null || dirty=-dirty
if git rev-parse -q --verify "refs/tags/v$v" >/dev/null; then
	d=$(git describe --tags --match "v$v" --abbrev=7 HEAD)
	echo "${d#v}$dirty"
	exit 0
fi
hash=$(git rev-parse --short=7 HEAD)
base=$(git log -1 --format=%H -- VERSION)
if [ -z "$base" ]; then
	echo "$v-0-g$hash-dirty" # VERSION is not committed yet
	exit 0
fi
if [ "$(git rev-parse --is-shallow-repository)" = true ] &&
	grep -qx "$base" "$(git rev-parse --git-path shallow)" 2>/dev/null; then
	echo "$v-g$hash$dirty" # the history ends before the commit that set VERSION: no count
	exit 0
fi
n=$(git rev-list --count "$base..HEAD")
if [ "$n" -eq 0 ]; then
	echo "$v$dirty"
else
	echo "$v-$n-g$hash$dirty"
fi
