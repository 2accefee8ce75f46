#!/usr/bin/env bash
# Run the official Python client suite (pulsar-client-python's tests/: pulsar_test.py,
# schema_test.py, reader_test.py, table_view_test.py, asyncio_test.py) against Horae configured
# as that suite's CI configures Pulsar: its own test-conf/standalone-ssl.conf, read as is (Horae
# skips the Pulsar-only keys with one warning), and the setup of its
# build-support/start-test-service-inside-container.sh (secret key, token.txt for the subject
# token-principal copied to tests/.test-token.txt, the tenants/namespaces/permissions).
# As there, three settings come from outside the file: tokenSecretKey (the file points into
# Pulsar's container), basicAuthConf (Pulsar's -Dpulsar.auth.basic.conf=test-conf/.htpasswd)
# and dataDir, through HORAE_<key> environment variables.
#
# NOT part of CI: it needs a checkout of the suite. The suite hard-codes localhost:6650/6651/
# 8080/8443, so by default the script re-runs itself in a private network namespace
# (`unshare -n`, root needed) where those ports are free whatever runs on the host.
#
# Usage:  tests/compat/run_official_suite.sh SUITE_TESTS_DIR [pytest args...]
#   e.g.  tests/compat/run_official_suite.sh /tmp/pcp/tests -k "tls or auth"
# Environment:
#   HORAE_PYTHON  python with Horae importable (default: python3); the repo root is put first
#                 on PYTHONPATH so the checkout's code runs
#   SUITE_PYTHON  python with pulsar-client and pytest (default: python3)
#   ISOLATE=0     run on the host's network (the ports above must be free)
#   SUITE_FILES   the suite's test files (default: the five above)
set -euo pipefail

SUITE=$(cd "${1:?usage: $0 SUITE_TESTS_DIR [pytest args...]}" && pwd)
shift
REPO=$(cd "$(dirname "$0")/../.." && pwd)
HORAE_PYTHON=${HORAE_PYTHON:-python3}
SUITE_PYTHON=${SUITE_PYTHON:-python3}

if [[ "${ISOLATE:-1}" == 1 && -z "${HORAE_SUITE_ISOLATED:-}" ]]; then
    exec unshare -n env HORAE_SUITE_ISOLATED=1 bash -c 'ip link set lo up && exec "$0" "$@"' \
        "$0" "$SUITE" "$@"
fi

WORK=$(mktemp -d)
HORAE_PID=""
cleanup() {
    if [[ -n "$HORAE_PID" ]]; then
        kill "$HORAE_PID" 2>/dev/null || true
        wait "$HORAE_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
horae() { "$HORAE_PYTHON" -m broker "$@"; }

# -- keys and tokens (as `bin/pulsar tokens ...` in the suite's script)
horae tokens create-secret-key --output "$WORK/secret.key"
horae tokens create --subject token-principal --secret-key "file://$WORK/secret.key" \
    > "$SUITE/.test-token.txt"
TOKEN=$(horae tokens create --subject superUser --secret-key "file://$WORK/secret.key")

# -- the broker, started in the suite's tests/ directory (the config's paths are relative to it)
(cd "$SUITE" && HORAE_tokenSecretKey="file://$WORK/secret.key" HORAE_dataDir="$WORK/data" \
    HORAE_basicAuthConf=test-conf/.htpasswd \
    exec "$HORAE_PYTHON" -m broker serve --config test-conf/standalone-ssl.conf \
    > "$WORK/horae.log" 2>&1) &
HORAE_PID=$!
for _ in $(seq 1 100); do
    curl -sf http://localhost:8080/metrics > /dev/null && break
    kill -0 "$HORAE_PID" 2>/dev/null || { cat "$WORK/horae.log"; exit 1; }
    sleep 0.2
done

# -- the suite's REST setup. Pulsar answers PUT (create) on an existing cluster, tenant or
# namespace with 409, so the ones a fresh broker already has are updated with Pulsar's POST.
rest() {  # METHOD PATH BODY
    local code
    code=$(curl -s -o "$WORK/rest.out" -w '%{http_code}' -X "$1" \
        -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
        "http://localhost:8080/admin/v2/$2" -d "$3")
    echo "$1 $2 -> $code"
    [[ "$code" == 2* ]] || { cat "$WORK/rest.out"; echo; exit 1; }
}
rest POST clusters/standalone '{"serviceUrl": "http://localhost:8080/",
  "serviceUrlTls": "https://localhost:8443/", "brokerServiceUrl": "pulsar://localhost:6650/",
  "brokerServiceUrlTls": "pulsar+ssl://localhost:6651/"}'
rest POST tenants/public '{"adminRoles": ["anonymous"], "allowedClusters": ["standalone"]}'
rest POST namespaces/public/default/permissions/anonymous '["produce", "consume"]'
rest PUT namespaces/public/default-2 '{"auth_policies": {"namespace_auth":
  {"anonymous": ["produce", "consume"]}}, "replication_clusters": ["standalone"]}'
rest PUT tenants/private '{"adminRoles": [], "allowedClusters": ["standalone"]}'
rest PUT namespaces/private/auth '{"auth_policies": {"namespace_auth":
  {"token-principal": ["produce", "consume"]}}, "replication_clusters": ["standalone"]}'

# -- the suite
status=0
read -r -a files <<< "${SUITE_FILES:-pulsar_test.py schema_test.py reader_test.py table_view_test.py asyncio_test.py}"
(cd "$SUITE" && "$SUITE_PYTHON" -m pytest "${files[@]}" -p no:cacheprovider "$@") || status=$?
if [[ $status != 0 ]]; then
    echo "---- last Horae log lines"
    tail -n 40 "$WORK/horae.log"
fi
exit $status
