# Builds every binary of cluster-proxy-operator statically and ships them in a distroless, non-root image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/manager ./cmd/manager

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/ /
USER 65532:65532
ENTRYPOINT ["/manager"]
