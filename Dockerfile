# syntax=docker/dockerfile:1
# gcounter-rls container image: a release build on Debian bookworm, run on distroless
# (glibc, CA certificates, no shell, no package manager) as the non-root user 65532; the
# binary is also /bin/ratelimit, upstream's name (its no-argument mode: upstream's variables).
#   docker build -t gcounter-rls:dev .
# Used by deploy/kubernetes/ratelimit.yaml. The same glibc (Debian 12) in both stages.

FROM docker.io/library/rust:1.95-slim-bookworm AS builder
WORKDIR /build
# The commit `rls_build_info` reports: the build context has no .git, so pass it in:
#   docker build --build-arg RLS_BUILD_COMMIT=$(git rev-parse --short HEAD) -t gcounter-rls:dev .
ARG RLS_BUILD_COMMIT=unknown
COPY . .
# The cache mounts keep the registry and incremental artifacts across builds (BuildKit);
# the binary is copied out of the cached target directory so the next stage can see it.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/build/target \
    cargo build --release --locked --bin gcounter-rls \
    && cp target/release/gcounter-rls /usr/local/bin/gcounter-rls

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /usr/local/bin/gcounter-rls /usr/local/bin/gcounter-rls
# Upstream's name: envoyproxy/ratelimit's image runs /bin/ratelimit, and Deployments written
# for it name that command; started with no arguments it runs `serve` from upstream's
# variables. A copy, not a symlink: COPY of a single symlink follows it, and distroless has
# no shell to make one.
COPY --from=builder /usr/local/bin/gcounter-rls /bin/ratelimit
USER 65532:65532
# gRPC (RateLimitService, grpc.health.v1) and admin HTTP (/healthz, /rlconfig, /metrics).
EXPOSE 8081 8080
ENTRYPOINT ["gcounter-rls"]
CMD ["serve", "--config", "/etc/gcounter-rls/config.yaml"]
