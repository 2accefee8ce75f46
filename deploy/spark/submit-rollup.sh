#!/usr/bin/env bash
# Submit the Horae metrics rollup to a Spark cluster.
#
#   deploy/spark/submit-rollup.sh                       # the defaults below
#   INPUT=hdfs://namenode.example:8020/horae/metrics OUTPUT=hdfs://... deploy/spark/submit-rollup.sh
#   deploy/spark/submit-rollup.sh --window 5m,1h,1d     # extra args go to the job
#
# The job reads only the snapshot files (jobs/SCHEMA.md); copy <data>/metrics of every broker
# to storage the cluster can read (HDFS, S3 via s3a://, or a shared mount visible under the
# same path on every node), then point INPUT at it. Every setting is an environment variable;
# the host names below are placeholders.
#
# The job's modules import each other as the `jobs` package. This script zips that package
# (JOBS_ZIP, default build/horae-jobs.zip in the checkout) and passes the zip as --py-files:
# spark-submit puts it on the driver's PYTHONPATH and ships it to every executor.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"

SPARK_SUBMIT="${SPARK_SUBMIT:-spark-submit}"
SPARK_MASTER="${SPARK_MASTER:-spark://spark-master.example:7077}"
DEPLOY_MODE="${DEPLOY_MODE:-client}"            # standalone clusters run Python drivers in client mode
INPUT="${INPUT:-hdfs://namenode.example:8020/horae/metrics}"
OUTPUT="${OUTPUT:-hdfs://namenode.example:8020/horae/rollup}"
WINDOWS="${WINDOWS:-1m,1h}"
EXECUTOR_MEMORY="${EXECUTOR_MEMORY:-4g}"
EXECUTOR_CORES="${EXECUTOR_CORES:-2}"
TOTAL_EXECUTOR_CORES="${TOTAL_EXECUTOR_CORES:-8}"
DRIVER_MEMORY="${DRIVER_MEMORY:-2g}"
SHUFFLE_PARTITIONS="${SHUFFLE_PARTITIONS:-64}"
PYSPARK_PYTHON="${PYSPARK_PYTHON:-python3}"     # executors need Python 3.11+ (no Horae install needed)
JOBS_ZIP="${JOBS_ZIP:-$REPO/build/horae-jobs.zip}"

export PYSPARK_PYTHON

# The jobs package as jobs/*.py inside the zip (no caches, no docs).
mkdir -p "$(dirname "$JOBS_ZIP")"
python3 - "$REPO/jobs" "$JOBS_ZIP" <<'PY'
import sys, zipfile
from pathlib import Path
package, target = Path(sys.argv[1]), sys.argv[2]
with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
    for module in sorted(package.glob("*.py")):
        archive.write(module, f"jobs/{module.name}")
PY

exec "$SPARK_SUBMIT" \
  --master "$SPARK_MASTER" \
  --deploy-mode "$DEPLOY_MODE" \
  --name horae-metrics-rollup \
  --driver-memory "$DRIVER_MEMORY" \
  --executor-memory "$EXECUTOR_MEMORY" \
  --executor-cores "$EXECUTOR_CORES" \
  --total-executor-cores "$TOTAL_EXECUTOR_CORES" \
  --conf spark.sql.session.timeZone=UTC \
  --conf spark.sql.adaptive.enabled=true \
  --py-files "$JOBS_ZIP" \
  "$REPO/jobs/metrics_rollup.py" \
  --input "$INPUT" \
  --output "$OUTPUT" \
  --window "$WINDOWS" \
  --shuffle-partitions "$SHUFFLE_PARTITIONS" \
  "$@"
