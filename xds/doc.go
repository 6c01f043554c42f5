// Package xds is the ADS client that receives Settings from one of several
// control-plane replicas (Client, reporting a NodeInfo: id, namespace,
// labels, cluster, provider ports). It speaks gRPC over net/http's HTTP/2
// with the few ADS messages it needs encoded by hand (adsstream.go,
// adswire.go), so the data-plane binary carries neither grpc-go nor envoy's
// generated types. The reference control plane is xds/controlplane; the
// schema, defaults, validation and the store of what is in force are package
// settings.
//
// Concurrency: Client.Run blocks until its context is cancelled and waits for
// every goroutine it starts before returning; Client.Status is safe to call
// from any goroutine, OnStatus and the apply function run on Run's goroutine.
package xds
