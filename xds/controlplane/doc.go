// Package controlplane is Stormgate's reference control plane (`sidecar
// control-plane`): a go-control-plane ADS server and snapshot cache that
// serves each node the settings its file resolves to (package cpfile), pushes
// on file change, validates before publishing, and never re-sends a version a
// node NACKed (go-control-plane#962). The data-plane binary does not import
// it: no build tag is needed to keep go-control-plane and grpc-go out of the
// sidecar image.
//
// Concurrency: Server.Serve blocks until its context is cancelled and waits
// for every goroutine it starts. The node table is guarded by one mutex taken
// by the go-control-plane stream callbacks, the file watcher and the metrics
// collector; snapshots shared between nodes are never modified.
package controlplane
