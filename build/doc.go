// Package build holds no code: its tests tie the shipped container image to the tested binary. They
// check that the Dockerfile's build stage runs exactly the Makefile's build command (GOBUILD, with
// $(GO) as go and $(VERSION) as the VERSION build argument), that this command, run here, yields a
// statically linked executable (no ELF interpreter, no dynamic section) stamped with the version, and
// that the Dockerfile's image stage says what build/image (the daemon-less `make image`) builds: the
// binary on scratch, user 1337, the same entrypoint, ports and labels. The deploy/ manifests are
// decoded strictly with the Kubernetes types. The data plane's netpoll is the patched copy in
// third_party/netpoll: netpoll_test.go checks that it is v0.7.2 plus exactly the patches its PATCHES.md
// lists, level by level. Every module linked into a shipped binary is under a
// license compatible with Apache-2.0, and docs/licenses.md and NOTICE say what the module cache says
// (licenses_test.go).
//
// Subpackages: oci writes OCI image archives; image defines Stormgate's image; mkimage is the command
// `make image` runs; licenses reads and classifies the dependencies' licenses, and mklicenses writes
// their texts for `make release`.
//
// Concurrency: nothing to share; the test runs one `go build` into its own temporary directory.
package build
