# syntax=docker/dockerfile:1
# One image for the broker (`xmq`) and the operator (`xmq-operator`).
#   docker build -t xmq:0.1.0 .
#   broker:   docker run --rm -p 1884:1884 xmq:0.1.0 xmq serve
#   operator: command [xmq-operator] (see charts/xmq)

ARG PYTHON_VERSION=3.11

# ---- build: the project as a wheel (hot modules compiled), plus wheels of every dependency ---
FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md ./
COPY broker ./broker
COPY operator ./operator
COPY scripts/build-native ./scripts/build-native
# The hot modules compiled with mypyc next to their source (docs/architecture.md); the wheel
# carries the extensions and native-build.json (no .gitignore in this context to drop them).
# mypy type-checks the imports, hence the project installed first. A failed compile leaves
# the pure-Python build: `xmq --version` and xmq_build_info say which.
RUN pip install "mypy==2.4.1" setuptools . \
 && python scripts/build-native --require \
 && pip wheel --wheel-dir /wheels .

# ---- runtime: slim, non-root, only the installed wheels ------------------------------------
FROM python:${PYTHON_VERSION}-slim-bookworm AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 10001 xmq \
 && useradd --system --uid 10001 --gid xmq --home-dir /home/xmq --create-home \
      --shell /usr/sbin/nologin xmq
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels xmq \
 && mkdir -p /etc/xmq && chown xmq:xmq /etc/xmq
USER 10001:10001
WORKDIR /home/xmq
# MQTT, MQTT over TLS (8883: the operator's pods; a `xmq serve` tls listener without a port
# binds 8884), cluster links, health/metrics (pod contract: broker/xmq/contract/pod.py)
EXPOSE 1884 8883 7884 9090
ENTRYPOINT []
CMD ["xmq", "serve"]
