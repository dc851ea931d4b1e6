#!/bin/bash
# The Wharf image's entry point: one image, one command per part.
#
#   api [ARGS]       the REST API and console: python -m controlplane
#   gateway [ARGS]   the gateway: python -m gateway
#   worker [ARGS]    this host's worker, a node of the fleet: python manage.py worker
#   migrate [ARGS]   apply the database migrations, then exit: python manage.py migrate
#   anything else    run as given (python manage.py create_api_token --name ops, bash, ...)
#
# ARGS follow the defaults below, so a later --host or --port wins. Settings come from the
# environment (the README's configuration table), as for every other way of running Wharf;
# api and gateway serve HTTPS when WHARF_TLS_CERT and WHARF_TLS_KEY name a certificate and key.
set -euo pipefail

command=${1:-api}
[[ $# -gt 0 ]] && shift
case $command in
    api) exec python -m controlplane --host 0.0.0.0 --port 8000 "$@" ;;
    gateway) exec python -m gateway --host 0.0.0.0 --port 9000 "$@" ;;
    worker) exec python manage.py worker "$@" ;;
    migrate) exec python manage.py migrate --no-input "$@" ;;
    *) exec "$command" "$@" ;;
esac
