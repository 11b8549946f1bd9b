# probity as a container: `docker build -t probity .`, then
# `docker run -p 8080:8080 -p 9464:9464 -e OPENAI_API_KEY probity`.
# The image runs as a non-root user on the configuration at
# /etc/probity/probity.toml (listening on every interface; replace it with a
# mounted file or set PROBITY_CONFIG).

FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY config ./config
# Cargo.toml names the benches: their sources must be present to build.
COPY benches ./benches
# Bucket capture stores are cargo features: `--build-arg FEATURES=s3`
# (or gcs, azure) builds them in.
ARG FEATURES=""
RUN cargo build --release --locked --bin probity --features "$FEATURES"

FROM debian:bookworm-slim
ARG FEATURES=""
# Upstream TLS uses the web PKI roots compiled into the binary: no CA bundle
# is needed, but for a bucket's client, which reads the system's.
RUN if [ -n "$FEATURES" ]; then apt-get update -qq \
      && apt-get install -y -qq --no-install-recommends ca-certificates \
      && rm -rf /var/lib/apt/lists/*; fi
RUN useradd --system --uid 10001 --no-create-home probity \
    && mkdir -p /etc/probity /var/lib/probity/captures \
    && chown 10001 /var/lib/probity/captures
COPY --from=build /src/target/release/probity /usr/local/bin/probity
COPY deploy/container/probity.toml /etc/probity/probity.toml
ENV PROBITY_CONFIG=/etc/probity/probity.toml
# Captures outlive the container on this volume.
VOLUME /var/lib/probity/captures
USER 10001
EXPOSE 8080 9464
# No curl in the image: probity asks its own /healthz.
HEALTHCHECK --interval=10s --timeout=3s CMD ["/usr/local/bin/probity", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/probity"]
