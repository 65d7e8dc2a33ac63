#!/usr/bin/env bash
# Runs one part of a longer run (make test-all) and prints how long it took: `scripts/timed.sh NAME COMMAND...`.
# With TIMES_FILE set, the line is also added there, for the run's closing table. Exits with the command's status.
set -u
name=$1
shift
start=$(date +%s)
"$@"
status=$?
elapsed=$(($(date +%s) - start))
outcome=ok
[ "$status" -eq 0 ] || outcome="FAILED (exit $status)"
line=$(printf '%-34s %3dm%02ds  %s' "$name" $((elapsed / 60)) $((elapsed % 60)) "$outcome")
echo "== time: $line"
if [ -n "${TIMES_FILE:-}" ]; then echo "$line" >> "$TIMES_FILE"; fi
exit "$status"
