# Stormgate's container images for Docker users. `make image` builds the same images without Docker (no
# daemon, no registry, no base image: build/mkimage writes OCI archives and loads them into podman);
# build/dockerfile_test.go keeps the two in step.
#
#   V=$(make -s version)    # the version make stamps: VERSION at a release, X.Y.Z-N-gHASH after it
#   docker build -t stormgate/sidecar:$V --build-arg VERSION=$V .                   (the default target)
#   docker build -t stormgate/control:$V --build-arg VERSION=$V --target control .
#
# stormgate/sidecar is both containers `sidecar inject` adds: the init container runs `sidecar iptables`,
# which programs nftables over netlink (no iptables program needed), and the sidecar runs `sidecar run`.
# It holds the data-plane build (-tags dataplane): no control plane, no injection, so no Kubernetes API
# types and no xDS server in every pod. stormgate/control holds the full binary, for the control plane
# and the injection webhook (deploy/).
#
# The build stage runs exactly the commands `make build` runs (the Makefile's GOBUILD; the test checks
# that they match and that the result is statically linked), so what CI tests is what ships.

FROM golang:1.26 AS build
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
# go.mod replaces netpoll with the patched copy in third_party/netpoll (its PATCHES.md): the module graph
# needs that copy's go.mod before anything downloads.
COPY third_party/netpoll/go.mod third_party/netpoll/go.sum ./third_party/netpoll/
# And internal/childproc (the test and bench process harness) with its own go.mod, shared with interop/.
COPY internal/childproc/go.mod ./internal/childproc/
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/sidecar ./cmd/sidecar
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -tags dataplane -o /out/sidecar-dataplane ./cmd/sidecar

# What both images are besides their binary: an empty base, no shell, no package manager, no root, no
# CA bundle (TLS to the control plane names its CA: sidecar run --xds-ca). UID 1337 matches the
# runAsUser that `sidecar inject` writes for the sidecar; the init container runs as 0 by its
# securityContext.
FROM scratch AS image
ARG VERSION=dev
USER 1337:1337
EXPOSE 15006/tcp 15090/tcp
LABEL org.opencontainers.image.title="stormgate" \
      org.opencontainers.image.description="Stormgate: a transparent sidecar proxy for Apache Dubbo 2 providers" \
      org.opencontainers.image.version="${VERSION}"
ENTRYPOINT ["/sidecar"]

# The control image: the full binary.
FROM image AS control
COPY --from=build /out/sidecar /sidecar

# The sidecar image (the default target): the static data-plane binary.
FROM image AS sidecar
COPY --from=build /out/sidecar-dataplane /sidecar
