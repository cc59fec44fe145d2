#!/usr/bin/env bash
# Runs `make STAGE` for each stage named, in order, timing each, and prints a
# table of the times at the end: what `make test` is made of, so that a
# stage that grows slow is seen in every run. A failed stage does not stop
# the later ones (each reports what it can), but the run fails.
# Usage: scripts/test-stages.sh STAGE...
set -u
names=() times=() results=()
failed=0
start=$SECONDS
for stage in "$@"; do
  t0=$SECONDS
  if make --no-print-directory "$stage"; then r=ok; else r=FAILED; failed=1; fi
  names+=("$stage") times+=($((SECONDS - t0))) results+=("$r")
done
echo
echo "== make test: time per stage"
for i in "${!names[@]}"; do
  printf '   %-22s %4dm%02ds  %s\n' "${names[$i]}" $((times[i] / 60)) $((times[i] % 60)) "${results[$i]}"
done
total=$((SECONDS - start))
printf '   %-22s %4dm%02ds  %s\n' total $((total / 60)) $((total % 60)) "$([ $failed = 0 ] && echo ok || echo FAILED)"
exit $failed
