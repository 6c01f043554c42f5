#!/bin/sh
# Helpers of `make release` (Makefile): build/release.sh check VERSION | notes VERSION
#   check  refuses what would publish a wrong version: uncommitted changes, a tag on HEAD that is
#          not vX.Y.Z of the VERSION file, a vX.Y.Z tag away from the commit that set VERSION, a
#          release without its CHANGELOG.md section; says so when it builds a snapshot.
#   notes  prints the release's section of CHANGELOG.md (a snapshot's: the Unreleased section).
set -eu
cd "$(dirname "$0")/.."
cmd=${1:?usage: build/release.sh check|notes VERSION}
ver=${2:?usage: build/release.sh check|notes VERSION}
file=$(tr -d ' \t\r\n' < VERSION)

# section NAME prints CHANGELOG.md's "## [NAME]" section without its heading; fails when absent.
section() {
	awk -v want="$1" '
		/^## \[/ { inside = index($0, "## [" want "]") == 1; if (inside) { found = 1; next } }
		inside { print }
		END { exit found ? 0 : 1 }' CHANGELOG.md
}

case $cmd in
check)
	case $ver in *-dirty)
		echo "release: uncommitted changes ($ver): commit or stash them; a release is built from a clean tree" >&2
		exit 1 ;;
	esac
	if git rev-parse --verify -q HEAD >/dev/null 2>&1; then
		for t in $(git tag --points-at HEAD 'v[0-9]*'); do
			if [ "$t" != "v$file" ]; then
				echo "release: HEAD is tagged $t but VERSION says $file: set VERSION to ${t#v} in the release commit" >&2
				exit 1
			fi
		done
		if git rev-parse -q --verify "refs/tags/v$file" >/dev/null; then
			tagged=$(git rev-parse "v$file^{commit}")
			set_in=$(git log -1 --format=%H -- VERSION)
			if [ -n "$set_in" ] && [ "$tagged" != "$set_in" ]; then
				echo "release: tag v$file is on $tagged, but VERSION was set to $file in $set_in: tag the commit that set VERSION" >&2
				exit 1
			fi
		fi
	fi
	if [ "$ver" = "$file" ]; then
		if ! section "$file" >/dev/null; then
			echo "release: CHANGELOG.md has no \"## [$file]\" section: move the Unreleased notes under it" >&2
			exit 1
		fi
		echo "release: $ver"
	else
		echo "release: $ver is not a release (VERSION is $file, set in an earlier commit): building a snapshot" >&2
	fi
	;;
notes)
	if [ "$ver" = "$file" ]; then
		echo "# Stormgate $ver"
		section "$file"
	else
		echo "# Stormgate $ver (snapshot: changes since $file)"
		section Unreleased
	fi
	;;
*)
	echo "usage: build/release.sh check|notes VERSION" >&2
	exit 2 ;;
esac
