# Stormgate container images, both built from this one file:
#
#   docker build -t stormgate/sidecar .                     the sidecar: static binary on distroless, non-root
#   docker build --target init -t stormgate/sidecar-init .  the init container: the same binary plus iptables
#
#   docker build --build-arg VERSION=$(git describe --tags --always) ...   stamps `sidecar version`
#
# The build stage runs exactly the command `make build` runs (the Makefile's GOBUILD; build/dockerfile_test.go
# checks that they match and that the result is statically linked), so what CI tests is what ships.

FROM golang:1.26 AS build
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/sidecar ./cmd/sidecar

# Init container image: `sidecar iptables` runs the iptables program, which distroless does not have.
# The nft backend is selected explicitly: it needs only CAP_NET_ADMIN (the legacy one also needs
# CAP_NET_RAW) and works with a read-only root filesystem. It runs once, as root, before the pod starts.
FROM debian:bookworm-slim AS init
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables \
 && rm -rf /var/lib/apt/lists/* \
 && update-alternatives --set iptables /usr/sbin/iptables-nft \
 && update-alternatives --set ip6tables /usr/sbin/ip6tables-nft
COPY --from=build /out/sidecar /sidecar
ENTRYPOINT ["/sidecar"]

# The sidecar image (the default target: last stage). No shell, no package manager, no root.
# UID 1337 matches the runAsUser that `sidecar inject` writes.
FROM gcr.io/distroless/static:nonroot AS sidecar
COPY --from=build /out/sidecar /sidecar
USER 1337:1337
EXPOSE 15006 15090
ENTRYPOINT ["/sidecar"]
