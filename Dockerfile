# A small image of leaderd: built with the Rust toolchain, run on Debian slim (a shell
# and coreutils stay available for hooks). SQLite is built in; PostgreSQL and MySQL
# clients are pure Rust, so no client libraries are needed.
#   docker build -t leaderd:0.1.0 .
FROM rust:1-bookworm AS build
WORKDIR /src
# The whole context (see .dockerignore): Cargo checks every target the manifest names.
COPY . .
# `kubernetes`: the pod role label (`[kubernetes] role_label`).
RUN cargo build --release --locked --features kubernetes --bin leaderd && strip target/release/leaderd

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --home-dir /var/lib/leaderd --create-home leaderd
COPY --from=build /src/target/release/leaderd /usr/local/bin/leaderd
COPY config/leaderd.toml /etc/leaderd/leaderd.toml
USER 10001:10001
WORKDIR /var/lib/leaderd
ENTRYPOINT ["/usr/local/bin/leaderd"]
CMD ["run", "--config", "/etc/leaderd/leaderd.toml"]
