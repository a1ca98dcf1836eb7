# trainbot: one image for every role (trainbot serve --role all|web|worker|poller).
# Secrets (Slack tokens, routing keys) come from the environment or from files
# (NAME_FILE, e.g. Docker secrets) at run time; the SSH key and config are
# mounted read-only; nothing secret is baked in.
# See docker-compose.yml and docs/operations.md "Running in production".

# The base image, pinned by digest: python:3.11-slim-bookworm (the multi-platform
# index digest, Python 3.11.16). To refresh it: `docker buildx imagetools inspect
# python:3.11-slim-bookworm` (or `docker pull python:3.11-slim-bookworm` and read
# RepoDigests), then replace the digest here; both stages use this one argument.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:0bee7276f83efd4a1ee05bbbf4281d95ed28e079220a9457f25a93e3f1e3c31b

# -- build: every dependency from the lock file (pinned, hash-checked), then trainbot.
FROM ${PYTHON_IMAGE} AS build
ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/trainbot
WORKDIR /build
COPY requirements.lock ./
RUN /opt/trainbot/bin/pip install --require-hashes --only-binary=:all: -r requirements.lock
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY commands ./commands
COPY cluster ./cluster
# trainbot's own wheel, built with the base image's setuptools and wheel (pinned with
# it): nothing unpinned is downloaded.
RUN python -m pip wheel --no-deps --no-build-isolation --wheel-dir /build/dist . \
    && /opt/trainbot/bin/pip install --no-deps /build/dist/trainbot-*.whl \
    && /opt/trainbot/bin/pip check

# -- run: the virtualenv only, as an unprivileged user.
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/trainbot/bin:$PATH \
    TRAINBOT_CONFIG=/config/trainbot.yaml \
    TRAINBOT_HTTP_HOST=0.0.0.0 \
    TRAINBOT_HTTP_PORT=3000

# The bot reaches login nodes with asyncssh: no ssh client binary is needed.
RUN groupadd --system --gid 10001 trainbot \
    && useradd --system --uid 10001 --gid trainbot --create-home \
        --home-dir /home/trainbot --shell /usr/sbin/nologin trainbot
COPY --from=build /opt/trainbot /opt/trainbot

USER 10001:10001
WORKDIR /home/trainbot
EXPOSE 3000

# Every role answers /healthz: 200 while Redis and its parts are alive.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('TRAINBOT_HTTP_PORT', '3000'), timeout=4)"]

# trainbot handles SIGTERM: finishes or hands back in-flight work, then exits.
STOPSIGNAL SIGTERM
ENTRYPOINT ["trainbot"]
CMD ["serve"]
