# One image for every process of the Events API:
#   docker build -t events-api .
#   docker run … events-api                  # serve (the default command) on 0.0.0.0:8000
#   docker run … events-api relay            # a relay; run several
#   docker run … events-api migrate          # bring the database schema up to date, then exit
# Configuration comes from EVENTS_API_* environment variables (see README). The image runs as an unprivileged
# user and writes nothing to its file system.

# The one place where the Python base image is pinned (both stages below derive from it).
FROM python:3.11.10-slim-bookworm AS python

# --- build: the application and its dependencies in a virtualenv, installed from wheels ---------------------------
FROM python AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/events-api
WORKDIR /src
COPY pyproject.toml README.md ./
COPY events_api ./events_api
COPY relay ./relay
RUN /opt/events-api/bin/pip install --no-cache-dir .

# --- runtime: the virtualenv only; no compiler, no pip cache, no sources -------------------------------------------
FROM python AS runtime
ENV PATH=/opt/events-api/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN useradd --system --user-group --uid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin events-api
COPY --from=build /opt/events-api /opt/events-api
USER 10001:10001
EXPOSE 8000
# Liveness of `serve` on its default port. Containers that run `relay` or `migrate` switch it off (compose does).
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
ENTRYPOINT ["events-api"]
CMD ["serve", "--host", "0.0.0.0"]
