#!/usr/bin/env bash
# A headless browser for the web view's test (tests/inspect/test_serve_browser.py):
# Debian's Chromium and its matching chromedriver (Debian 12, as root). Idempotent.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium chromium-driver >/dev/null
fi
echo "browser: $(chromium --version 2>/dev/null), $(chromedriver --version | cut -d' ' -f1-2)"
