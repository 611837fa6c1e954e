#!/usr/bin/env bash
# Regenerates the image's locks, each package pinned with the hashes of all its published files (so the
# build installs with --require-hashes on any platform):
#   server.lock  every package of the `server` extra: the image's runtime venv, exactly;
#   build.lock   what builds the project's wheel (build.in), in a throw-away venv of the build stage.
# Run it after changing the server dependencies in pyproject.toml, and commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.cache/lock-tools
if [[ ! -x $venv/bin/pip-compile ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet pip-tools==7.6.2
fi
# Resolve against the package index alone: no machine-local wheel folders or extra indexes.
PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS='' "$venv/bin/pip-compile" --quiet --extra server --generate-hashes \
    --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links \
    --output-file requirements/server.lock pyproject.toml
PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS='' "$venv/bin/pip-compile" --quiet --generate-hashes --strip-extras \
    --allow-unsafe --no-emit-index-url --no-emit-find-links \
    --output-file requirements/build.lock requirements/build.in
