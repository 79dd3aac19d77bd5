#!/usr/bin/env bash
# The main job: sets up, builds, and runs `python -m detops report`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/build.sh" >/dev/null
cd "$root"
exec "$root/.venv/bin/python" -m detops report "$@"
