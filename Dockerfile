# One image with every program of cluster-proxy-operator, static and non-root on distroless: the manager
# (/manager), the proxy-server (/proxy-server), the proxy-agent (/proxy-agent) and the kubectl plugin
# (/kubectl-cluster_proxy). The rendered Deployments run /proxy-server and /proxy-agent from it.
# The build step is 'make build-static', which test/image runs too (make test, in CI).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make build-static OUT=/out

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/ /
USER 65532:65532
ENTRYPOINT ["/manager"]
