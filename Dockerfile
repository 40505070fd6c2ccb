# syntax=docker/dockerfile:1
# gcounter-rls container image: a release build on Debian bookworm, run on distroless
# (glibc, CA certificates, no shell, no package manager) as the non-root user 65532; the
# binary is also /bin/ratelimit, upstream's name (its no-argument mode: upstream's variables).
#   docker build --build-arg RLS_BUILD_COMMIT=$(git rev-parse --short HEAD) -t gcounter-rls:dev .
#   podman build --build-arg RLS_BUILD_COMMIT=$(git rev-parse --short HEAD) -t gcounter-rls:dev .
# Used by deploy/kubernetes/ratelimit.yaml. The same glibc (Debian 12) in both stages.
#
# The two bases are build arguments so that a machine that cannot pull them can build the
# same file on its own Debian 12 images (the test suite does: integration/container/);
# the defaults are the real ones.
ARG BUILDER_IMAGE=docker.io/library/rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${BUILDER_IMAGE} AS builder
WORKDIR /build
# The commit `rls_build_info` and `--version` report: the build context has no .git, so
# pass it in (see above); "unknown" otherwise.
ARG RLS_BUILD_COMMIT=unknown
COPY . .
# The cache mounts keep the registry and the compiled dependencies across builds (BuildKit,
# buildah), so a rebuild after a source change compiles the changed crates only. The binary
# leaves the cached target directory stripped, its debug info split off beside it
# (gcounter-rls.debug, linked by .gnu_debuglink) for the release artifacts.
RUN --mount=type=cache,id=gcounter-rls-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=gcounter-rls-target,target=/build/target \
    cargo build --release --locked --bin gcounter-rls \
    && cd /usr/local/bin \
    && objcopy --only-keep-debug /build/target/release/gcounter-rls gcounter-rls.debug \
    && objcopy --strip-all --add-gnu-debuglink=gcounter-rls.debug \
        /build/target/release/gcounter-rls gcounter-rls

FROM ${RUNTIME_IMAGE}
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
