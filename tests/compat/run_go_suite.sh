#!/usr/bin/env bash
# Run the Go client's own integration suite (github.com/apache/pulsar-client-go: the tests of its
# `pulsar` and `pulsaradmin/pkg/admin` packages) against Horae configured as that suite's CI
# configures Pulsar: its own integration-tests/conf/standalone.conf read as is (TLS listeners on
# 6651/8443, token + basic + TLS authentication, authorization, maxMessageSize=1048576; the
# Pulsar-only keys are skipped with one warning), its certificates and its pre-made tokens
# (integration-tests/tokens: secret.key, token.txt for token-principal, admin-token), and the
# setup of its scripts/pulsar-test-service-start.sh (tenant public administered by anonymous,
# produce/consume for anonymous on public/default, tenant private, namespace private/auth with
# produce/consume for token-principal). As there, the file paths the config points into
# Pulsar's container (/pulsar/certs, /pulsar/tokens, the .htpasswd of
# -Dpulsar.auth.basic.conf) and dataDir come from outside the file, as HORAE_<key> variables.
#
# The module comes from the Go module proxy (`go mod download -json`) into the module cache and
# is copied to a temporary directory; its test binaries are built there (`go test -c -trimpath`,
# so Go's build cache serves the next run whatever the directory, on the host's network, which
# the proxy needs). The suite hard-codes localhost:6650/6651/8080/8443,
# so by default the broker and the tests then run in a private network namespace
# (`unshare -n`, root needed) where those ports are free whatever runs on the host.
#
# Each top-level test runs in its own test-binary process under `go tool test2json`, bounded by
# -timeout, so one hanging test costs only itself. The report (tests/compat/go_report.py) lists
# passed / failed / skipped by test, the end of each failure's output, and counts the
# transaction tests apart (they fail the run only with -txn).
#
# The suite's CI config enables the transaction coordinator (transactionCoordinatorEnabled=true),
# and Horae reads it as is. -txn selects the client's transaction tests (TestTxn_* of the pulsar
# package, which need the coordinator and the v3 transactions admin REST) and makes their
# failures fail the run. -broker pulsar runs the same tests against Apache Pulsar 4.0 standalone
# (the JVM of bench/pulsar_peer.py, Java 17 and the jars of bench/peers/pulsar) started with that
# same standalone.conf (tests/compat/go_suite_pulsar.py), to know what passes on Pulsar itself.
#
# NOT part of CI as a whole (tens of minutes); tests/compat/test_go_suite_sample.py runs a sample.
#
# Usage:  tests/compat/run_go_suite.sh [-run REGEXP] [-timeout DURATION] [-pkg PACKAGE]...
#                                      [-out DIR] [-txn] [-broker horae|pulsar]
#   -run      which tests (Go's -run syntax, matched against top-level test names; default all)
#   -txn      the transaction tests only (-run '^TestTxn_' -pkg pulsar), their failures count
#   -broker   horae (default) or pulsar (Apache Pulsar 4.0 standalone, same config)
#   -timeout  per test (Go duration, default 5m); the whole suite takes ~20 min
#   -pkg      a package of the module (repeatable; default: pulsar pulsaradmin/pkg/admin)
#   -out      keep the events (PKG.jsonl), results.json, report.txt and horae.log there
#   e.g.  tests/compat/run_go_suite.sh -run 'TestProducerConsumer|TestReader' -out /tmp/go-suite
#         tests/compat/run_go_suite.sh -txn -broker pulsar -out /tmp/go-txn-pulsar
# Environment:
#   GO_CLIENT_VERSION  module version (default v0.19.0)
#   HORAE_PYTHON       python with Horae importable (default: python3); the repo root is put first
#                      on PYTHONPATH so the checkout's code runs
#   ISOLATE=0          run on the host's network (the ports above must be free)
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
HORAE_PYTHON=${HORAE_PYTHON:-python3}
MODULE=github.com/apache/pulsar-client-go
VERSION=${GO_CLIENT_VERSION:-v0.19.0}

