// Package build holds no code: its tests tie the shipped container image to the tested binary. They
// check that the Dockerfile's build stage runs exactly the Makefile's build command (GOBUILD, with
// $(GO) as go and $(VERSION) as the VERSION build argument), and that this command, run here, yields a
// statically linked executable (no ELF interpreter, no dynamic section) stamped with the version, which
// is what lets the image be distroless.
//
// Concurrency: nothing to share; the test runs one `go build` into its own temporary directory.
package build
