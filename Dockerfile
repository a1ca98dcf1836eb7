# trainbot: the Slack bot, its launch workers and the status poller in one process.
# Secrets (Slack tokens, routing keys) come from the environment at run time and
# the SSH key and config are mounted read-only; nothing secret is baked in.
# See docker-compose.yml and README.md "Running in production".
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The bot reaches login nodes with asyncssh: no ssh client binary is needed.
WORKDIR /build
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY commands ./commands
COPY cluster ./cluster
RUN pip install . && rm -rf /build

RUN groupadd --system --gid 10001 trainbot \
    && useradd --system --uid 10001 --gid trainbot --create-home \
        --home-dir /home/trainbot --shell /usr/sbin/nologin trainbot

ENV TRAINBOT_CONFIG=/config/trainbot.yaml \
    TRAINBOT_HTTP_HOST=0.0.0.0 \
    TRAINBOT_HTTP_PORT=3000

USER trainbot
WORKDIR /home/trainbot
EXPOSE 3000

# /healthz answers 200 while Redis and the worker loop are alive.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('TRAINBOT_HTTP_PORT', '3000'), timeout=4)"]

# trainbot handles SIGTERM: finishes or hands back in-flight work, then exits.
STOPSIGNAL SIGTERM
ENTRYPOINT ["trainbot"]
CMD ["serve"]
