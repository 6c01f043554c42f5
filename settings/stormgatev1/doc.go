// Package stormgatev1 holds the generated Go for the stormgate.v1 protobuf
// schema (settings.proto): the one Settings message that the YAML file, the
// flags' defaults, /config_dump and xDS all share. Regenerate with settings/gen.sh;
// never edit settings.pb.go by hand. Defaults, validation, loading and merging
// live in package settings.
//
// Concurrency: generated messages are not safe for concurrent mutation. Treat
// a *Settings handed to another goroutine as immutable (settings.Store does).
package stormgatev1