RUN="" TIMEOUT=5m OUT="" PKGS=() TXN=0 BROKER=horae
args=("$@")
while [[ $# -gt 0 ]]; do
    case "$1" in
        -run) RUN=$2; shift 2 ;;
        -timeout) TIMEOUT=$2; shift 2 ;;
        -pkg) PKGS+=("$2"); shift 2 ;;
        -out) OUT=$(mkdir -p "$2" && cd "$2" && pwd); shift 2 ;;
        -txn) TXN=1; shift ;;
        -broker) BROKER=$2; shift 2 ;;
        *) echo "unknown argument: $1 (see the usage at the top of $0)" >&2; exit 2 ;;
    esac
done
case "$BROKER" in horae|pulsar) ;; *) echo "-broker: horae or pulsar, not $BROKER" >&2; exit 2 ;; esac
if [[ $TXN == 1 ]]; then
    RUN=${RUN:-^TestTxn_}
    [[ ${#PKGS[@]} -gt 0 ]] || PKGS=(pulsar)
fi
[[ ${#PKGS[@]} -gt 0 ]] || PKGS=(pulsar pulsaradmin/pkg/admin)

# ---- phase 1, on the host's network: the module, its dependencies, the test binaries
if [[ -z "${HORAE_GO_SUITE_WORK:-}" ]]; then
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"' EXIT
    DIR=$(cd "$WORK" && go mod download -json "$MODULE@$VERSION" \
        | python3 -c 'import json, sys; d = json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error", "no Dir")))')
    cp -r "$DIR" "$WORK/src" && chmod -R u+w "$WORK/src"
    mkdir -p "$WORK/bin"
    for pkg in "${PKGS[@]}"; do
        echo "-- building the tests of $MODULE/$pkg@$VERSION"
        (cd "$WORK/src" && go test -c -trimpath -o "$WORK/bin/${pkg//\//_}.test" "./$pkg")
    done
    go build -o "$WORK/bin/test2json" cmd/test2json
    trap - EXIT
    if [[ "${ISOLATE:-1}" == 1 ]]; then
        exec unshare -n env HORAE_GO_SUITE_WORK="$WORK" \
            bash -c 'ip link set lo up && exec "$0" "$@"' "$0" "${args[@]}"
    fi
    export HORAE_GO_SUITE_WORK=$WORK
fi

# ---- phase 2 (in the private namespace by default): the broker, its setup, the tests
WORK=$HORAE_GO_SUITE_WORK
SRC=$WORK/src
IT=$SRC/integration-tests
HORAE_PID=""
HORAE_LOG=${OUT:-$WORK}/horae.log
cleanup() {
    if [[ -n "$HORAE_PID" ]]; then
        kill "$HORAE_PID" 2>/dev/null || true
        wait "$HORAE_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
if [[ $BROKER == pulsar ]]; then
    # Detached JVM (not a child of this shell): stopped by pid, SIGKILL after 20 s.
    HORAE_LOG=$WORK/pulsar/pulsar.log
    HORAE_PID=$("$HORAE_PYTHON" "$REPO/tests/compat/go_suite_pulsar.py" start "$IT" "$WORK/pulsar") \
        || { tail -n 60 "$HORAE_LOG" 2>/dev/null; exit 1; }
    cleanup() {
        kill "$HORAE_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$HORAE_PID" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$HORAE_PID" 2>/dev/null || true
        [[ -z "$OUT" ]] || cp "$HORAE_LOG" "$OUT/pulsar.log" 2>/dev/null || true
        rm -rf "$WORK"
    }
    trap cleanup EXIT
else
    HORAE_tlsCertificateFilePath=$IT/certs/broker-cert.pem HORAE_tlsKeyFilePath=$IT/certs/broker-key.pem \
        HORAE_tlsTrustCertsFilePath=$IT/certs/cacert.pem HORAE_tokenSecretKey="file://$IT/tokens/secret.key" \
        HORAE_basicAuthConf=$IT/conf/.htpasswd HORAE_dataDir="$WORK/data" \
        "$HORAE_PYTHON" -m broker serve --config "$IT/conf/standalone.conf" > "$HORAE_LOG" 2>&1 &
    HORAE_PID=$!
    for _ in $(seq 1 150); do
        curl -sf http://localhost:8080/metrics > /dev/null && break
        kill -0 "$HORAE_PID" 2>/dev/null || { cat "$HORAE_LOG"; exit 1; }
        sleep 0.2
    done
fi

# -- scripts/pulsar-test-service-start.sh's pulsar-admin calls (made there as the super-user
# "admin"; here with its admin-token). Pulsar answers PUT (create) on an existing tenant with
# 409, so public, which a fresh broker has, is updated with POST as `tenants update` does.
TOKEN=$(cat "$IT/tokens/admin-token")
rest() {  # METHOD PATH BODY
    local code
    code=$(curl -s -o "$WORK/rest.out" -w '%{http_code}' -X "$1" \
        -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
        "http://localhost:8080/admin/v2/$2" -d "$3")
    echo "$1 $2 -> $code"
    [[ "$code" == 2* ]] || { cat "$WORK/rest.out"; echo; exit 1; }
}
rest POST tenants/public '{"adminRoles": ["anonymous"], "allowedClusters": ["standalone"]}'
rest POST namespaces/public/default/permissions/anonymous '["produce", "consume"]'
rest PUT tenants/private '{"adminRoles": [], "allowedClusters": ["standalone"]}'
rest PUT namespaces/private/auth '{}'
rest POST namespaces/private/auth/permissions/token-principal '["produce", "consume"]'

# -- the tests, one process each, from the package's directory (the suite's paths are relative)
events=()
TESTS=${OUT:-$WORK}/tests.tsv
: > "$TESTS"
for pkg in "${PKGS[@]}"; do
    bin=$WORK/bin/${pkg//\//_}.test
    log=${OUT:-$WORK}/${pkg//\//_}.jsonl
    events+=("$log")
    : > "$log"
    mapfile -t tests < <(cd "$SRC/$pkg" && "$bin" -test.list "${RUN:-.}" | grep '^Test')
    echo "-- $MODULE/$pkg: ${#tests[@]} tests"
    i=0
    for t in "${tests[@]}"; do
        i=$((i + 1))
        printf '%s\t%s\n' "$MODULE/$pkg" "$t" >> "$TESTS"
        rc=0
        (cd "$SRC/$pkg" && "$WORK/bin/test2json" -t -p "$MODULE/$pkg" "$bin" -test.v=test2json \
            -test.run "^${t}\$" -test.timeout "$TIMEOUT" -test.count 1) >> "$log" 2>&1 || rc=$?
        echo "[$i/${#tests[@]}] $t: $([[ $rc == 0 ]] && echo ok || echo FAIL)"
        if ! kill -0 "$HORAE_PID" 2>/dev/null; then
            echo "The broker exited during $t:"; tail -n 60 "$HORAE_LOG"; break 2
        fi
    done
done

status=0
report_args=("${events[@]}" --tests "$TESTS")
[[ -z "$OUT" ]] || report_args+=(--json "$OUT/results.json")
[[ $TXN == 0 ]] || report_args+=(--txn)
"$HORAE_PYTHON" "$REPO/tests/compat/go_report.py" "${report_args[@]}" \
    | tee "${OUT:-$WORK}/report.txt" || status=$?
echo "$BROKER log: $(grep -c 'Traceback' "$HORAE_LOG" || true) tracebacks," \
    "$(grep -c ' ERROR ' "$HORAE_LOG" || true) ERROR lines"
exit $status
