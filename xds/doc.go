// Package xds owns Stormgate's settings: the stormgate.v1.Settings schema
// (generated Go in stormgatev1), the one place defaults live (Defaults),
// validation that names every bad field and its allowed range (Validate),
// the YAML loader (LoadFile), merging of partial settings (Merge), the
// live-change guard (CheckLive), the active-settings Store with its
// /config_dump handler, the ADS client that receives Settings from one of
// several control-plane replicas (Client, reporting a NodeInfo: id,
// namespace, labels, cluster, provider ports; it speaks gRPC over net/http's
// HTTP/2 with the few ADS messages it needs encoded by hand, adsstream.go and
// adswire.go, so the data-plane binary carries neither grpc-go nor envoy's
// generated types), and the reference control
// plane (ControlPlane) with its file (ControlPlaneFile: default < namespaces
// < selectors < nodes, resolved per node by Resolve).
//
// Data flow: file or xDS -> Merge over defaults -> Validate -> CheckLive
// against the active value -> Store.Update swaps one immutable *Settings in
// atomically and notifies subscribers; each stage then applies what changed.
//
// Concurrency: a *stormgatev1.Settings handed out by this package (Store.Load,
// Defaults, Merge, LoadFile) is never mutated afterwards by this package;
// callers must treat values read from a Store as immutable. Store is safe for
// concurrent use. Client.Run and ControlPlane.Serve block until their context
// is cancelled and wait for every goroutine they start before returning;
// Client.Status is safe to call from any goroutine, OnStatus and the apply
// function run on Run's goroutine. ControlPlane's node table is guarded by one
// mutex taken by the go-control-plane stream callbacks, the file watcher and
// the metrics collector; snapshots shared between nodes are never modified.
package xds
