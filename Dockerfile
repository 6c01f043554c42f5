# Stormgate's container image for Docker users. `make image` builds the same image without Docker (no
# daemon, no registry, no base image: build/mkimage writes an OCI archive and loads it into podman);
# build/dockerfile_test.go keeps the two in step.
#
#   docker build -t stormgate/sidecar:1.0.0 --build-arg VERSION=1.0.0 .
#
# One image is both containers `sidecar inject` adds: the init container runs `sidecar iptables`, which
# programs nftables over netlink (no iptables program needed), and the sidecar runs `sidecar run`.
#
# The build stage runs exactly the command `make build` runs (the Makefile's GOBUILD; the test checks
# that they match and that the result is statically linked), so what CI tests is what ships.

FROM golang:1.26 AS build
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/sidecar ./cmd/sidecar

# The image: the static binary on an empty base. No shell, no package manager, no root, no CA bundle
# (TLS to the control plane names its CA: sidecar run --xds-ca). UID 1337 matches the runAsUser that
# `sidecar inject` writes for the sidecar; the init container runs as 0 by its securityContext.
FROM scratch AS sidecar
ARG VERSION=dev
COPY --from=build /out/sidecar /sidecar
USER 1337:1337
EXPOSE 15006/tcp 15090/tcp
LABEL org.opencontainers.image.title="stormgate" \
      org.opencontainers.image.description="Stormgate: a transparent sidecar proxy for Apache Dubbo 2 providers" \
      org.opencontainers.image.version="${VERSION}"
ENTRYPOINT ["/sidecar"]
