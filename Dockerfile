# syntax=docker/dockerfile:1
# The tenant-placer controller image: `docker build -t tenant-placer:dev .`
# The same binary serves every subcommand; the image runs `tenant-placer run` by default.

# ---- build ----------------------------------------------------------------------------------
FROM rust:1.95-bookworm AS builder
WORKDIR /src
ENV CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0

# Dependencies first, in their own layer: only the manifests and the lock file, with stub crate
# roots, so that editing the sources reuses the compiled dependencies.
COPY Cargo.toml Cargo.lock ./
COPY placement/Cargo.toml placement/
COPY inmem-apiserver/Cargo.toml inmem-apiserver/
COPY host-check/Cargo.toml host-check/
RUN mkdir -p src placement/src inmem-apiserver/src host-check/src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs placement/src/lib.rs inmem-apiserver/src/lib.rs host-check/src/lib.rs \
 && cargo build --release --locked --bin tenant-placer \
 && rm -rf src placement/src inmem-apiserver/src host-check/src

# Then the sources. src/manifests.rs embeds examples/ with include_str!. The crate roots are
# touched so that cargo rebuilds the workspace crates over the stubs (COPY keeps the files'
# mtimes, which can be older than the stub build).
COPY src src
COPY placement/src placement/src
COPY inmem-apiserver/src inmem-apiserver/src
COPY host-check/src host-check/src
COPY examples examples
RUN touch src/main.rs src/lib.rs placement/src/lib.rs inmem-apiserver/src/lib.rs host-check/src/lib.rs \
 && cargo build --release --locked --bin tenant-placer \
 && cp target/release/tenant-placer /tenant-placer

# ---- run ------------------------------------------------------------------------------------
# glibc and libgcc, CA certificates, no shell; runs as the "nonroot" user 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="tenant-placer" \
      org.opencontainers.image.description="A Kubernetes operator that places tenants on bare-metal nodes by first fit" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /tenant-placer /tenant-placer
# No MALLOC_ARENA_MAX: the binary holds itself to one malloc arena at start (src/main.rs).
USER 65532:65532
# Metrics and health (/metrics, /healthz, /readyz), as the chart's --metrics-addr sets it.
EXPOSE 8080
ENTRYPOINT ["/tenant-placer"]
CMD ["run"]
