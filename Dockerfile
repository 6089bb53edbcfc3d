# syntax=docker/dockerfile:1
# One image for both halves of Lockstep: `lockstep operator` and the injected `lockstep sidecar`.
#
#   docker build -t ghcr.io/lockstep-dev/lockstep:0.1.0 .
#
# The base is pinned by version tag (Python 3.11.7 on Debian 12 "bookworm", slim variant), not by
# digest: a digest pin would be stronger but cannot be verified from this repository's CI, which has
# no container engine. Pin the digest in your own build pipeline if you need reproducible layers.
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

# Stage 1: build the wheel. Build tools live only here.
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
RUN pip install --no-cache-dir "build>=1.0"
COPY pyproject.toml README.md ./
COPY lockstep/ lockstep/
RUN python -m build --wheel --outdir /dist .

# Stage 2: the runtime. Only the wheel and its runtime dependencies (resolved from the wheel's
# metadata) are installed; no compiler, no pip cache, no source tree.
FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /dist/*.whl /tmp/wheels/
RUN pip install --no-cache-dir /tmp/wheels/*.whl \
    && rm -rf /tmp/wheels \
    && groupadd --system --gid 65532 lockstep \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin lockstep
# Numeric uid so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532
WORKDIR /tmp
# 8443 reports, 9443 admission webhooks, 8080 operator metrics, 8081 operator health, 9090 sidecar.
EXPOSE 8443 9443 8080 8081 9090
ENTRYPOINT ["lockstep"]
CMD ["--help"]
