#!/usr/bin/env bash
# Installs Debian's chromium, the headless browser that renders the run report in its test
# (tests/tracking/test_report.py). Idempotent: exits 0 at once when `chromium` is on PATH.
# Playwright's browser download is not reachable here; Debian's package is (bookworm-security).
# Without root (or apt-get) it only warns: the browser tests then skip, unless
# SPADE_REQUIRE_CHROMIUM=1 (CI sets it) makes them fail.
set -euo pipefail

log() { echo "install_chromium: $*" >&2; }

if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    log "chromium is missing and installing it needs root and apt-get; the report's browser" \
        "tests will skip (apt-get install chromium to run them)"
    exit 0
fi

# Serialise concurrent callers: two apt-get runs would fight over dpkg's lock.
exec 9>/var/lock/spade-install-chromium.lock
flock -w 600 9 || { log "timed out waiting for another install_chromium.sh"; exit 1; }
command -v chromium >/dev/null 2>&1 && exit 0

log "installing chromium with apt-get"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
apt-get install -y -q --no-install-recommends chromium >&2
command -v chromium >/dev/null 2>&1 || { log "chromium installed but not on PATH"; exit 1; }
log "installed $(chromium --version 2>/dev/null || echo chromium)"
