// Package cpfile reads the control plane's files: a default Settings, then
// per namespace, per selector (namespace, cluster, port, labels) and per node
// id, each a partial Settings merged over the one before (File.Resolve), from
// one file or a directory of them. It validates them exactly as the control
// plane does before publishing (Validate), so `sidecar validate` can check
// them in the data-plane build too: this package does not import
// go-control-plane.
//
// Concurrency: a File is immutable once returned; Resolve may run from any
// goroutine.
package cpfile
