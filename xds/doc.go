// Package xds is the ADS client that receives Settings from one of several
// control-plane replicas (Client, reporting a NodeInfo: id, namespace,
// labels, cluster, provider ports; it speaks gRPC over net/http's HTTP/2 with
// the few ADS messages it needs encoded by hand, adsstream.go and adswire.go,
// so the data-plane binary carries neither grpc-go nor envoy's generated
// types), and the reference control plane (ControlPlane) with its file
// (ControlPlaneFile: default < namespaces < selectors < nodes, resolved per
// node by Resolve). The schema, defaults, validation and the store of what is
// in force are package settings.
//
// Concurrency: Client.Run and ControlPlane.Serve block until their context
// is cancelled and wait for every goroutine they start before returning;
// Client.Status is safe to call from any goroutine, OnStatus and the apply
// function run on Run's goroutine. ControlPlane's node table is guarded by one
// mutex taken by the go-control-plane stream callbacks, the file watcher and
// the metrics collector; snapshots shared between nodes are never modified.
package xds
