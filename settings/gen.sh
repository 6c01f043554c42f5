#!/bin/sh
# Regenerates settings/stormgatev1/settings.pb.go from settings.proto.
# Needs protoc (Debian: apt-get install -y protobuf-compiler, which also ships
# google/protobuf/duration.proto under /usr/include) and protoc-gen-go pinned
# to the google.golang.org/protobuf version in go.mod:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
# Run from anywhere; `make proto` calls it.
set -eu
cd "$(dirname "$0")/.."
PATH="$(go env GOPATH)/bin:$PATH"
want="$(go list -m -f '{{.Version}}' google.golang.org/protobuf)"
have="$(protoc-gen-go --version | awk '{print $2}')"
if [ "$want" != "$have" ]; then
	echo "gen.sh: protoc-gen-go is $have, go.mod wants $want:" >&2
	echo "  go install google.golang.org/protobuf/cmd/protoc-gen-go@$want" >&2
	exit 1
fi
protoc -I . -I /usr/include \
	--go_out=. --go_opt=paths=source_relative \
	settings/stormgatev1/settings.proto
