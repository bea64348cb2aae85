# A small image of leaderd: built with the Rust toolchain, run on Debian slim (a shell
# and coreutils stay available for hooks). SQLite is built in; PostgreSQL and MySQL
# clients are pure Rust, so no client libraries are needed.
#   docker build --build-arg LEADERD_COMMIT=$(git rev-parse --short=12 HEAD) -t leaderd:0.1.0 .
FROM rust:1-bookworm AS build
WORKDIR /src
# The dependencies first, in a layer of their own that a change to leaderd's code does
# not invalidate: the manifest, the lock file and the build script, with a stub for every
# target the manifest names (Cargo checks them all), built once.
COPY Cargo.toml Cargo.lock build.rs ./
RUN mkdir -p src benches \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && echo 'fn main() {}' > benches/failover.rs \
 && cargo build --release --locked --features kubernetes --bin leaderd \
 && rm -rf src benches
# Then leaderd itself (see .dockerignore). The sources are touched: COPY keeps their
# times, which may be older than the stubs' build.
COPY . .
# No .git in the context: the commit for leaderd_build_info and --version comes from here.
ARG LEADERD_COMMIT=unknown
# `kubernetes`: the pod role label (`[kubernetes] role_label`).
RUN touch src/lib.rs src/main.rs \
 && LEADERD_COMMIT=$LEADERD_COMMIT cargo build --release --locked --features kubernetes --bin leaderd \
 && strip target/release/leaderd

FROM debian:bookworm-slim
# The system trust store: without it `sslmode=verify-full` (and MySQL's VERIFY_IDENTITY)
# fail with "the system trust store holds no usable certificate".
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --home-dir /var/lib/leaderd --create-home leaderd
COPY --from=build /src/target/release/leaderd /usr/local/bin/leaderd
COPY config/leaderd.toml /etc/leaderd/leaderd.toml
USER 10001:10001
WORKDIR /var/lib/leaderd
ENTRYPOINT ["/usr/local/bin/leaderd"]
CMD ["run", "--config", "/etc/leaderd/leaderd.toml"]
