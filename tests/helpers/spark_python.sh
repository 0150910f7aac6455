#!/bin/sh
# The tests' PYSPARK_PYTHON: runs $MV_SPARK_PYTHON with pyspark and py4j imported from
# site-packages, where their bytecode is cached, rather than from the zips Spark puts first on
# PYTHONPATH. Python compiles a zip's modules again in every process that imports them (a zip
# holds no bytecode cache): about 1 CPU-s for each daemon, planner and streaming source runner
# Spark starts. The zips hold the same code as the installed package. Daemons run through
# spark_daemon.py, which imports first what their workers import alike.
set -f
kept=
IFS=:
for entry in ${PYTHONPATH:-}; do
    case "$entry" in
        */pyspark.zip | */py4j-*-src.zip) ;;
        *) kept=${kept:+$kept:}$entry ;;
    esac
done
unset IFS
if [ -n "$kept" ]; then export PYTHONPATH="$kept"; else unset PYTHONPATH; fi
python=${MV_SPARK_PYTHON:?the Python to run}
if [ "${1:-}" = -m ] && [ "${2:-}" = pyspark.daemon ]; then
    shift 2  # a daemon: the same, with what its forked workers import alike imported once
    exec "$python" "$(dirname "$0")/spark_daemon.py" "$@"
fi
exec "$python" "$@"
