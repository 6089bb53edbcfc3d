# syntax=docker/dockerfile:1
# One image for both halves of Lockstep: `lockstep operator` and the injected `lockstep sidecar`.
#
#   docker build -t ghcr.io/lockstep-dev/lockstep:0.2.0 .
#
# The tag is the chart's appVersion, which is Lockstep's version (lockstep/__init__.py __version__; a test
# keeps them and LOCKSTEP_VERSION below equal); tools/image/build.sh names the image the same way.
#
# The base is pinned by version tag (Python 3.11.7 on Debian 12 "bookworm", slim variant), not by
# digest: a digest pin would be stronger but cannot be verified from this repository's CI, which has
# no container engine. Pin the digest in your own build pipeline if you need reproducible layers.
# `make image` builds this same file without docker (buildah) on a base made from Debian's own
# python3 packages, passed as --build-arg PYTHON_IMAGE: so every step calls `python3` and installs
# into a venv (Debian's python3 has no `python`/`pip` commands and is externally managed, PEP 668).
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

# Stage 1: build the wheel and install it, with the runtime dependencies its metadata names, into the
# venv /opt/lockstep. Build tools (the `build` package, pip, setuptools) stay in this stage.
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
RUN python3 -m venv /opt/build \
    && /opt/build/bin/pip install --no-cache-dir "build>=1.0" \
    && python3 -m venv --without-pip /opt/lockstep \
    && groupadd --system --gid 65532 lockstep \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin lockstep
# The runtime dependencies first, from pyproject.toml alone, so that a change to the code reuses this layer.
COPY pyproject.toml ./
RUN python3 -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")' \
        > /tmp/requirements.txt \
    && /opt/build/bin/pip --python /opt/lockstep/bin/python install --no-cache-dir -r /tmp/requirements.txt
COPY README.md ./
COPY lockstep/ lockstep/
RUN /opt/build/bin/python -m build --wheel --outdir /dist . \
    && /opt/build/bin/pip --python /opt/lockstep/bin/python install --no-cache-dir /dist/*.whl

# Stage 2: the runtime. Only the venv and the user's passwd/group entries are copied (both stages have
# the same base); no RUN, so no compiler, no pip, no build package, no source tree, no build-time mounts.
FROM ${PYTHON_IMAGE} AS runtime
# Lockstep's version, as `lockstep --version` prints it (tests/unit/test_version.py keeps the default equal to
# lockstep.__version__); a release pipeline may pass the same value with --build-arg.
ARG LOCKSTEP_VERSION=0.2.0
LABEL org.opencontainers.image.title="lockstep" \
      org.opencontainers.image.version="${LOCKSTEP_VERSION}" \
      org.opencontainers.image.source="https://github.com/lockstep-dev/lockstep" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/lockstep/bin:$PATH
COPY --from=build /etc/passwd /etc/group /etc/
COPY --from=build /opt/lockstep /opt/lockstep
# Numeric uid so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532
WORKDIR /tmp
# 8443 reports, 9443 admission webhooks, 8080 operator metrics, 8081 operator health, 9090 sidecar.
EXPOSE 8443 9443 8080 8081 9090
ENTRYPOINT ["lockstep"]
CMD ["--help"]
